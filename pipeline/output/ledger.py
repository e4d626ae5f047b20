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
import dataclasses
import json
import threading
import time

from pipeline.errors import OutputError
from pipeline.io import filesystems as storage
from pipeline.io.filesystems import filesystem_for
from pipeline.io.retries import failing_at
from pipeline.io.uris import redact
from pipeline.output.files import delete_parts, dumps, list_parts
from pipeline.output.layout import FORMAT, STAGING_DIR, marker_path
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
    driver's loop). It holds a tally only for groups in flight, the file count
    of groups not yet done, and the part names of finished ones (for the final
    sweep): per group, never per file.
    """

    def __init__(self, output: str, resume: Resume):
        self.output = output
        self.fs, self.root = filesystem_for(output)
        self.expected: dict[str, int | None] = {}  # groups not done -> their file count (None: a shard)
        self.parts = {g: set(m["parts"]) for g, m in resume.done.items()}
        self.documents = sum(_docs(m["counts"]) for m in resume.done.values())
        self.pending: dict[str, _Tally] = {}
        self.first_done_at: float | None = None  # when this run's first group was committed (time.time())
        self._lock = threading.Lock()

    @property
    def todo(self) -> int:
        return len(self.expected)

    @property
    def done(self) -> int:
        return len(self.parts)

    def expect(self, groups: dict[str, int | None]) -> None:
        """Groups of the recorded listing (-> file count, or None for a shard); those already done are skipped."""
        with self._lock:
            self.expected.update((g, docs) for g, docs in groups.items() if g not in self.parts)

    def add(self, summaries: list[dict]) -> tuple[list[dict], list[dict]]:
        """Counts writer summaries. Returns those it counted, for the run's report (a retried write's summary,
        sent again, is counted once), and the markers of the groups they complete."""
        counted, markers = [], []
        with self._lock:
            for summary in summaries:
                outcome = self._add(summary)
                if outcome is _REPEAT:
                    continue
                counted.append(summary)
                if outcome is not None:
                    markers.append(outcome)
        return counted, markers

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
        counts = {k: tally.counts[k] for k in COUNT_KEYS}
        counts["error_types"] = dict(tally.error_types)
        # Its members are in the recorded listing (`_inputs/`, by group), not repeated here.
        marker = {"format": FORMAT, "group": group, "parts": sorted(tally.parts), "counts": counts}
        path = f"{self.root}/{marker_path(group)}"
        with failing_at(f"output {self.output}"):
            storage.write_file(self.fs, path, dumps(marker), f"{self.root}/{STAGING_DIR}")
        self.first_done_at = self.first_done_at or time.time()
        del self.pending[group]
        del self.expected[group]
        self.parts[group] = set(tally.parts)
        self.documents += _docs(counts)
        return marker

    def finish(self) -> None:
        """Checks that every group is done and sweeps parts that no marker lists."""
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
