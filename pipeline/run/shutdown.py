"""Stopping a run on Ctrl-C or SIGTERM: one line, a non-zero exit, and an output the same command resumes.

Ray's core worker installs a SIGTERM handler in the driver that dumps the
native stack and exits. While the run is on Ray, `interruptible` replaces it
(and Python's KeyboardInterrupt) with a handler that raises `Interrupted` in
the main thread, so the job unwinds: the Ray Data stream is closed (its
executor stops the stage actors and tasks), the run's tally is killed, and a
private local Ray is shut down, taking its workers and their extraction
sandboxes with it (on a cluster, Ray ends the job's workers when the driver
exits). Every part and marker is put in place whole (see
`pipeline.output.ledger`), so what is left outside `_staging/` is finished
work, and `_staging/` is cleared here or by the next run.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The driver was sent SIGINT or SIGTERM.

    A BaseException, as KeyboardInterrupt is: not a failure, so that no `except
    Exception` on its way up (Ray Data reports those as its own bugs, with a
    traceback) takes it for one."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum
        # Set by the run that catches it: whether the output was begun, so that finished groups may be there to
        # resume. A stop before (while the command starts, models resolve, Ray starts) wrote nothing.
        self.output_begun = False

    @property
    def exit_code(self) -> int:
        """As a shell reports a process killed by the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


# The stop a signal handler raised, until it ends the run. Python runs a handler between any two bytecodes, so
# its exception can land in code that swallows it: an extension module's import hook prints "Exception ignored"
# for it and the import goes on. Without this the command would run to its end, further signals ignored.
_raised: list[Interrupted] = []


def stop(signum, frame) -> None:
    """A signal handler: raises Interrupted, and ignores further signals."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    _raised[:] = [Interrupted(signum)]
    raise _raised[0]


def take_signals() -> dict:
    """Makes SIGINT and SIGTERM `stop`; returns the handlers they had. A signal ignored from the start stays so: a
    shell runs a script's background jobs with SIGINT ignored, so that a Ctrl-C meant for the script does not
    stop them."""
    previous = {s: signal.getsignal(s) for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    for s in previous:
        signal.signal(s, stop)
    return previous


def restore_signals(previous: dict) -> None:
    """Puts back the handlers `take_signals` returned."""
    for s, handler in previous.items():
        # None: a handler installed outside Python (Ray's); the default is the closest Python can restore.
        signal.signal(s, signal.SIG_DFL if handler is None else handler)


def raise_if_stopped() -> None:
    """Raises the stop a signal handler raised before, if any: a checkpoint for a raise that was swallowed."""
    if _raised:
        raise _raised[0]


def stop_delivered() -> None:
    """The stop reached the code that ends the run: checkpoints pass again."""
    _raised.clear()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread while the block runs.

    The first one also ignores any further ones, so that stopping cleanly is not
    itself cut short by an impatient second Ctrl-C. A signal the process was
    started with ignored stays ignored. Off the main thread (where Python
    cannot take signals) the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raise_if_stopped()  # one that landed before, while the command started, and was swallowed there
    previous = take_signals()
    try:
        yield
    except Interrupted:
        stop_delivered()
        raise
    finally:
        restore_signals(previous)
