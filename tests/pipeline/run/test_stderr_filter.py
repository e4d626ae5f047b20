"""The driver's fd 2 during a run: Ray Data's ray-project/ray#53727 line dropped, everything else shown, whatever
happens to the process, and fd 2 put back after.

Most tests write at the file-descriptor level (`os.write(2, ...)`), as Ray's native code does, from a child
process whose stderr the test reads, so that nothing of pytest's own capture is in the way."""

import contextlib
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest

from pipeline.run.stderr_filter import known_ray_noise_dropped

from support import REPO, terminal_output

# As Ray 2.60's driver printed it in `make demo`.
KNOWN = (
    "[2026-12-01 14:37:03,568 E 19008 19008] core_worker.cc:2465: Actor with class name: "
    "'MapWorker(MapBatches(extract_block)->MapBatches(ChunkBlock))' and ID: 'ebd1a5bb6513de12008e965601000000' "
    "has constructor arguments in the object store and max_restarts > 0. If the arguments in the object store go "
    "out of scope or are lost, the actor restart will fail. See https://github.com/ray-project/ray/issues/53727 "
    "for more details.\n"
)
PRELUDE = """
import os, signal, sys, time
from pipeline.run.stderr_filter import known_ray_noise_dropped
KNOWN = {known!r}.encode()
"""


def probe(body: str, **popen) -> subprocess.Popen:
    """A Python child running PRELUDE + `body`, stdout and stderr piped unless `popen` says otherwise."""
    code = PRELUDE.format(known=KNOWN) + body
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, **popen
    )


def finished(body: str) -> tuple[int, str]:
    with probe(body) as child:
        _, err = child.communicate(timeout=60)
    return child.returncode, err.decode()


def test_only_ray_datas_line_is_dropped_and_the_rest_keeps_its_order():
    rc, err = finished("""
with known_ray_noise_dropped():
    os.write(2, b"native before\\n")
    os.write(2, KNOWN)
    os.write(2, KNOWN[:60]); time.sleep(0.05); os.write(2, KNOWN[60:])  # split across reads
    os.write(2, KNOWN.replace(b"'MapWorker(", b"'ScoringActor("))  # any other actor's line shows
    os.write(2, KNOWN.replace(b"issues/53727", b"issues/1"))
    print("python after", file=sys.stderr)
""")
    assert rc == 0, err
    lines = err.splitlines()
    assert lines[0] == "native before" and lines[-1] == "python after", err
    assert len(lines) == 4 and "'ScoringActor(" in lines[1] and "issues/1 " in lines[2], err
    assert "MapWorker" not in lines[1], err


def test_an_unfinished_line_shows_while_the_process_still_runs():
    """A progress bar's `\\r` redraw, or a line starting like Ray's that never ends, is not held back."""
    with probe("""
with known_ray_noise_dropped():
    os.write(2, b"\\r 50%|#####     |")
    os.write(2, b"[a bracketed line, unfinished")
    time.sleep(60)
""") as child:
        shown, deadline = b"", time.monotonic() + 20
        while b"unfinished" not in shown and time.monotonic() < deadline:
            if select.select([child.stderr], [], [], 1)[0]:
                shown += os.read(child.stderr.fileno(), 4096)
        assert child.poll() is None  # still running: the lines came through before any end
        child.kill()
    assert shown == b"\r 50%|#####     |[a bracketed line, unfinished", shown


@pytest.mark.parametrize(
    "death, rc",
    [
        ("os._exit(3)", 3),
        ("os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
        # A native crash: faulthandler's dump is written to fd 2 by the signal handler as the process dies.
        ("import ctypes, faulthandler; faulthandler.enable(); ctypes.string_at(0)", -signal.SIGSEGV),
    ],
)
def test_a_dying_process_last_words_reach_the_real_stderr(death, rc):
    code, err = finished(f"""
with known_ray_noise_dropped():
    os.write(2, KNOWN)
    os.write(2, b"last words\\n")
    {death}
""")
    assert code == rc, err
    assert "last words" in err and "53727" not in err, err
    if "faulthandler" in death:
        assert "Fatal Python error: Segmentation fault" in err, err


@pytest.mark.parametrize("raises", [False, True])
def test_fd_2_is_put_back_when_the_block_returns_or_raises(capfd, raises):
    """In this process: fd 2 is pytest's capture file before, during (through the child) and after."""
    before, open_fds = os.fstat(2), sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(RuntimeError) if raises else contextlib.nullcontext():
        with known_ray_noise_dropped():
            assert os.fstat(2).st_ino != before.st_ino
            os.write(2, KNOWN.encode() + b"inside\n")
            if raises:
                raise RuntimeError("the run failed")
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    assert sorted(os.listdir("/proc/self/fd")) == open_fds  # the pipe's ends and the saved stderr closed
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "inside\nafter\n"


def test_a_filter_that_cannot_start_leaves_the_run_unfiltered(capfd, monkeypatch):
    """No process to be had (here: no Python where sys.executable says): the block runs, with fd 2 as it was."""
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    before = os.fstat(2)
    with known_ray_noise_dropped():
        assert os.fstat(2).st_ino == before.st_ino
        os.write(2, KNOWN.encode())
    assert capfd.readouterr().err == KNOWN


def test_a_terminal_stays_a_terminal_of_the_same_size_and_bytes_pass_unchanged():
    """isatty and the terminal's size answer as without the filter (Ray's and tqdm's checks read them), and the
    pseudo-terminal in between adds no `\\r` of its own."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    with probe(
        """
with known_ray_noise_dropped():
    print(os.isatty(2), tuple(os.get_terminal_size(2)), flush=True)
    os.write(2, b"one\\n" + KNOWN + b"two\\n")
""",
        stderr=terminal,
    ) as child:
        os.close(terminal)
        shown = terminal_output(controller)
        out, _ = child.communicate(timeout=60)
    assert out.decode().split() == ["True", "(111,", "33)"]
    assert shown == b"one\r\ntwo\r\n", shown  # the outer terminal's own "\r": one per line, not two


@pytest.mark.integration
def test_the_line_for_an_actor_of_ours_still_shows_on_a_real_ray():
    """Ray's core worker itself logs the line for an actor with restarts and an argument by reference: only
    Ray Data's MapWorker is dropped, so ours (tests/pipeline/run/test_job.py keeps them inline) would show."""
    rc, err = finished("""
import ray
from pipeline.run.stages import ChunkBlock
from pipeline.text.chunking import ChunkingConfig
ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
with known_ray_noise_dropped():
    actor = ray.remote(max_restarts=-1)(ChunkBlock).remote(ray.put(None), ChunkingConfig(max_tokens=64, overlap=8))
    ray.get(actor.__ray_ready__.remote())
    print("done", file=sys.stderr)
""")
    assert rc == 0, err[-3000:]
    assert "with class name: 'ChunkBlock' and ID:" in err and "issues/53727" in err, err[-3000:]
    assert err.index("issues/53727") < err.index("done"), err[-3000:]
