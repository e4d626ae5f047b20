"""What the job prints while it runs, and what it leaves to Ray's log directory.

    quiet    warnings and errors, then the run summary
    normal   docembed's progress (one line redrawn in place on a terminal, a line
             every 10 s off one), warnings and errors, then the run summary
    verbose  Ray's own console output as well: its INFO lines and its progress
             (bars on a terminal, periodic dumps off one) instead of docembed's
             live line, so a terminal never shows two progress displays

Ray Data's log file (`logs/ray-data/` in the Ray session directory) keeps every
level whatever is printed: only its console handler is turned down, through
the knobs Ray Data reads (`DataContext.enable_progress_bars`, the `ray.data`
logger's handlers) and `ray.init`'s `logging_level` and `log_to_driver`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator

from pipeline.errors import StorageError, UserError
from pipeline.run.report import ProgressLine

log = logging.getLogger("docembed")


def ray_init_args(verbosity: str) -> dict:
    """`ray.init` arguments: the driver's `ray` logger level, and whether workers' output reaches this console."""
    return {
        "logging_level": RAY_CONSOLE_LEVEL[verbosity],
        # Workers' stderr carries their warnings and tracebacks; quiet leaves them to the log directory.
        "log_to_driver": verbosity != "quiet",
    }


def configure_ray_data(verbosity: str) -> None:
    """Ray Data's progress display and console level for datasets made after this call; Ray's notices
    that say nothing is wrong, and its records of a worker's user error or storage failure that the run says in
    one line, are shown on verbose only."""
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = verbosity == "verbose"
    for handler in logging.getLogger("ray.data").handlers:
        if _writes_to_console(handler):
            handler.setLevel(RAY_CONSOLE_LEVEL[verbosity])
            _off_verbose(handler, _Notice(BARS_OFF_NOTICE), verbosity)
            _off_verbose(handler, _Notice(ABORT_NOTICE), verbosity)
            _off_verbose(handler, _UserErrorInWorker(), verbosity)
    _off_verbose(logging.getLogger(AUTH_NOTICE_LOGGER), _Notice(AUTH_ON_NOTICE), verbosity)


def _writes_to_console(handler: logging.Handler) -> bool:
    """A stream handler that is not a file's: Ray Data's console handler, not its session log file's (which
    is a plain Handler that opens its file on first use)."""
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


# Ray Data warns once that its progress bars are off, telling how to turn them on: here they are off
# because docembed shows its own progress (`--verbose` shows Ray's).
BARS_OFF_NOTICE = "Progress bars disabled"
# Ray Data announces that a task failed and the run stops, with advice for Ray Data's own users
# (`DataContext.max_errored_blocks`); the run then reports that failure itself: in one line when it is the
# user's or storage's to fix, with its traceback otherwise.
ABORT_NOTICE = "An exception was raised from a task of operator"
# A local Ray that finds ~/.ray/auth_token turns token authentication on and says so at WARNING: good
# news, not a warning. (Its opposite, that authentication is off, stays: that one is a security warning.)
# Ray names the logger after the private module that logs it: no public name reaches that record.
AUTH_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
AUTH_ON_NOTICE = "Token authentication is enabled"


@dataclasses.dataclass(frozen=True)
class _Notice:
    """A logging filter: drops the records whose message starts with `prefix`."""

    prefix: str

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@dataclasses.dataclass(frozen=True)
class _UserErrorInWorker:
    """A logging filter: drops the records of a user error or a storage failure raised in a worker, which the run
    then says in one line (`worker_errors_in_one_line`).

    Besides ABORT_NOTICE, which carries a read task's traceback (130 lines and
    more), Ray Data logs a failed task's exception as it reaches the driver:
    for a read task, that it is in "Ray Data or Ray Core internal code" with a
    link to file an issue, which is wrong for storage that is down, then the
    "Full stack trace"; for a map task, that user code raised it. Some records
    carry the exception; the others are logged while it is handled, so the
    filter, which runs in the logging call, finds it in `sys.exc_info()`. Ray
    Data's log file keeps every record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return user_error_behind(record.exc_info[1] if record.exc_info else sys.exc_info()[1]) is None


def _off_verbose(where: logging.Logger | logging.Handler, kept: _Notice | _UserErrorInWorker, verbosity: str) -> None:
    """Puts filter `kept` on `where` in place of an equal one, off verbose; verbose shows everything again."""
    for f in [f for f in where.filters if f == kept]:
        where.removeFilter(f)
    if verbosity != "verbose":
        where.addFilter(kept)


@contextlib.contextmanager
def worker_errors_in_one_line() -> Iterator[None]:
    """A UserError raised in a worker (storage that stays down, an encoder's node whose model files differ from
    the driver's), however Ray wrapped it on its way, as the driver's own error of that kind."""
    try:
        yield
    except Exception as e:
        found = user_error_behind(e)
        if found is None or (isinstance(e, UserError) and found[0] is not StorageError):
            raise  # not a user's error, or the driver's own: as it is
        kind, message = found
        if kind is StorageError:
            message += " (groups finished so far are kept: rerun the same command to resume)"
        raise kind(message) from None


def user_error_behind(e: BaseException | None) -> tuple[type[UserError], str] | None:
    """The kind and message of the UserError behind a failure of the Ray Data job, however Ray wrapped it.

    A worker's exception reaches the driver as a RayTaskError around Ray Data's
    UserCodeException, or, raised as an actor started, as an ActorDiedError;
    the error itself did not survive pickling: only its text did. A UserError
    that was only being handled when another exception was raised (a bug in an
    `except` block) is not behind the failure: that exception is, and it is
    shown as it is. So the text is read after its last "During handling"
    line, and an exception's context is followed only through Ray's wrappers.
    """
    import ray.exceptions
    from ray.data.exceptions import SystemException

    seen, todo = set(), [e]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, UserError) and not isinstance(e, ray.exceptions.RayError):
            return type(e), str(e)
        text = str(e)
        found = _REMOTE_USER_ERROR.search(text, max(text.rfind(_RAISED_WHILE_HANDLING), 0))
        if found:
            return _USER_ERRORS[found.group(1)], found.group(2).strip()
        todo += [getattr(e, "cause", None), e.__cause__]
        if isinstance(e, (ray.exceptions.RayError, SystemException)):
            todo.append(e.__context__)
    return None


_USER_ERRORS = {kind.__name__: kind for kind in (UserError, *UserError.__subclasses__())}
_REMOTE_USER_ERROR = re.compile(rf"pipeline\.errors\.({'|'.join(_USER_ERRORS)}): ([^\n]+)")
# Python's line between two tracebacks of a chain where the later exception was raised while the earlier was
# handled (`raise` without `from`, where `from` says "was the direct cause").
_RAISED_WHILE_HANDLING = "During handling of the above exception, another exception occurred:"


# Ray's and Ray Data's console level per verbosity.
RAY_CONSOLE_LEVEL = {"quiet": logging.ERROR, "normal": logging.WARNING, "verbose": logging.INFO}


def docembed_level(verbosity: str) -> int:
    """The `docembed` logger's level: its placement line is verbose's, its resume notice normal's."""
    return {"quiet": logging.WARNING, "normal": logging.INFO, "verbose": logging.DEBUG}[verbosity]


class LiveLine:
    """Writes each line over the previous one on a terminal, cut to its width so that it never wraps."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.drawn = False

    def __call__(self, line: str) -> None:
        width = shutil.get_terminal_size().columns - 1
        self.stream.write("\r\x1b[K" + line[:width])
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


@contextlib.contextmanager
def progress_shown(verbosity: str, update: Callable[[ProgressLine, bool], None], **line_args) -> Iterator[None]:
    """docembed's progress while the block runs, as `verbosity` says (see above).

    `update(line, final)` hands the line the run's state; it is called every
    second from a thread of its own, and the line decides when to print.
    `line_args` go to ProgressLine (`started`, `stages`).
    """
    live = verbosity == "normal" and sys.stdout.isatty()
    if verbosity == "quiet" or (verbosity == "verbose" and sys.stdout.isatty()):
        yield  # nothing, or Ray's bars
        return
    emit = LiveLine() if live else print
    line = ProgressLine(every_s=1.0 if live else 10.0, emit=emit, **line_args)
    ticker = Ticker(lambda final: update(line, final), every_s=1.0)
    try:
        yield
    finally:
        ticker.close(final=live)
        if live:
            emit.close()


class Ticker:
    """Calls `tick` every `every_s` seconds on a thread of its own until closed, and once more at the end."""

    def __init__(self, tick: Callable[[bool], None], every_s: float):
        self.tick, self.every_s = tick, every_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="docembed-progress", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.every_s):
            if not self._tick(False):
                return

    def close(self, *, final: bool) -> None:
        """Stops the thread, then ticks once more if `final`; a failing tick never replaces what the job raised,
        nor keeps the live line from being ended."""
        self.stopped.set()
        self.thread.join()
        if final:
            self._tick(True)

    def _tick(self, final: bool) -> bool:
        """False when the tick failed (e.g. the run's tally gone while the job stops): the display ends, the job
        goes on, and a bug in the display still leaves a trace at debug level."""
        try:
            self.tick(final)
        except Exception:
            log.debug("docembed: the progress line stopped", exc_info=True)
            return False
        return True
