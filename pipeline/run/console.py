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
import logging
import shutil
import sys
import threading
from collections.abc import Callable, Iterator

from pipeline.run.report import ProgressLine


def ray_init_args(verbosity: str) -> dict:
    """`ray.init` arguments: the driver's `ray` logger level, and whether workers' output reaches this console."""
    return {
        "logging_level": {"quiet": logging.ERROR, "normal": logging.WARNING, "verbose": logging.INFO}[verbosity],
        # Workers' stderr carries their warnings and tracebacks; quiet leaves them to the log directory.
        "log_to_driver": verbosity != "quiet",
    }


def configure_ray_data(verbosity: str) -> None:
    """Ray Data's progress display and console level for datasets made after this call, and Ray's
    notices that say nothing is wrong: shown on verbose only."""
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = verbosity == "verbose"
    console = {"quiet": logging.ERROR, "normal": logging.WARNING, "verbose": logging.INFO}[verbosity]
    for handler in logging.getLogger("ray.data").handlers:
        if _writes_to_console(handler):
            handler.setLevel(console)
            _drop_notice(handler, BARS_OFF_NOTICE, verbosity)
    _drop_notice(logging.getLogger(AUTH_NOTICE_LOGGER), AUTH_ON_NOTICE, verbosity)


def _writes_to_console(handler: logging.Handler) -> bool:
    """A stream handler that is not a file's: Ray Data's console handler, not its session log file's (which
    is a plain Handler that opens its file on first use)."""
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


# Ray Data warns once that its progress bars are off, telling how to turn them on: here they are off
# because docembed shows its own progress (`--verbose` shows Ray's).
BARS_OFF_NOTICE = "Progress bars disabled"
# A local Ray that finds ~/.ray/auth_token turns token authentication on and says so at WARNING: good
# news, not a warning. (Its opposite, that authentication is off, stays: that one is a security warning.)
# Ray names the logger after the private module that logs it: no public name reaches that record.
AUTH_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
AUTH_ON_NOTICE = "Token authentication is enabled"


class _Notice(logging.Filter):
    """Drops the records whose message starts with `prefix`."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def _drop_notice(where: logging.Logger | logging.Handler, prefix: str, verbosity: str) -> None:
    """Drops the notice starting with `prefix` at `where`, off verbose; verbose shows it again."""
    for f in [f for f in where.filters if isinstance(f, _Notice) and f.prefix == prefix]:
        where.removeFilter(f)
    if verbosity != "verbose":
        where.addFilter(_Notice(prefix))


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
            try:
                self.tick(False)
            except Exception:  # e.g. the run's tally gone while the job stops: the display ends, the job goes on
                return

    def close(self, *, final: bool) -> None:
        self.stopped.set()
        self.thread.join()
        if final:
            self.tick(True)
