"""`jobs/embed.py` as a user runs it: bad arguments get one clear line and a non-zero exit."""

import os
import pty
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


def not_docembeds(lines: list[str]) -> list[str]:
    """Printed lines that are neither docembed's (its progress, errors, summary) nor a warning or error of Ray's
    (e.g. its notice that token authentication is on, or its core worker's line about Ray Data's own actor
    arguments, ray-project/ray#53727: see docs/run-report.md)."""
    ray_warnings = ("\tWARNING ", "\tERROR ", "issues/53727")
    return [line for line in lines
            if not line.startswith(("docembed:", "  ")) and not any(w in line for w in ray_warnings)]


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
    assert not not_docembeds(lines), lines  # Ray's start-up prints no INFO
    assert [line for line in lines if line.startswith("docembed")] == [
        "docembed: error: mesh data=3,model=5 needs 15 devices; each cpu encoder actor has 1"
    ]
    assert not (tmp_path / "out").exists()
    assert time.time() - started < 60  # Ray's start, not a run: the run in the issue took 24 s before failing


def test_missing_required_argument_is_argparse_usage():
    result = run_cli("--input", str(SAMPLES))
    assert result.returncode == 2
    assert "--output" in result.stderr and "Traceback" not in result.stderr




def test_demo_corpus_end_to_end_prints_docembeds_lines_only(tmp_path):
    started = time.time()
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--overlap", "16", timeout=600)
    wall = time.time() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert "9 inputs (1 skipped): 8 embedded, 1 failed" in result.stdout
    assert (tmp_path / "out" / "_SUCCESS").exists()
    # Off a terminal: a progress line every 10 s, the summary's 5 lines, nothing of Ray's INFO or progress dumps.
    lines = (result.stdout + result.stderr).splitlines()
    assert not not_docembeds(lines), lines
    progress = [line for line in lines if line.startswith("docembed: progress")]
    assert len(progress) <= wall / 10 + 1 and len(lines) <= len(progress) + 5 + 2, lines
    again = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--quiet")
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_a_terminal_gets_one_live_progress_line(tmp_path):
    """On a pty: docembed's line redrawn in place (Ray's bars off), then the summary."""
    controller, terminal = pty.openpty()
    with subprocess.Popen(EMBED + ["--input", str(SAMPLES / "text"), "--output", str(tmp_path / "out")],
                          stdout=terminal, stderr=subprocess.PIPE, cwd=REPO) as job:
        os.close(terminal)
        shown = b""
        while chunk := _read(controller):
            shown += chunk
        assert job.wait(timeout=60) == 0, job.stderr.read()[-3000:]
    text = shown.decode()
    assert "\r\x1b[Kdocembed: progress" in text and "docembed: 5 inputs (0 skipped): 5 embedded" in text
    progress_rows = [row for row in text.replace("\r\n", "\n").split("\n") if "docembed: progress" in row]
    assert len(progress_rows) == 1, text  # every redraw stays on one terminal row
    assert "Running Dataset" not in text and "it/s]" not in text  # no Ray progress bars beside it


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the job closed the terminal
        return b""
