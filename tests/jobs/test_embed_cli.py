"""`jobs/embed.py` as a user runs it: bad arguments get one clear line and a non-zero exit."""

import json
import os
import pty
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes  # noqa: F401  registers bfloat16 with numpy: the fixtures' weights
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from kernels.compute_dtype import choose_dtype

from support import FAMILY_FIXTURES, REPO, SAMPLES, terminal_output

EMBED = [sys.executable, str(REPO / "jobs" / "embed.py")]


def run_cli(*args, timeout=300, env=None) -> subprocess.CompletedProcess:
    """The job's exit code and output; `.pid` is its process id, which names its Ray driver log.
    `env`: variables set beside this process's."""
    with subprocess.Popen(
        EMBED + list(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=os.environ | (env or {}),
    ) as job:
        try:
            stdout, stderr = job.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            job.kill()
            raise
    result = subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr)
    result.pid = job.pid
    return result


def driver_log(pid: int) -> str:
    """What the Ray core worker of the driver process `pid` logged, from Ray's log directory."""
    from ray._common.utils import get_default_ray_temp_dir  # private: no public API names Ray's temp directory

    logs = Path(get_default_ray_temp_dir()).glob(f"session_*/logs/python-core-driver-*_{pid}.log")
    return max(logs, key=lambda log: log.stat().st_mtime).read_text()  # the newest: pids come round again


@pytest.fixture
def not_a_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    return blocker


def not_docembeds(lines: list[str]) -> list[str]:
    """Printed lines that are neither docembed's (its progress, errors, summary) nor a warning or error of Ray's
    (e.g. its notice that token authentication is on)."""
    ray_warnings = ("\tWARNING ", "\tERROR ")
    return [
        line for line in lines if not line.startswith(("docembed:", "  ")) and not any(w in line for w in ray_warnings)
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input", "/nonexistent/docs", "--output", "{tmp}/out"], "input /nonexistent/docs does not exist"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--model", "{tmp}"], "has no weights: neither"),
        (["--input", str(SAMPLES), "--output", "{blocker}/out"], "is not writable"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--overlap", "300"], "--overlap must be in"),
        (
            ["--input", str(SAMPLES), "--output", "{tmp}/out", "--max-tokens", "1000"],
            "--max-tokens 1000: a window of 1000 tokens is longer than this bert model's 512 positions",
        ),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--attention", "magic"], "unknown attention"),
        (["--input", "{tmp}", "--output", "{tmp}/out"], "no documents"),
        (["--input", "", "--output", "{tmp}/out"], "an input is an empty string"),
        (["--input", str(SAMPLES), "--output", "https://example.com/out"], "HTTP is read-only"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--encoders", "-1"], "--encoders must be at least 1"),
        # The encoder actors would have failed on these after the output was begun.
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--compile-cache", "{blocker}"], "--compile-cache"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--profile", "{blocker}/sub"], "Not a directory"),
    ],
)
def test_user_errors_are_one_line(tmp_path, not_a_dir, args, message):
    args = [a.format(tmp=tmp_path, blocker=not_a_dir) for a in args]
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docembed: error:"), result.stderr
    assert message in lines[0]
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "address, message",
    [
        # Ray's ray.init retried this for as long as it was left (5 minutes here), printing a line every few seconds.
        ("127.0.0.1:{port}", "RAY_ADDRESS=127.0.0.1:{port}: nothing answers there (Connection refused)"),
        ("ray://127.0.0.1:{port}", "RAY_ADDRESS=ray://127.0.0.1:{port}: nothing answers there (Connection refused)"),
    ],
)
def test_a_cluster_address_nothing_answers_at_is_one_line(tmp_path, address, message):
    port = closed_port()
    started = time.time()
    env = {"RAY_ADDRESS": address.format(port=port), "RAY_TMPDIR": str(tmp_path)}
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"docembed: error: {message.format(port=port)}; unset RAY_ADDRESS to run on a private local Ray\n"
    ), result.stderr
    assert not (tmp_path / "out").exists() and time.time() - started < 60


def test_a_local_ray_that_does_not_start_is_one_line(tmp_path, not_a_dir, monkeypatch):
    """Ray's own start failing came as its traceback and exit 1: here its temporary directory is under a file; on an
    overloaded machine its raylet times out ("The current node timed out during startup"), a bare Exception."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a private local Ray, whichever Ray this process joined
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), env={"RAY_TMPDIR": str(not_a_dir)})
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"docembed: error: a local Ray did not start: [Errno 20] Not a directory: '{not_a_dir}/ray' "
        "(Ray's own logs: ray/session_latest/logs in RAY_TMPDIR, else TMPDIR, else /tmp)\n"
    ), result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.alone
def test_auto_with_no_ray_on_the_machine_is_one_line(tmp_path):
    """Ray's ConnectionError, which came with its traceback. Alone: `auto` also finds a Ray by its processes,
    and the other pytest worker's would answer."""
    test_a_cluster_address_nothing_answers_at_is_one_line(
        tmp_path, "auto", "RAY_ADDRESS=auto: Could not find any running Ray instance"
    )


@pytest.mark.parametrize(
    "args, env, message",
    [
        # Each CPU encoder actor has one XLA device per core of its node's share (pipeline.encode.cpu_devices).
        (["--mesh", "data=3,model=5"], {}, r"mesh data=3,model=5 needs 15 devices; each cpu encoder actor has \d+"),
        # The bundled model has 12 heads: 8 devices hold the mesh, the model does not split over it.
        (
            ["--mesh", "model=8"],
            {"JAX_NUM_CPU_DEVICES": "8"},
            r"mesh data=1,model=8 does not fit model .*: cannot split heads \(12\) over mesh axis 'model' of size 8",
        ),
        (["--dense", "onednn"], {}, r"--dense onednn cannot run on the cpu encoder actors: .*\(asked float32\).*"),
    ],
)
def test_an_encoder_the_encoder_hosts_cannot_run_fails_before_anything_is_written(
    tmp_path, ray_local, args, env, message
):
    """The driver checks the encoder's options against Ray's node list and the model: one line, exit 2, no
    output, no actor started."""
    started = time.time()
    env = env | {"RAY_ADDRESS": ray_local}
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), *args, env=env)
    assert result.returncode == 2, result.stderr
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert not not_docembeds(lines), lines  # joining a Ray prints no INFO (a private one's start: the demo's test)
    [error] = [line for line in lines if line.startswith("docembed")]
    assert re.fullmatch(f"docembed: error: {message}", error), error
    assert not (tmp_path / "out").exists()
    assert time.time() - started < 60  # not a run: the run in the issue took 24 s before failing


def test_a_bad_command_line_is_one_line_pointing_at_help():
    for args, message in [
        (("--input", str(SAMPLES)), "--output is required"),
        (("--input", str(SAMPLES), "--output", "o", "--bogus"), "unrecognized arguments: --bogus"),
        (("--input", str(SAMPLES), "--output", "o", "--max-tokens", "many"), "--max-tokens: invalid int value"),
    ]:
        result = run_cli(*args)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("docembed: error: ") and message in result.stderr, result.stderr
    assert result.stderr.endswith("(see jobs/embed.py --help)\n")


def test_demo_corpus_end_to_end_prints_docembeds_lines_only_and_pads_little(tmp_path):
    started = time.time()
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--overlap", "16", timeout=600)
    wall = time.time() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert "9 inputs (1 skipped): 8 embedded, 1 failed" in result.stdout
    # 21 chunks of 150-256 tokens: no two share a row, so the tail of each row is the padding.
    success = json.loads((tmp_path / "out" / "_SUCCESS").read_text())
    assert success["padding_efficiency"] >= 0.85
    assert max(map(len, success["compiled_shapes"].values())) <= 3
    # Off a terminal: a progress line every 10 s, the summary's 5 lines, nothing of Ray's INFO or progress dumps.
    lines = (result.stdout + result.stderr).splitlines()
    assert not not_docembeds(lines), lines
    # Ray's core worker logs ray-project/ray#53727's line for Ray Data's actors to its log directory only.
    assert "issues/53727" not in result.stderr and "issues/53727" in driver_log(result.pid)
    progress = [line for line in lines if line.startswith("docembed: progress")]
    assert len(progress) <= wall / 10 + 1 and len(lines) <= len(progress) + 5 + 2, lines
    again = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--overlap", "16", "--quiet")
    assert again.returncode == 0 and "nothing to do" in again.stdout
    search = subprocess.run(
        [
            sys.executable,
            str(REPO / "jobs" / "search.py"),
            "--output",
            str(tmp_path / "out"),
            "--query",
            "photosynthesis",
            "--top",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert search.returncode == 0, search.stderr[-2000:]
    assert search.stdout.startswith("top 2 chunks for: 'photosynthesis'") and "2. score" in search.stdout


def test_dtype_bfloat16_runs_what_this_cpu_pays_for_and_the_output_says_which(tmp_path, ray_local):
    """On a CPU without bfloat16 dot instructions (an AMD EPYC Zen 3) --dtype bfloat16 runs float32, says so in
    one line, and the output's fingerprint and _SUCCESS say float32; on one with them, bfloat16 silently. The
    job joins the module's Ray (a private Ray's start is the demo's test)."""
    ran = choose_dtype("bfloat16", "cpu")
    docs = tmp_path / "in"
    docs.mkdir()
    shutil.copy(SAMPLES / "text" / "sourdough.txt", docs)
    out = tmp_path / "out"
    result = run_cli("--input", str(docs), "--output", str(out), "--dtype", "bfloat16", env={"RAY_ADDRESS": ray_local})
    assert result.returncode == 0, result.stderr[-3000:]
    told = [line for line in (result.stdout + result.stderr).splitlines() if "dtype bfloat16 runs as" in line]
    assert told == ([f"docembed: dtype bfloat16 runs as float32: {ran.reason}"] if ran.changed else []), told
    assert json.loads((out / "_SUCCESS").read_text())["config"]["encoder"]["dtype"] == ran.dtype
    assert json.loads((out / "_docembed.json").read_text())["dtype"] == ran.dtype


def test_a_terminal_gets_one_live_progress_line(tmp_path, ray_local):
    """On a pty, stdout and stderr both, as in a person's shell: docembed's line redrawn in place (Ray's bars
    off), then the summary, and no ray-project/ray#53727 line (stderr stays a terminal through the filter). The
    job joins the module's Ray, as on a cluster."""
    controller, terminal = pty.openpty()
    with subprocess.Popen(
        EMBED + ["--input", str(SAMPLES / "text"), "--output", str(tmp_path / "out")],
        stdout=terminal,
        stderr=terminal,
        cwd=REPO,
        env=os.environ | {"RAY_ADDRESS": ray_local},
    ) as job:
        os.close(terminal)
        shown = terminal_output(controller)
        assert job.wait(timeout=60) == 0, shown[-3000:]
    text = shown.decode()
    assert "issues/53727" not in text, text
    assert "\r\x1b[Kdocembed: progress" in text and "docembed: 5 inputs (0 skipped): 5 embedded" in text
    progress_rows = [row for row in text.replace("\r\n", "\n").split("\n") if "docembed: progress" in row]
    assert len(progress_rows) == 1, text  # every redraw stays on one terminal row
    assert "Running Dataset" not in text and "it/s]" not in text  # no Ray progress bars beside it


def _config_change(change):
    def breakage(path):
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps(config | change))

    return breakage


def _drop_tensor(name):
    def breakage(path):
        tensors = load_file(path / "model.safetensors")
        del tensors[name]
        save_file(tensors, str(path / "model.safetensors"))

    return breakage


def _dense_shape(shape):
    def breakage(path):
        save_file({"linear.weight": np.zeros(shape, np.float32)}, str(path / "3_Dense" / "model.safetensors"))

    return breakage


@pytest.mark.parametrize(
    "fixture, breakage, extra, message",
    [
        (
            "gte-new-ntk",
            _config_change({"model_type": "bart"}),
            [],
            "model_type 'bart' (architectures ['NewModel']) is not supported; supported model_types: bert,",
        ),
        (
            "gte-new-ntk",
            _drop_tensor("new.encoder.layer.1.mlp.up_gate_proj.weight"),
            [],
            "the weights lack tensor 'encoder.layer.1.mlp.up_gate_proj.weight', which a gte model",
        ),
        (
            "modernbert-layer-types",
            _config_change({"intermediate_size": 32}),
            [],
            "tensor 'layers.0.mlp.Wi.weight' has shape (128, 48), but config.json",
        ),
        (
            "distilbert-dense",
            _dense_shape((24, 41)),
            [],
            "3_Dense/model.safetensors: tensor 'linear.weight' has shape (24, 41), but its config.json implies",
        ),
        (
            "distilbert-dense",
            None,
            ["--dim", "32"],
            "--dim 32 is more than model",
        ),
        (
            "xlm-roberta-sharded",
            None,
            ["--max-tokens", "2048"],
            "--max-tokens 2048: a window of 2048 tokens is longer than this xlm-roberta model's 128 positions",
        ),
    ],
)
def test_bad_models_are_one_line(tmp_path, fixture, breakage, extra, message):
    model = tmp_path / fixture
    shutil.copytree(FAMILY_FIXTURES / fixture, model)
    if breakage:
        breakage(model)
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--model", str(model), *extra)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docembed: error:"), result.stderr
    assert message in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
