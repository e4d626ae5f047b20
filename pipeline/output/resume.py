"""Opening an output for a run: keep a finished one, resume an unfinished one, or start afresh.

A rerun (`open_output`): a finished output (`_SUCCESS`) is left alone (a run
asking for other settings or inputs is told so), or with `--overwrite` cleared.
Otherwise the recorded fingerprint and inputs must equal this run's, or the run
is refused; so is an output whose run folders hold files without a fingerprint
(someone else's). The recorded listing (`_inputs/`, `pipeline.output.inputs`)
names the run's groups: markers of those groups whose parts all exist are kept
and those groups skipped; every other marker, every part that no kept marker
lists, and `_staging/` are deleted; the other groups run again from scratch.
The whole protocol: docs/exactly-once.md.

A run holds its output for as long as it runs (`held_alone`): a second run
on it is refused, as its reconciliation would delete the first run's work
in progress.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
from collections.abc import Callable, Iterator

import pyarrow.fs as pafs

from pipeline.errors import OutputError, StorageError
from pipeline.io import filesystems as storage
from pipeline.io.filesystems import filesystem_for
from pipeline.io.retries import failing_at
from pipeline.io.uris import redact
from pipeline.output.files import delete_parts, dumps, list_parts, parallel, put, read_json
from pipeline.output.fingerprint import mismatch, same_run
from pipeline.output.inputs import Record, read_record
from pipeline.output.layout import GROUPS_DIR, MANIFEST_FILE, OURS, STAGING_DIR, SUCCESS_FILE, group_of_marker
from pipeline.output.lease import Lease, LeaseTiming, busy


@dataclasses.dataclass
class Resume:
    """What an unfinished output already holds for this job."""

    done: dict[str, dict]  # group id -> its marker
    record: Record  # the listing recorded so far: whole, part of it (a stopped listing), or none
    dropped_groups: int = 0  # markers deleted: not this job's groups, or with parts missing
    dropped_parts: int = 0  # parts deleted: of groups that never finished


@contextlib.contextmanager
def held_alone(output: str, timing: LeaseTiming = LeaseTiming()) -> Iterator[Callable[[], None]]:
    """Holds `output` while the block runs; OutputError when another run holds it. Yields a check for the run's
    commits, which raises OutputError once another run has taken the output over.

    A local output's directory is locked (flock, exclusive, never waited for),
    and the kernel lets go when the holder's process ends, however it ends: a
    killed run leaves no lock behind. A directory this made and left empty is
    removed again. Elsewhere (object stores) the run holds a lease that lapses
    when its holder dies (`pipeline.output.lease`).
    """
    fs, root = filesystem_for(output)
    if isinstance(fs, pafs.LocalFileSystem):
        with _locked(output, root):
            yield lambda: None
        return
    lease = Lease(fs, root, output, timing)
    lease.take()
    storage_down = False
    try:
        yield lease.check
    except StorageError:
        storage_down = True
        raise
    finally:
        lease.release(delete=not storage_down)


@contextlib.contextmanager
def _locked(output: str, root: str) -> Iterator[None]:
    made = not os.path.isdir(root)
    os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(busy(output)) from None
        yield
    finally:
        os.close(fd)
        if made:
            with contextlib.suppress(OSError):  # not empty: the run wrote there
                os.rmdir(root)


def finished(output: str, *, overwrite: bool, manifest: dict) -> bool:
    """Whether `output` holds this run finished (`_SUCCESS`), to be left alone; OutputError where it holds a
    finished run of other settings or inputs. Never with `overwrite`, whose run clears it."""
    fs, root = filesystem_for(output)
    with failing_at(f"output {output}"):
        if overwrite or not storage.exists(fs, f"{root}/{SUCCESS_FILE}"):
            return False
        recorded = read_json(fs, f"{root}/{MANIFEST_FILE}")
    if recorded is not None and not same_run(recorded, manifest):  # not what this command asks
        raise OutputError(mismatch(output, recorded, manifest, finished=True))
    return True


def open_output(output: str, *, overwrite: bool, manifest: dict) -> Resume | None:
    """Makes `output` ready for this job; None when it already holds a finished run."""
    if finished(output, overwrite=overwrite, manifest=manifest):
        return None
    fs, root = filesystem_for(output)
    with failing_at(f"output {output}"):
        if overwrite:
            _clear(fs, root)
        recorded = read_json(fs, f"{root}/{MANIFEST_FILE}")
        if recorded is None:
            if not overwrite:
                _refuse_others(output, fs, root)
                _clear(fs, root)  # empty folders a run made before its fingerprint
            for name in ("", *OURS):
                storage.makedirs(fs, f"{root}/{name}".rstrip("/"))
            put(fs, root, MANIFEST_FILE, dumps(manifest))
        elif not same_run(recorded, manifest):
            raise OutputError(mismatch(output, recorded, manifest))
        return _reconcile(fs, root, read_record(fs, root))


def _reconcile(fs: pafs.FileSystem, root: str, record: Record) -> Resume:
    markers = {}
    for info in storage.list_files(fs, f"{root}/{GROUPS_DIR}"):
        group = group_of_marker(info.path.rsplit("/", 1)[-1])
        if group is not None:
            markers[group] = info.path
    present = list_parts(fs, root)
    wanted = [g for g in markers if g in record.groups]
    contents = dict(zip(wanted, parallel(lambda g: read_json(fs, markers[g]), wanted)))
    done = {g: m for g, m in contents.items() if m is not None and set(m.get("parts", [])) <= present}
    dropped = [path for g, path in markers.items() if g not in done]
    # Markers go before parts: a crash in between leaves parts that no marker lists, swept next time.
    parallel(lambda path: storage.delete_file(fs, path), dropped)
    kept = {p for m in done.values() for p in m["parts"]}
    orphans = sorted(present - kept)
    delete_parts(fs, root, orphans)
    storage.delete_tree(fs, f"{root}/{STAGING_DIR}")
    storage.makedirs(fs, f"{root}/{STAGING_DIR}")
    return Resume(done=done, record=record, dropped_groups=len(dropped), dropped_parts=len(orphans))


def _refuse_others(output: str, fs: pafs.FileSystem, root: str) -> None:
    """OutputError where the folders a run writes hold files but no fingerprint says a run wrote them: a run
    writes its fingerprint before anything else, so they are someone else's, and a run would delete them."""
    held = [f"{name}/" for name in OURS if storage.list_files(fs, f"{root}/{name}")]
    if held:
        raise OutputError(
            f"output {redact(output)} holds {', '.join(held)} but no {MANIFEST_FILE}: not a docembed output, whose "
            "files a run there would delete; choose another output, or pass --overwrite to clear those folders"
        )


def _clear(fs: pafs.FileSystem, root: str) -> None:
    """Deletes what a docembed run writes under `root`, and nothing else."""
    storage.delete_file(fs, f"{root}/{SUCCESS_FILE}")  # first: the output stops being finished
    storage.delete_file(fs, f"{root}/{MANIFEST_FILE}")
    for name in OURS:
        files = storage.list_files(fs, f"{root}/{name}")
        parallel(lambda info: storage.delete_file(fs, info.path), files)
        storage.delete_tree(fs, f"{root}/{name}")


def clear_staging(output: str) -> None:
    """Deletes `_staging/`: what a stopped run was writing there never became part of the output."""
    fs, root = filesystem_for(output)
    with failing_at(f"output {output}"):
        storage.delete_tree(fs, f"{root}/{STAGING_DIR}")
