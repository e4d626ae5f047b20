"""Exactly once: the driver's account of which commit groups are done, and their done-markers.

Every row carries its group id through the stages; the writer commits one part
per (call, group) and returns one summary per group. The `Ledger` adds the
summaries up per group. A group is complete when its document count is known (a
file group: its members; a shard: its reader puts the count on its last
document's rows), that many documents have had their first row written (chunk
0, or their error row), and the rows written equal the rows those first rows
announce (each chunk row carries its document's chunk count). Only then does
the driver write the group's marker: a marker never exists without all of its
group's data. Before `_SUCCESS`, parts that no marker lists (written by a task
that outlived a killed driver) are swept. Why and how, with the crash cases:
docs/exactly-once.md.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import threading
import time
from collections.abc import Callable

from pipeline.errors import OutputError
from pipeline.io.filesystems import filesystem_for
from pipeline.io.retries import failing_at
from pipeline.io.uris import redact
from pipeline.output import files
from pipeline.output.files import delete_parts, dumps, list_parts, put
from pipeline.output.layout import FORMAT, marker_path
from pipeline.output.resume import Resume

COUNT_KEYS = ("docs_ok", "docs_failed", "chunks", "tokens")
_REPEAT = object()  # what `Ledger._add` says of a summary it has counted already


@dataclasses.dataclass
class _Tally:
    group_docs: int | None = None
    docs_started: int = 0
    rows: int = 0
    expected_rows: int = 0
    parts: list = dataclasses.field(default_factory=list)
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    error_types: collections.Counter = dataclasses.field(default_factory=collections.Counter)


class Ledger:
    """The driver's account of which groups are done; writes each group's marker when it completes.

    Groups are made known as the listing is recorded (`expect`: from the
    driver's thread for those the output's record holds already, then from
    the listing's thread) and counted as their summaries arrive (`add`, from the
    driver's loop); a complete group's marker is written by one of
    `files.IN_FLIGHT` threads, and the group is done once it has landed. It holds
    a tally only for groups in flight, the file count of groups not yet done,
    and the part names of complete ones (for the final sweep): per group,
    never per file. The lock guards counts, never a request to storage.

    `still_held` raises once another run may have taken the output over: it is
    asked before every marker.
    """

    def __init__(self, output: str, resume: Resume, still_held: Callable[[], None] = lambda: None):
        self.output = output
        self.still_held = still_held
        self.fs, self.root = filesystem_for(output)
        self.expected: dict[str, int | None] = {}  # groups not complete -> their file count (None: a shard)
        self.parts = {g: set(m["parts"]) for g, m in resume.done.items()}  # complete groups, markers landed or not
        self.documents = sum(_docs(m["counts"]) for m in resume.done.values())
        self.pending: dict[str, _Tally] = {}
        self.first_done_at: float | None = None  # when this run's first group was committed (time.time())
        self._lock = threading.Lock()
        # Markers side by side: one at a time, at an object store's latency, they would cap the run's commits.
        self._pool = concurrent.futures.ThreadPoolExecutor(files.IN_FLIGHT, thread_name_prefix="docembed-marker")
        self._landing: dict[str, concurrent.futures.Future] = {}  # complete groups -> their marker's write
        self._failure: BaseException | None = None  # the first marker, or its `committed`, that failed
        self._closed = False

    @property
    def todo(self) -> int:
        with self._lock:
            return len(self.expected) + len(self._landing)

    @property
    def done(self) -> int:
        with self._lock:
            return self._done()

    def _done(self) -> int:
        return len(self.parts) - len(self._landing)

    def expect(self, groups: dict[str, int | None]) -> None:
        """Groups of the recorded listing (-> file count, or None for a shard); those already done are skipped."""
        with self._lock:
            self.expected.update((g, docs) for g, docs in groups.items() if g not in self.parts)

    def add(
        self, summaries: list[dict], committed: Callable[[dict, int], None] = lambda marker, done: None
    ) -> list[dict]:
        """Counts writer summaries; returns those it counted, for the run's report (a retried write's summary,
        sent again, is counted once). The marker of each group they complete is sent to be written; once it
        has landed, `committed` gets it and the groups done then, in the thread that wrote it, under the
        ledger's lock. A marker that did not land is raised at the next call here (the driver's next block:
        other groups' commits keep the blocks coming, and where none commits the read's stall lets one through)
        or by `landed`."""
        self._raise_failure()
        counted = []
        with self._lock:
            for summary in summaries:
                outcome = self._add(summary)
                if outcome is _REPEAT:
                    continue
                counted.append(summary)
                if outcome is not None:
                    self._landing[outcome["group"]] = self._pool.submit(self._write_marker, outcome, committed)
        return counted

    def landed(self) -> None:
        """Waits until every marker sent has landed; raises the first that did not."""
        with self._lock:
            landing = list(self._landing.values())
        concurrent.futures.wait(landing)
        self._raise_failure()

    def close(self) -> None:
        """A stopped run's end: drops the markers not yet being written (the rerun redoes their groups) and waits
        for those being written, so that none lands once the run has let go of the output (its lock or lease),
        nor races the staging's removal; none calls `committed` any more. Against a store that is down, the wait
        is its retries', as the staging's removal after it waits them out too."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _add(self, summary: dict) -> dict | object | None:
        """The group's marker when `summary` completes it; None when it does not; _REPEAT when it was counted."""
        group = summary["group"]
        if group not in self.expected:
            if set(summary["parts"]) <= self.parts.get(group, set()):
                return _REPEAT  # a retried write of parts already counted
            raise RuntimeError(f"rows for group {group}, which is not being written: refusing to go on")
        tally = self.pending.setdefault(group, _Tally())
        if set(summary["parts"]) and set(summary["parts"]) <= set(tally.parts):
            return _REPEAT  # the same parts again: a retried write of the same rows
        if summary["group_docs"] is not None:
            tally.group_docs = summary["group_docs"]
        tally.docs_started += summary["docs_started"]
        tally.rows += summary["rows"]
        tally.expected_rows += summary["expected_rows"]
        tally.parts.extend(p for p in summary["parts"] if p not in tally.parts)
        tally.counts.update({k: summary[k] for k in COUNT_KEYS})
        tally.error_types.update(json.loads(summary["error_types"]))

        expected_docs = self.expected[group]
        if expected_docs is not None and tally.group_docs not in (None, expected_docs):
            raise RuntimeError(f"group {group}: {expected_docs} files but rows say {tally.group_docs}")
        docs = expected_docs if expected_docs is not None else tally.group_docs
        if docs is not None and tally.docs_started > docs:
            raise RuntimeError(f"group {group}: {tally.docs_started} documents written, {docs} expected")
        if docs is None or tally.docs_started < docs or tally.rows != tally.expected_rows:
            return None
        return self._finish(group, tally)

    def _finish(self, group: str, tally: _Tally) -> dict:
        """A complete group's marker, to be written; its parts count as its own from now on (a retried write's)."""
        counts = {k: tally.counts[k] for k in COUNT_KEYS}
        counts["error_types"] = dict(tally.error_types)
        del self.pending[group]
        del self.expected[group]
        self.parts[group] = set(tally.parts)
        self.documents += _docs(counts)
        # Its members are in the recorded listing (`_inputs/`, by group), not repeated here.
        return {"format": FORMAT, "group": group, "parts": sorted(tally.parts), "counts": counts}

    def _write_marker(self, marker: dict, committed: Callable[[dict, int], None]) -> None:
        """Writes a complete group's marker (in a thread of `_pool`): the group is done once it has landed."""
        try:
            with self._lock:
                if self._closed:  # taken from the queue as the run stopped
                    return
            self.still_held()
            with failing_at(f"output {self.output}"):
                put(self.fs, self.root, marker_path(marker["group"]), dumps(marker))
            with self._lock:
                del self._landing[marker["group"]]
                self.first_done_at = self.first_done_at or time.time()
                if not self._closed:
                    committed(marker, self._done())
        except BaseException as e:
            with self._lock:
                self._failure = self._failure or e
            raise

    def finish(self) -> None:
        """Checks that every group is done and sweeps parts that no marker lists."""
        self.landed()
        self._pool.shutdown()
        if self.expected:
            raise RuntimeError(
                f"{self.todo} of {self.todo + self.done} groups did not complete "
                f"(e.g. {min(self.expected)}): refusing to mark the output done"
            )
        with failing_at(f"output {self.output}"):
            listed = set().union(*self.parts.values()) if self.parts else set()
            present = list_parts(self.fs, self.root)
            missing = listed - present
            if missing:  # the rerun's reconciliation drops the markers that list them, and redoes their groups
                raise OutputError(
                    f"output {redact(self.output)}: {len(missing)} parts of committed groups are gone "
                    f"(e.g. {sorted(missing)[0]}): something else changed the output while this run wrote it, "
                    "another run on it perhaps; rerun the same command to redo those groups"
                )
            delete_parts(self.fs, self.root, sorted(present - listed))


def _docs(counts: dict) -> int:
    return counts["docs_ok"] + counts["docs_failed"]
