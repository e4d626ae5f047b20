"""`jobs/embed.py` as a user runs it: bad arguments get one clear line and a non-zero exit."""

import subprocess
import sys
import time

import pytest

from support import REPO, SAMPLES

EMBED = [sys.executable, str(REPO / "jobs" / "embed.py")]


def run_cli(*args, timeout=300):
    return subprocess.run(EMBED + list(args), capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.fixture
def not_a_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    return blocker


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input", "/nonexistent/docs", "--output", "{tmp}/out"], "input /nonexistent/docs does not exist"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--model", "{tmp}"], "has no model.safetensors"),
        (["--input", str(SAMPLES), "--output", "{blocker}/out"], "is not writable"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--overlap", "300"], "--overlap must be in"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--max-tokens", "1000"], "--max-tokens must be in"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--batch-size", "0"], "batch size must be at least 1"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--attention", "magic"], "unknown attention"),
        (["--input", "{tmp}", "--output", "{tmp}/out"], "no documents"),
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


def test_a_mesh_the_encoder_hosts_cannot_hold_fails_before_anything_is_written(tmp_path):
    """The driver checks the mesh against Ray's node list: one line, exit 2, no output, no actor started."""
    started = time.time()
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--mesh", "data=3,model=5")
    assert result.returncode == 2, result.stderr
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert lines == ["docembed: error: mesh data=3,model=5 needs 15 devices; each cpu encoder actor has 1"]
    assert not (tmp_path / "out").exists()
    assert time.time() - started < 60  # Ray's start, not a run: the run in the issue took 24 s before failing


def test_missing_required_argument_is_argparse_usage():
    result = run_cli("--input", str(SAMPLES))
    assert result.returncode == 2
    assert "--output" in result.stderr and "Traceback" not in result.stderr


def test_demo_corpus_end_to_end(tmp_path):
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--overlap", "16", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "9 inputs (1 skipped): 8 embedded, 1 failed" in result.stdout
    assert (tmp_path / "out" / "_SUCCESS").exists()
    again = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"))
    assert again.returncode == 0 and "nothing to do" in again.stdout
