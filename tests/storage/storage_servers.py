"""Real protocol servers on 127.0.0.1 for the storage tests, and a proxy that injects faults.

- S3: moto's standalone server in a subprocess, with moto's IAM auth switched on,
  so wrong credentials are refused as AWS refuses them. The first requests (the
  IAM setup below) are unauthenticated; every one after needs the access key made here.
- GCS: gcp-storage-emulator in a subprocess (it checks no credentials).
- FaultProxy: a threaded HTTP/1.1 proxy in front of either, which fails a fraction
  of requests with 503 SlowDown (S3) or 503 (GCS), slows others down, or stays
  down; the jobs under test point their endpoint at it.
"""

from __future__ import annotations

import collections
import http.client
import http.server
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request

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
        iam = boto3.client("iam", endpoint_url=url, region_name=REGION, aws_access_key_id="setup", aws_secret_access_key="setup")
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
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "expect"}


class FaultProxy:
    """Forwards HTTP to `target`; fails `fail_rate` of requests with 503, delays `slow_rate` of them.

    `down = True` fails every request. Counters say what it did. Seeded, so a run is repeatable.
    """

    def __init__(self, target: str, flavour: str, seed: int = 5):
        self.target = target.replace("http://", "")
        self.flavour = flavour  # "s3" or "gcs": the shape of the error body
        self.fail_rate = 0.0
        self.slow_rate = 0.0
        self.slow_seconds = 0.3
        self.down = False
        self.counts = collections.Counter()
        self._seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _any

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self._lock:
            self.fail_rate = self.slow_rate = 0.0
            self.down = False
            self.counts.clear()
            self._rng = random.Random(self._seed)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _decide(self) -> str:
        with self._lock:
            self.counts["requests"] += 1
            if self.down:
                self.counts["failed"] += 1
                return "fail"
            r = self._rng.random()
            if r < self.fail_rate:
                self.counts["failed"] += 1
                return "fail"
            if r < self.fail_rate + self.slow_rate:
                self.counts["slowed"] += 1
                return "slow"
            return "pass"

    def _handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        body = _read_body(h)
        action = self._decide()
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
            time.sleep(self.slow_seconds)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP_BY_HOP}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(self.target, timeout=120)
        try:
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            h.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                    h.send_header(k, v)
            length = resp.getheader("Content-Length") if h.command == "HEAD" else str(len(data))
            h.send_header("Content-Length", length or "0")
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(data)
        finally:
            conn.close()


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
