"""Every documented command line of `docembed`, run as a user runs it: the console script or `python -m docembed`.

`jobs/*.py` run the same code (tests/jobs/): here each command's documented
forms run at least once through the command, `capacity`'s measuring path
included. One embed run serves the searches.
"""

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import submit
from pipeline.results import read_report, read_table

from support import REPO, SAMPLES

DOCEMBED = [str(Path(sys.executable).with_name("docembed"))]
PYTHON_M = [sys.executable, "-m", "docembed"]


def run(command: list[str], *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env or os.environ
    )


@pytest.fixture(scope="module")
def embedded(ray_local, tmp_path_factory) -> Path:
    """`docembed embed --config job.yaml` with flags over the file: samples/text and a Parquet shard without ids
    (`--id-field ''`: its rows named by position) into an output, on a Ray that is up, as on a cluster (a private
    Ray's start: tests/jobs/test_embed_cli.py's demo)."""
    root = tmp_path_factory.mktemp("embedded")
    (root / "shard").mkdir()
    pq.write_table(pa.table({"content": ["Bread rises.", "Rain falls."]}), root / "shard" / "rows.parquet")
    inputs = f"[{SAMPLES / 'text'}, {root / 'shard'}]"
    (root / "job.yaml").write_text(f"input: {inputs}\nmax-tokens: 128\noverlap: 8\ntext-field: content\n")
    out = root / "out"
    args = ["--config", str(root / "job.yaml"), "--output", str(out), "--overlap", "16", "--id-field", ""]
    result = run(DOCEMBED, "embed", *args, env=os.environ | {"RAY_ADDRESS": ray_local})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "docembed: 6 inputs (0 skipped), 7 documents: 7 embedded, 0 failed" in result.stdout
    return out


def test_embed_takes_a_config_file_and_flags_over_it(embedded):
    chunking = read_report(str(embedded))["config"]["chunking"]
    assert (chunking["max_tokens"], chunking["overlap"]) == (128, 16)
    rows = [d.rsplit("/", 1)[1] for d in read_table(str(embedded)).column("doc_id").to_pylist() if "#" in d]
    assert rows == ["rows.parquet#row:0", "rows.parquet#row:1"]


def test_search_with_every_option(embedded, tmp_path):
    query = ["--query", "photosynthesis", "--top", "2", "--prompt", "", "--compile-cache", str(tmp_path / "cache")]
    result = run(PYTHON_M, "search", "--output", str(embedded), *query)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("top 2 chunks for: 'photosynthesis'") and "2. score" in result.stdout
    assert any((tmp_path / "cache").iterdir())  # the query's program, for the next search


def test_search_says_in_one_line_when_nothing_was_embedded_or_asked(embedded, tmp_path):
    # An output whose every document failed has no part under embeddings/ (made so from a real output).
    failed = tmp_path / "failed"
    shutil.copytree(embedded, failed)
    for part in (failed / "embeddings").iterdir():
        part.unlink()
    assert read_table(str(failed)).num_rows == 0 and "embedding" in read_table(str(failed)).column_names
    # An output another model made, or the same model's other files (its config.json edited since).
    other = tmp_path / "other"
    shutil.copytree(embedded, other)
    report = json.loads((other / "_SUCCESS").read_text())
    report["model"]["fingerprint"] = "0123456789abcdef"
    (other / "_SUCCESS").write_text(json.dumps(report))
    for output, args, message in [
        (failed, ["--query", "photosynthesis"], "holds no embedded chunk: its 0 documents failed"),
        (other, ["--query", "photosynthesis"], "was embedded by another model than the one loaded"),
        (embedded, ["--query", "photosynthesis", "--top", "0"], "--top must be at least 1"),
        (embedded, ["--query", "  "], "--query must not be blank"),
        (embedded, ["--query", "photosynthesis", "--prompt", "word " * 300], "leaves no room for text"),
    ]:
        result = run(DOCEMBED, "search", "--output", str(output), *args)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr[-3000:]
        assert result.stderr.startswith("docembed: error: ") and message in result.stderr, result.stderr


def test_capacity_measures_the_encoder_here_without_a_given_rate():
    """The path that once ended in KeyError: 'packing', since the planner's parser lacked the encoder's options."""
    result = run(DOCEMBED, "capacity", "--input", str(SAMPLES / "text"), "--sample-docs", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "encoder: " in result.stdout and "measured here on the CPU" in result.stdout
    assert "no accelerator here" in result.stdout and "with 1.25x headroom: " in result.stdout


class RefusingJobApi(http.server.BaseHTTPRequestHandler):
    """A Ray head's job API with token authentication on: 401 without a token, 403 with another one."""

    def do_GET(self):
        status = 403 if self.headers.get("Authorization") else 401
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"Unauthorized" if status == 401 else b"Forbidden")

    def log_message(self, *args):
        pass


class NotRay(RefusingJobApi):
    """Some other web server: the wrong port of the head, say."""

    def do_GET(self):
        self.send_response(404)
        self.end_headers()


def serving(handler):
    """An HTTP server of `handler` on a free loopback port, its URL while the context lasts."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def refusing_head():
    yield from serving(RefusingJobApi)


@pytest.fixture
def not_ray():
    yield from serving(NotRay)


def free_port() -> int:
    """A port that was free a moment ago: nothing listens there."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return closed.getsockname()[1]


def test_submit_says_in_one_line_what_to_set_when_the_head_refuses(refusing_head, tmp_path):
    """Ray's job client (public API) meets the refusal; nothing is submitted. The real head: test_ray_job_submit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"HOME": str(tmp_path)}
    command = ["--", "python", "jobs/embed.py", "--input", "samples", "--output", "out/x"]
    no_token = run(DOCEMBED, "submit", "--address", refusing_head, *command, env=env)
    assert no_token.returncode == 2, no_token.stdout + no_token.stderr
    [line] = no_token.stderr.splitlines()
    assert line.startswith(f"docembed: error: the Ray head at {refusing_head} requires token authentication")
    assert "export RAY_AUTH_MODE=token" in line

    other_token = env | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-heads-token"}
    other_token["RAY_ADDRESS"] = refusing_head
    refused = run(PYTHON_M, "submit", *command, env=other_token)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"docembed: error: the Ray head at {refusing_head} refuses this shell's token")

    # No head at all: one line too, not `ray job submit`'s five tracebacks.
    nowhere = f"http://127.0.0.1:{free_port()}"
    unreachable = run(DOCEMBED, "submit", "--address", nowhere, *command, env=env)
    assert unreachable.returncode == 2, unreachable.stdout + unreachable.stderr
    [line] = unreachable.stderr.splitlines()
    assert line.startswith(f"docembed: error: cannot reach the Ray head at {nowhere}")


def test_submit_says_in_one_line_and_at_once_when_the_address_is_no_ray_heads(not_ray, refusing_head, tmp_path):
    """An address without http:// is taken for the head's GCS, which Ray's job client and then `ray job submit`
    retried for about 40 s each before a traceback; another web server ended in one as well."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"HOME": str(tmp_path)}
    command = ["--", "python", "jobs/embed.py", "--input", "samples", "--output", "out/x"]
    gcs_form = not_ray.removeprefix("http://")
    for address, message in [
        (f"127.0.0.1:{free_port()}", "cannot reach the Ray head at 127.0.0.1:"),
        (not_ray, re.escape(f"the Ray head at {not_ray} answers HTTP but is not Ray's job API (404)")),
        # Without its scheme too: the advice to add one would meet the 404 next.
        (gcs_form, re.escape(f"the Ray head at {gcs_form} answers HTTP but is not Ray's job API (404)")),
        # A job API given without its scheme: the address to give instead.
        (
            refusing_head.removeprefix("http://"),
            f"the Ray head at {refusing_head.removeprefix('http://')} answers HTTP, so it is no GCS address: .* "
            f"{refusing_head}$",
        ),
    ]:
        result = run(DOCEMBED, "submit", "--address", address, *command, env=env, timeout=30)
        assert result.returncode == 2, result.stdout + result.stderr
        [line] = result.stderr.splitlines()
        assert re.match(f"docembed: error: {message}", line), line


def test_submit_leaves_its_default_runtime_env_out_where_the_options_give_one(monkeypatch):
    """Ray refuses --runtime-env beside --runtime-env-json."""
    ran = []
    monkeypatch.setattr(submit, "refusal", lambda options: None)  # as if the head answered
    monkeypatch.setattr(submit.os, "execv", lambda path, argv: ran.append(argv[3:]))
    command = ["--", "python", "jobs/embed.py"]
    for given in (["--runtime-env-json", "{}"], ["--runtime-env=other.yaml"], []):
        submit.main(["--address", "http://HEAD:8265", *given, *command])
    defaults = ["--working-dir", ".", "--runtime-env", "jobs/runtime_env.yaml"]
    assert ran == [
        ["--working-dir", ".", "--address", "http://HEAD:8265", "--runtime-env-json", "{}", *command],
        ["--working-dir", ".", "--address", "http://HEAD:8265", "--runtime-env=other.yaml", *command],
        [*defaults, "--address", "http://HEAD:8265", *command],
    ]
