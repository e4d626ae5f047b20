"""Ctrl-C and SIGTERM to `jobs/embed.py` mid-run, as a person or a scheduler sends them (pipeline.run.shutdown).

A real driver with its private local Ray is signalled while its extraction
sandboxes run: it must exit with one line and the shell's code for the signal,
leave no process of its own behind (Ray, stage workers, sandboxes), nothing
half-written and no `_staging/`, and the same command must then finish the run.
"""

import functools
import signal
import subprocess
import sys
import time

import psutil
import pyarrow.parquet as pq
import pytest

from support import REPO, SAMPLES

EMBED = [sys.executable, str(REPO / "jobs" / "embed.py")]
# On a loaded machine a Ray Data task killed by the stopping driver now and then aborts ("Mutex corrupt"
# while its process exits) and its dump reaches the driver's output: with nothing beside it, it has not.
pytestmark = pytest.mark.alone


def wait_for_sandbox(driver: psutil.Process, timeout: float = 240) -> list[psutil.Process]:
    """The driver's descendants once one of them is an extraction sandbox: the run is in flight."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        family = driver.children(recursive=True)
        if any("pipeline.extract.sandbox" in _cmdline(p) for p in family):
            return family
        assert driver.is_running(), "the driver ended before any extraction started"
        time.sleep(0.1)
    raise AssertionError("no extraction sandbox started")


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def stop_mid_run(args: list[str], out, signum: int, log) -> None:
    """Runs the command, sends `signum` while it extracts, and checks what it left: one line, no process, no
    half-written file."""
    with open(log, "w") as sink:
        # SIGINT as a terminal's foreground process has it, whoever runs the tests (a shell's background job, an
        # xdist worker ignores it, and a process started so keeps ignoring it).
        reset = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
        driver = subprocess.Popen(EMBED + args, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO, preexec_fn=reset)
        family = wait_for_sandbox(psutil.Process(driver.pid))
        driver.send_signal(signum)
        assert driver.wait(timeout=120) == 128 + signum
    printed = log.read_text()
    stopped = [line for line in printed.splitlines() if signal.Signals(signum).name in line]
    assert stopped == [
        f"docembed: stopped by {signal.Signals(signum).name}; finished groups are kept: "
        "rerun the same command to resume"
    ], printed
    assert "Traceback" not in printed and "PC: @" not in printed, printed

    _, alive = psutil.wait_procs(family, timeout=30)
    assert not alive, [(p.pid, _cmdline(p)) for p in alive]
    assert not (out / "_staging").exists() and not (out / "_SUCCESS").exists()
    for part in out.rglob("*.parquet"):
        pq.read_table(part)


def test_signals_mid_run_stop_everything_with_one_line_and_the_command_resumes(tmp_path):
    """SIGTERM stops a first run, SIGINT the rerun that resumes it (each checked alike); the third run finishes.

    One output for both signals: a stopped resumed run is a case of its own, and it saves a whole run."""
    out = tmp_path / "out"
    args = ["--input", str(SAMPLES), "--output", str(out), "--group-size", "2"]
    for signum in (signal.SIGTERM, signal.SIGINT):
        stop_mid_run(args, out, signum, tmp_path / f"driver-{signal.Signals(signum).name}.log")

    again = subprocess.run(EMBED + args, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "9 inputs (1 skipped): 8 embedded, 1 failed" in again.stdout
