"""What the job prints: Ray Data's knobs per verbosity, the live line, the ticker and the progress it shows
(no Ray started)."""

import io
import logging
import sys
import time
import traceback

import pytest
import ray.data
from ray.data._internal.logging import SessionFileHandler  # private: no public name for Ray Data's log-file handler

from pipeline.run.console import (
    AUTH_NOTICE_LOGGER,
    LiveLine,
    Ticker,
    configure_ray_data,
    progress_shown,
    ray_init_args,
    user_error_behind,
    worker_errors_in_one_line,
)
from pipeline.run.report import RunReport


def console_levels() -> tuple[list[int], list[int]]:
    """The levels of Ray Data's console handlers and of its log-file handlers (pytest's own left out)."""
    handlers = [h for h in logging.getLogger("ray.data").handlers if not type(h).__module__.startswith("_pytest")]
    files = [h.level for h in handlers if isinstance(h, SessionFileHandler)]
    return [h.level for h in handlers if not isinstance(h, SessionFileHandler)], files


def test_each_verbosity_sets_ray_datas_progress_and_console_level_and_leaves_its_log_file_alone():
    _, files_before = console_levels()
    try:
        for verbosity, bars, level in [
            ("quiet", False, logging.ERROR),
            ("normal", False, logging.WARNING),
            ("verbose", True, logging.INFO),
        ]:
            configure_ray_data(verbosity)
            consoles, files = console_levels()
            assert ray.data.DataContext.get_current().enable_progress_bars is bars
            assert consoles and set(consoles) == {level} and files == files_before
    finally:
        configure_ray_data("verbose")
    assert ray_init_args("quiet") == {"logging_level": logging.ERROR, "log_to_driver": False}
    assert ray_init_args("normal") == {"logging_level": logging.WARNING, "log_to_driver": True}


def test_ray_datas_bars_off_notice_is_dropped_off_verbose_only():
    logger = logging.getLogger("ray.data")
    handler = next(h for h in logger.handlers if not isinstance(h, SessionFileHandler))
    record = logger.makeRecord("ray.data", logging.WARNING, "x", 1, "Progress bars disabled. To enable...", (), None)
    try:
        configure_ray_data("normal")
        assert not handler.filter(record)
        assert handler.filter(logger.makeRecord("ray.data", logging.WARNING, "x", 1, "an actor died", (), None))
    finally:
        configure_ray_data("verbose")


def test_ray_datas_records_of_a_storage_failure_are_dropped_off_verbose_only():
    """The run says a storage failure in one line: Ray Data's records of it, and its notice that the run aborts,
    stay in its log file. Other errors, and records logged while handling them, still show."""
    from ray.exceptions import RayTaskError

    from pipeline.errors import StorageError

    logger = logging.getLogger("ray.data")
    handler = next(h for h in logger.handlers if not isinstance(h, SessionFileHandler))
    storage = StorageError("cannot read s3://b/o/_inputs/part-000000.parquet: still failing after 3 attempts")
    # As it reaches the driver from a worker: Ray's wrapper, whose text holds the worker's traceback.
    remote = RayTaskError("ReadRecordedInputs", f"Traceback ...\npipeline.errors.StorageError: {storage}\n", storage)
    bug = ValueError("a bug")

    def shown(message: str, carried: BaseException | None = None, handling: BaseException | None = None) -> bool:
        info = (type(carried), carried, None) if carried else None
        record = logger.makeRecord("ray.data", logging.ERROR, "x", 1, message, (), info)
        if handling is None:
            return handler.filter(record)
        try:
            raise handling
        except type(handling):
            return handler.filter(record)

    abort = 'An exception was raised from a task of operator "ReadRecordedInputs". Dataset execution will now abort.'
    try:
        for verbosity in ("normal", "quiet"):
            configure_ray_data(verbosity)
            assert not shown(abort) and not shown(abort, carried=bug)
            assert not shown("Full stack trace:", carried=remote) and not shown("Full stack trace:", carried=storage)
            assert not shown("Exception occurred in Ray Data or Ray Core internal code.", handling=remote)
            assert shown("Full stack trace:", carried=bug) and shown("an actor died", handling=bug)
            assert shown("an actor died")
        configure_ray_data("verbose")
        assert shown(abort) and shown("Full stack trace:", carried=remote)
        assert shown("Exception occurred in Ray Data or Ray Core internal code.", handling=remote)
    finally:
        configure_ray_data("verbose")


def raised(error: BaseException) -> BaseException:
    """What `worker_errors_in_one_line` lets out when `error` is raised within it."""
    with pytest.raises(BaseException) as caught, worker_errors_in_one_line():
        raise error
    return caught.value


def chained(error: BaseException, raised_while_handling: BaseException, cause: bool) -> BaseException:
    """`raised_while_handling` raised in an `except` block for `error`: `from` it where `cause`."""
    try:
        try:
            raise error
        except type(error) as e:
            if cause:
                raise raised_while_handling from e
            raise raised_while_handling  # noqa: B904 (the chain without `from` is the point)
    except type(raised_while_handling) as e:
        return e


def from_worker(function: str, error: BaseException):
    """`error` as it reaches the driver from a worker: Ray's wrapper around the worker's formatted traceback."""
    from ray.exceptions import RayTaskError

    return RayTaskError(function, "".join(traceback.format_exception(error)), None)


def test_a_user_error_raised_in_a_worker_is_the_drivers_error_of_that_kind_and_the_drivers_own_pass_as_they_are():
    """A worker's error reaches the driver as text inside Ray's wrappers (a call's RayTaskError, an actor's
    ActorDiedError): the run names it in one line. A storage failure adds that a rerun resumes."""
    from ray.exceptions import RayTaskError

    from pipeline.errors import ModelError, OutputError, StorageError

    refused = "this node's tokenizer is not the job's driver's (a here, b there): every node must hold the same"
    remote = RayTaskError(
        "MapWorker(MapBatches(ChunkBlock))", f"Traceback ...\npipeline.errors.ModelError: {refused}\n", None
    )
    assert (type(raised(remote)), str(raised(remote))) == (ModelError, refused)
    down = RayTaskError(
        "ReadRecordedInputs", "Traceback ...\npipeline.errors.StorageError: cannot read s3://b/k\n", None
    )
    assert isinstance(raised(down), StorageError)
    assert (
        str(raised(down)) == "cannot read s3://b/k (groups finished so far are kept: rerun the same command to resume)"
    )
    own, bug = OutputError("another run holds the output"), ValueError("a bug")
    assert raised(own) is own and raised(bug) is bug


def test_a_bug_raised_while_a_user_error_was_handled_is_shown_as_it_is():
    """A UserError that was only being handled when a bug raised (in a worker or here) is not why the run failed:
    the bug is let out as it is, and Ray Data's records of it show. A UserError that is the direct cause of a
    wrapper, as of Ray Data's UserCodeException around a stage's error, is still the run's one line."""
    from ray.exceptions import UserCodeException

    from pipeline.errors import StorageError

    down = StorageError("cannot write s3://b/out/embeddings/part-1.parquet")
    writer = "MapWorker(MapBatches(WriteBlock))"
    for error in (
        from_worker(writer, chained(down, ValueError("a bug"), cause=False)),
        chained(down, ValueError("a bug"), cause=False),
    ):
        assert user_error_behind(error) is None and raised(error) is error

    for error in (
        from_worker(writer, chained(down, UserCodeException("UDF failed to process a data block."), cause=True)),
        chained(down, UserCodeException("UDF failed to process a data block."), cause=False),
    ):
        assert user_error_behind(error) == (StorageError, str(down))
        assert str(raised(error)).startswith(f"{down} (groups finished so far are kept")
    # Where both are in a worker's text, the last exception decides.
    twice = from_worker(writer, chained(ValueError("a bug"), chained(down, UserCodeException("x"), True), False))
    assert user_error_behind(twice) == (StorageError, str(down))


def test_rays_token_auth_on_notice_is_dropped_off_verbose_only_and_the_off_warning_stays():
    logger = logging.getLogger(AUTH_NOTICE_LOGGER)

    def shown(message: str) -> bool:
        return logger.filter(logger.makeRecord(logger.name, logging.WARNING, "x", 1, message, (), None))

    on = "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out."
    off = "Token authentication is disabled for this Ray cluster. Anyone with network access ..."
    try:
        for verbosity in ("normal", "quiet", "normal"):
            configure_ray_data(verbosity)
            assert not shown(on) and shown(off)
        configure_ray_data("verbose")
        assert shown(on) and shown(off)
    finally:
        configure_ray_data("verbose")


def test_live_line_redraws_one_row_and_ends_it(monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    out = io.StringIO()
    line = LiveLine(out)
    line("docembed: progress 10% and a long tail")
    line("docembed: progress 20%")
    line.close()
    assert out.getvalue() == "\r\x1b[Kdocembed: progress \r\x1b[Kdocembed: progress \n"


def test_ticker_ticks_until_closed_then_once_finally():
    calls = []
    ticker = Ticker(calls.append, every_s=0.01)
    while len(calls) < 3:
        time.sleep(0.005)
    ticker.close(final=True)
    assert set(calls[:-1]) == {False} and calls[-1] is True


def test_a_failing_tick_ends_the_display_with_a_debug_record(caplog):
    def tick(final: bool) -> None:
        raise RuntimeError("the tally is gone")

    caplog.set_level(logging.DEBUG, logger="docembed")
    ticker = Ticker(tick, every_s=0.01)
    ticker.thread.join(timeout=10)
    assert not ticker.thread.is_alive()
    ticker.close(final=False)
    [record] = [r for r in caplog.records if r.name == "docembed"]
    assert record.levelno == logging.DEBUG and "the tally is gone" in str(record.exc_info[1])


def test_a_failing_final_tick_neither_replaces_the_jobs_error_nor_leaves_the_live_line_open(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def update(line, final: bool) -> None:
        if final:
            raise RuntimeError("the tally is gone")
        line.update(report, 1, 1, force=True)

    report = RunReport("m", "f", {}, inputs=1, skipped=0)
    out = Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(ValueError, match="the job's own"), progress_shown("normal", update):
        time.sleep(1.5)  # one tick draws the line
        raise ValueError("the job's own")
    assert out.getvalue().startswith("\r\x1b[Kdocembed: progress 50%") and out.getvalue().endswith("\n")
