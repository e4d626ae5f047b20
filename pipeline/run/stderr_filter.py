"""Drops one known false alarm of Ray's from the driver's stderr while a run is on Ray; nothing else.

Why: Ray's core worker logs, at ERROR, once per process, "Actor with class
name: 'MapWorker(...)' ... has constructor arguments in the object store and
max_restarts > 0 ... ray-project/ray/issues/53727". Ray Data 2.60 itself causes
it: `ActorPoolMapOperator._start_actor` passes every actor-pool actor its
`DataContext` and `MapTransformer` as `ray.put` references
(ray-project/ray#57733, #57838), and restarts are what tests/faults relies on.
Those references are owned by the driver and held for the whole run, so the
line warns of nothing here (docs/run-report.md), but a person reads it as a
failure. No Ray setting passes them inline or turns the line off alone.

How: the native code writes the line straight to file descriptor 2, so fd 2
itself is pointed, for the run, at a pipe (a pseudo-terminal when stderr is a
terminal, so that every isatty and terminal-size check answers as before)
drained by a small child process that copies everything to the real stderr
except that line, which Ray's log directory keeps
(`logs/python-core-driver-*.log`). The child drains until every writer is
gone, so whatever a dying driver writes last (a native crash dump, a
traceback) still reaches the terminal. fd 2 is put back when the run returns
or raises.

Delete this module when Ray Data passes those arguments inline, or Ray stops
logging the line for them (ray-project/ray#53727).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import subprocess
import sys
import termios
import tty
from collections.abc import Iterator

# The line, matched tightly: a Ray Data MapWorker actor and #53727; the same line for any other actor shows.
KNOWN_LINE = re.compile(
    rb"core_worker\.cc:\d+: Actor with class name: 'MapWorker\(.*' and ID: '[0-9a-f]+' "
    rb"has constructor arguments in the object store and max_restarts > 0\..*ray-project/ray/issues/53727"
)
# An unfinished line that may still become the known one (it starts with "[", as Ray's native lines do) waits
# this long, and holds at most this many bytes; Ray writes the line in one write, so a tail that waited this
# long is someone else's and is shown.
HOLD_S = 0.2
HOLD_BYTES = 65536
# How long the end of a run waits for the child to show what is still in the pipe.
DRAIN_S = 10.0


@contextlib.contextmanager
def known_ray_noise_dropped() -> Iterator[None]:
    """While the block runs, fd 2 drops KNOWN_LINE and passes everything else through, unchanged and at once."""
    sys.stderr.flush()  # what Python holds for the real stderr goes there now
    try:
        real = os.dup(2)
    except OSError:  # no stderr at all
        yield
        return
    try:
        child, writer = _start_child(real)
    except OSError:  # no descriptors or processes to spare: the run goes on unfiltered
        os.close(real)
        yield
        return
    os.dup2(writer, 2)
    os.close(writer)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # the pipe's last writer in this process goes: the child drains it and ends
        os.close(real)
        with contextlib.suppress(subprocess.TimeoutExpired):
            # A process started during the run may still hold the pipe: the child then ends when it does.
            child.wait(timeout=DRAIN_S)


def _start_child(real: int) -> tuple[subprocess.Popen, int]:
    """The child that drains into `real`, and the write end of what it drains."""
    if os.isatty(real):
        source, writer = os.openpty()
        tty.setraw(writer)  # bytes pass as written: no "\n" -> "\r\n" on the way
        fcntl.ioctl(writer, termios.TIOCSWINSZ, fcntl.ioctl(real, termios.TIOCGWINSZ, b"\0" * 8))
    else:
        source, writer = os.pipe()
    try:
        # -I: stdlib only, and this file's folder (whose `io` package would shadow the stdlib's) stays off sys.path.
        return subprocess.Popen([sys.executable, "-I", __file__], stdin=source, stdout=real, stderr=real), writer
    except OSError:
        os.close(writer)
        raise
    finally:
        os.close(source)


def drain(source: int, sink: int) -> None:
    """Copies `source` to `sink` until every writer of `source` is gone, without KNOWN_LINE."""
    pending = b""  # an unfinished line that may still become the known one
    while True:
        if pending and not select.select([source], [], [], HOLD_S)[0]:
            _write(sink, pending)
            pending = b""
        try:
            chunk = os.read(source, 65536)
        except OSError:  # a pseudo-terminal whose writers are all gone
            chunk = b""
        if not chunk:
            _write(sink, pending)
            return
        *lines, tail = (pending + chunk).split(b"\n")
        held = tail.startswith(b"[") and len(tail) < HOLD_BYTES
        pending = tail if held else b""
        shown = [line + b"\n" for line in lines if not KNOWN_LINE.search(line)]
        _write(sink, b"".join(shown) + (b"" if held else tail))


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group, and a group may be sent SIGTERM: the child outlives the
    # driver until it has shown the driver's last words, and ends when the pipe does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    drain(0, 1)
