"""Real protocol servers on 127.0.0.1 for the storage tests, and a proxy that injects faults.

- S3: moto's standalone server in a subprocess, with moto's IAM auth switched on,
  so wrong credentials are refused as AWS refuses them. The first requests (the
  IAM setup below) are unauthenticated; every one after needs the access key made here.
- GCS: gcp-storage-emulator in a subprocess (it checks no credentials).
- FaultProxy: a threaded HTTP/1.1 proxy in front of either, which fails a fraction
  of requests with 503 SlowDown (S3) or 503 (GCS), slows others down, or stays
  down; the jobs under test point their endpoint at it. It fails a request
  before forwarding it, never after: a failed request is one the server never
  applied, as with a real 503, so a client's retry is always correct to make.

The emulator answers one question of GCS's resumable-upload protocol wrongly,
and the proxy answers it as GCS does (`_ResumableSessions`): see there.
"""

from __future__ import annotations

import collections
import http.client
import http.server
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import boto3

REGION = "us-east-1"
# Setup requests moto serves before it starts checking credentials: create_user, put_user_policy, create_access_key.
_SETUP_REQUESTS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server for {url} did not start in {timeout}s")


class Server:
    def __init__(self, proc: subprocess.Popen, url: str):
        self.proc, self.url = proc, url

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_moto() -> tuple[Server, dict]:
    """moto with IAM auth on; returns the server and credentials it accepts."""
    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(_SETUP_REQUESTS))
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    server = Server(proc, url)
    try:
        _wait_http(f"{url}/moto-api/data.json", proc)
        iam = boto3.client(
            "iam", endpoint_url=url, region_name=REGION, aws_access_key_id="setup", aws_secret_access_key="setup"
        )
        iam.create_user(UserName="docembed")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="docembed", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="docembed")["AccessKey"]
    except BaseException:
        server.stop()
        raise
    return server, {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


def start_gcs() -> Server:
    port = free_port()
    code = (
        "import sys, time; from gcp_storage_emulator.server import create_server; "
        f"s = create_server('127.0.0.1', {port}, in_memory=True); s.start(); "
        "sys.stdin.read()"  # until the test closes our stdin, or kills us
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    server = Server(proc, url)
    try:
        _wait_http(f"{url}/", proc)
    except BaseException:
        server.stop()
        raise
    return server


def s3_client(endpoint: str, creds: dict):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
    )


class Servers:
    """moto and the GCS emulator, each behind a fault proxy: what the storage tests and `bench/commits.py` run on."""

    def __init__(self):
        self.moto, self.creds = start_moto()
        try:
            self.gcs = start_gcs()
        except BaseException:
            self.moto.stop()
            raise
        # The jobs reach each server through its proxy; the tests' own setup goes direct.
        self.proxies = {"s3": FaultProxy(self.moto.url, "s3"), "gs": FaultProxy(self.gcs.url, "gcs")}
        self.s3 = s3_client(self.moto.url, self.creds)

    def env(self, model_cache: Path) -> dict:
        return {
            **self.creds,
            "AWS_ENDPOINT_URL": self.proxies["s3"].url,
            "AWS_REGION": REGION,
            "STORAGE_EMULATOR_HOST": self.proxies["gs"].url,
            "DOCEMBED_MODEL_CACHE": str(model_cache),
        }

    def make_bucket(self, scheme: str, name: str) -> None:
        if scheme == "s3":
            self.s3.create_bucket(Bucket=name)
            return
        req = urllib.request.Request(
            f"{self.gcs.url}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(req).read()

    def reset_faults(self) -> None:
        for proxy in self.proxies.values():
            proxy.reset()

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        self.gcs.stop()
        self.moto.stop()


_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "expect",
}


class FaultProxy:
    """A fault proxy in a process of its own, forwarding to `target`, and this test's handle on it.

    Set `fail_rate` (requests failed with 503), `slow_rate` (requests delayed by
    `slow_seconds`), `down` (every request fails) and `list_limit` (listing requests
    after this many fail) as attributes; `counts` says
    what it did; `reset()` ends the faults and restarts the seeded sequence, so a run is repeatable.

    Its own process, because pyarrow's GcsFileSystem keeps the GIL through some
    requests (`open_input_file` waits for its metadata with it held): a proxy on
    a thread of the process making them could never answer.
    """

    _SETTINGS = ("fail_rate", "slow_rate", "slow_seconds", "down", "list_limit")

    def __init__(self, target: str, flavour: str, seed: int = 5):
        self._proc = subprocess.Popen(
            [sys.executable, __file__, target, flavour, str(seed)], stdout=subprocess.PIPE, text=True
        )
        self.url = self._proc.stdout.readline().strip()
        if not self.url:
            raise RuntimeError(f"fault proxy for {target} exited with {self._proc.wait()}")

    def __setattr__(self, name, value):
        if name in self._SETTINGS:
            self._control("POST", {name: value})
        else:
            super().__setattr__(name, value)

    @property
    def counts(self) -> collections.Counter:
        return collections.Counter(self._control("GET"))

    def reset(self) -> None:
        self._control("POST", {"reset": True})

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)

    def _control(self, method: str, settings: dict | None = None) -> dict:
        data = None if settings is None else json.dumps(settings).encode()
        req = urllib.request.Request(self.url + _CONTROL_PATH, data=data, method=method)
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read())


# A listing request: S3's ListObjectsV2, GCS's objects.list.
_LISTING = re.compile(r"[?&]list-type=2|^/storage/v1/b/[^/?]+/o(\?|$)")

# No bucket name starts with "_": this path never reaches the server behind.
_CONTROL_PATH = "/_fault-proxy"


class _ProxyServer:
    """The proxy itself (FaultProxy's process): a threaded HTTP/1.1 server forwarding to `target`."""

    def __init__(self, target: str, flavour: str, seed: int):
        self.target = target.replace("http://", "")
        self.flavour = flavour  # "s3" or "gcs": the shape of the error body
        self.settings = {"fail_rate": 0.0, "slow_rate": 0.0, "slow_seconds": 0.3, "down": False, "list_limit": None}
        self.counts = collections.Counter()
        self._seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._sessions = _ResumableSessions() if flavour == "gcs" else None
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # A response's headers and body leave in two writes: with Nagle's algorithm the body waits for the
            # client's delayed ACK of the headers, 40 ms a request (44 ms against 0.7 ms direct to the emulator).
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _any(self):
                if self.path == _CONTROL_PATH:
                    proxy._control(self)
                else:
                    proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _any

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def _control(self, h: http.server.BaseHTTPRequestHandler) -> None:
        body = _read_body(h)
        with self._lock:
            change = json.loads(body) if body else {}
            if change.pop("reset", False):
                self.settings.update(fail_rate=0.0, slow_rate=0.0, down=False, list_limit=None)
                self.counts.clear()
                self._rng = random.Random(self._seed)
            self.settings.update(change)
            payload = json.dumps(self.counts).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    def _decide(self, h: http.server.BaseHTTPRequestHandler) -> tuple[str, float]:
        """What to do with a request ("fail", "slow" or "pass"), and how long a slow one waits."""
        with self._lock:
            self.counts["requests"] += 1
            settings = self.settings
            if h.command == "GET" and _LISTING.search(h.path):
                self.counts["listings"] += 1
                if settings["list_limit"] is not None and self.counts["listings"] > settings["list_limit"]:
                    self.counts["failed"] += 1
                    return "fail", 0.0
            if settings["down"]:
                self.counts["failed"] += 1
                return "fail", 0.0
            r = self._rng.random()
            if r < settings["fail_rate"]:
                self.counts["failed"] += 1
                return "fail", 0.0
            if r < settings["fail_rate"] + settings["slow_rate"]:
                self.counts["slowed"] += 1
                return "slow", settings["slow_seconds"]
            return "pass", 0.0

    def _handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        body = _read_body(h)
        action, delay = self._decide(h)
        if action == "fail":
            if self.flavour == "s3":
                payload = (
                    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                    b"<Message>Please reduce your request rate.</Message><RequestId>fault</RequestId></Error>"
                )
                ctype = "application/xml"
            else:
                payload = json.dumps({"error": {"code": 503, "message": "Service Unavailable (injected)"}}).encode()
                ctype = "application/json"
            h.send_response(503)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(0 if h.command == "HEAD" else len(payload)))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(payload)
            return
        if action == "slow":
            time.sleep(delay)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP_BY_HOP}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(self.target, timeout=120)
        try:
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            dropped = (*_HOP_BY_HOP, "content-length", "server", "date")
            answer = [(k, v) for k, v in resp.getheaders() if k.lower() not in dropped]
            if self._sessions is not None:
                answer = self._sessions.answer(h.path, h.headers.get("Content-Range"), resp.status, answer)
            h.send_response(resp.status, resp.reason)
            for k, v in answer:
                h.send_header(k, v)
            length = resp.getheader("Content-Length") if h.command == "HEAD" else str(len(data))
            h.send_header("Content-Length", length or "0")
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(data)
        finally:
            conn.close()


class _ResumableSessions:
    """GCS resumable uploads through the proxy, answered as GCS answers them.

    pyarrow's GcsFileSystem (google-cloud-cpp) writes every object through a
    resumable session: a POST opens it, PUTs carry `Content-Range: bytes S-E/TOTAL`.
    When a PUT fails, the client asks what the session holds (a PUT with
    `Content-Range: bytes */*`) and resumes after the last byte of the 308's
    `Range: bytes=0-N`; GCS sends no Range header while it holds nothing.
    gcp-storage-emulator sends `Range: bytes=0-0` then: the client resumes at
    byte 1, and the emulator refuses that PUT ("Invalid Content-Range start:
    expected 0, got 1", a 400 the client takes as permanent), so an upload whose
    first PUT failed fails for good. Here the proxy remembers which sessions the
    emulator has taken bytes into (a forwarded PUT with a body that it answered
    with 308 or 2xx) and drops the Range header from the answer about any other.
    """

    def __init__(self):
        self._holding: set[str] = set()
        self._lock = threading.Lock()

    def answer(self, path: str, content_range: str | None, status: int, headers: list) -> list:
        upload_id = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query).get("upload_id")
        if not upload_id or not content_range:
            return headers
        session, asks = upload_id[0], content_range.strip().startswith("bytes */")
        with self._lock:
            if not asks and (status == 308 or 200 <= status < 300):
                self._holding.add(session)
            if asks and status == 308 and session not in self._holding:
                return [(k, v) for k, v in headers if k.lower() != "range"]
        return headers


class _QuietServer(http.server.ThreadingHTTPServer):
    """Clients that die mid-request (a SIGKILLed driver) are part of the tests, not errors."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _read_body(h: http.server.BaseHTTPRequestHandler) -> bytes | None:
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(h.rfile.read(size))
            h.rfile.readline()
    length = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(length) if length else (b"" if h.command in ("PUT", "POST", "PATCH") else None)


if __name__ == "__main__":
    # FaultProxy's process: `storage_servers.py TARGET FLAVOUR SEED`; prints its URL, serves until terminated.
    server = _ProxyServer(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    print(server.url, flush=True)
    server.serve_forever()
