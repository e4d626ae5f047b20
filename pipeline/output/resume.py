"""Exactly once and resumable: commit groups, their parts, done-markers, and the output's fingerprint.

Layout under `--output`:

    _docembed.json                          written first: the fingerprint of the model,
                                            tokenizer and chunking this output is made with
    embeddings/part-<group>-<digest>.parquet  chunk rows of one group (one or more parts)
    errors/part-<group>-<digest>.parquet      error rows of one group
    _groups/<group>.json                    a group's done-marker: its members, parts and
                                            counts; written after all of its parts
    _staging/                               files being written; never read
    _SUCCESS                                written last, once every group is done

The scheme:

1. The driver lists the inputs and cuts them into groups (`sources.plan_groups`):
   runs of `group_size` single-document files, and each shard alone. A group's id
   hashes its members' URIs and the settings that shape its rows, so the same job
   forms the same groups on every run.
2. Every row carries its group id through the stages. A writer call may hold rows
   of several groups, and a group's rows may reach several writer calls, so the
   writer commits one part per (call, group): written under `_staging/`, read back,
   moved into place, and named by the group and a digest of its rows' keys (a
   retried write lands on the same name). It returns one summary per group: the
   parts, and counts.
3. The driver (`Ledger`) adds the summaries up per group. A group is complete when
   its document count is known (a file group: its members; a shard: its reader
   puts the count on its last document's rows), that many documents have had their
   first row written (chunk 0, or their error row), and the rows written equal the
   rows those first rows announce (each chunk row carries its document's chunk
   count). Only then does the driver write the group's marker: a marker never
   exists without all of its group's data.
4. A rerun (`open_output`): a finished output (`_SUCCESS`) is left alone, or with
   `--overwrite` cleared. Otherwise the recorded fingerprint must equal this run's,
   or the run is refused. Markers of this job's groups whose parts all exist are
   kept and those groups skipped; every other marker, every part that no kept marker
   lists, and `_staging/` are deleted; the other groups run again from scratch.
5. Before `_SUCCESS`, parts that no marker lists (written by a task that outlived a
   killed driver) are swept once more, and `_SUCCESS` counts every marker.

So every input ends in exactly one group, and every group's rows are exactly in
the parts its marker lists: each `(doc_id, chunk_index)` once, whenever a crash
came. Resume granularity is a group: a crash costs at most the groups in flight.
Two runs writing into one output at the same time are not supported.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import json

import pyarrow.fs as pafs

from pipeline.io import filesystems as storage
from pipeline.errors import OutputError, StorageError
from pipeline.output.sink import EMBEDDINGS_DIR, ERRORS_DIR, STAGING_DIR, SUCCESS_FILE
from pipeline.io.listing import Group
from pipeline.io.filesystems import filesystem_for, redact

MANIFEST_FILE = "_docembed.json"
GROUPS_DIR = "_groups"
FORMAT = 1  # of the layout above; part of every group id
_OURS = (EMBEDDINGS_DIR, ERRORS_DIR, GROUPS_DIR, STAGING_DIR)
_THREADS = 16  # concurrent small reads and deletes against object storage


def fingerprint(spec, chunking, encoder, pdf_extractor: str) -> dict:
    """What makes this output's numbers: model weights, tokenizer, head, chunking, compute dtype, PDF extractor."""
    settings = {
        "model_fingerprint": spec.fingerprint,
        "weights_sha256": spec.weights_sha256,
        "tokenizer_sha256": spec.tokenizer_sha256,
        "max_tokens": chunking.max_tokens,
        "overlap": chunking.overlap,
        "dtype": encoder.dtype,
        "pdf_extractor": pdf_extractor,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return {"fingerprint": digest, "model": redact(spec.model_id), **settings}


@dataclasses.dataclass
class Resume:
    """What an unfinished output already holds for this job."""

    done: dict[str, dict]  # group id -> its marker
    dropped_groups: int = 0  # markers deleted: not this job's groups, or with parts missing
    dropped_parts: int = 0  # parts deleted: of groups that never finished


def open_output(output: str, *, overwrite: bool, manifest: dict, group_ids: set[str]) -> Resume | None:
    """Makes `output` ready for this job; None when it already holds a finished run."""
    fs, root = filesystem_for(output)
    try:
        if storage.exists(fs, f"{root}/{SUCCESS_FILE}"):
            if not overwrite:
                return None
            _clear(fs, root)
        elif overwrite:
            _clear(fs, root)
        recorded = _read_json(fs, f"{root}/{MANIFEST_FILE}")
        if recorded is None:
            _clear(fs, root)  # leftovers without a fingerprint cannot be trusted
            for name in ("", EMBEDDINGS_DIR, ERRORS_DIR, GROUPS_DIR, STAGING_DIR):
                storage.makedirs(fs, f"{root}/{name}".rstrip("/"))
            storage.write_file(fs, f"{root}/{MANIFEST_FILE}", _dumps(manifest), f"{root}/{STAGING_DIR}")
        elif recorded.get("fingerprint") != manifest["fingerprint"]:
            raise OutputError(_mismatch(output, recorded, manifest))
        return _reconcile(fs, root, group_ids)
    except StorageError as e:
        raise StorageError(f"output {redact(output)}: {e}") from None


def _mismatch(output: str, recorded: dict, manifest: dict) -> str:
    keys = ("model", "model_fingerprint", "max_tokens", "overlap", "dtype", "pdf_extractor")
    differs = [f"{k} {recorded.get(k)!r} there, {manifest.get(k)!r} now" for k in keys if recorded.get(k) != manifest.get(k)]
    return (
        f"output {redact(output)} holds an unfinished run made with other settings "
        f"(fingerprint {recorded.get('fingerprint')}, this run {manifest['fingerprint']}: {'; '.join(differs)}); "
        "resume it with the same model and chunking, or start afresh with --overwrite"
    )


def _reconcile(fs: pafs.FileSystem, root: str, group_ids: set[str]) -> Resume:
    markers = {}
    for info in storage.list_files(fs, f"{root}/{GROUPS_DIR}"):
        name = info.path.rsplit("/", 1)[-1]
        if name.endswith(".json"):
            markers[name[: -len(".json")]] = info.path
    present = {_rel(root, i.path) for d in (EMBEDDINGS_DIR, ERRORS_DIR) for i in storage.list_files(fs, f"{root}/{d}")}
    wanted = [g for g in markers if g in group_ids]
    contents = dict(zip(wanted, _parallel(lambda g: _read_json(fs, markers[g]), wanted)))
    done = {g: m for g, m in contents.items() if m is not None and set(m.get("parts", [])) <= present}
    dropped = [path for g, path in markers.items() if g not in done]
    # Markers go before parts: a crash in between leaves parts that no marker lists, swept next time.
    _parallel(lambda path: storage.delete_file(fs, path), dropped)
    kept = {p for m in done.values() for p in m["parts"]}
    orphans = sorted(present - kept)
    _parallel(lambda rel: storage.delete_file(fs, f"{root}/{rel}"), orphans)
    storage.delete_tree(fs, f"{root}/{STAGING_DIR}")
    storage.makedirs(fs, f"{root}/{STAGING_DIR}")
    return Resume(done=done, dropped_groups=len(dropped), dropped_parts=len(orphans))


def _clear(fs: pafs.FileSystem, root: str) -> None:
    """Deletes what a docembed run writes under `root`, and nothing else."""
    storage.delete_file(fs, f"{root}/{SUCCESS_FILE}")  # first: the output stops being finished
    storage.delete_file(fs, f"{root}/{MANIFEST_FILE}")
    for name in _OURS:
        files = storage.list_files(fs, f"{root}/{name}")
        _parallel(lambda info: storage.delete_file(fs, info.path), files)
        storage.delete_tree(fs, f"{root}/{name}")


def _rel(root: str, path: str) -> str:
    return path[len(root) :].lstrip("/")


def _read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    try:
        return json.loads(storage.read_file(fs, path))
    except (FileNotFoundError, ValueError):
        return None


def _dumps(obj) -> bytes:
    return json.dumps(obj, indent=2, sort_keys=True).encode()


def _parallel(fn, items: list) -> list:
    if len(items) <= 1:
        return [fn(i) for i in items]
    with concurrent.futures.ThreadPoolExecutor(min(_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


COUNT_KEYS = ("docs_ok", "docs_failed", "chunks", "tokens")


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

    Holds a tally only for groups in flight, and the part names of finished ones
    (for the final sweep): small next to the job's list of input files.
    """

    def __init__(self, output: str, groups: list[Group], resume: Resume):
        self.output = output
        self.fs, self.root = filesystem_for(output)
        self.members = {g.id: g for g in groups}
        self.todo = {g.id for g in groups} - set(resume.done)
        self.parts = {g: set(m["parts"]) for g, m in resume.done.items()}
        self.documents = sum(_docs(m["counts"]) for m in resume.done.values())
        self.pending: dict[str, _Tally] = {}

    def add(self, summary: dict) -> dict | None:
        """Counts one writer summary; returns the group's marker when this completes it."""
        group = summary["group"]
        if group not in self.todo:
            if set(summary["parts"]) <= self.parts.get(group, set()):
                return None  # a retried write of parts already counted
            raise RuntimeError(f"rows for group {group}, which is not being written: refusing to go on")
        tally = self.pending.setdefault(group, _Tally())
        if set(summary["parts"]) and set(summary["parts"]) <= set(tally.parts):
            return None  # the same parts again: a retried write of the same rows
        if summary["group_docs"] is not None:
            tally.group_docs = summary["group_docs"]
        tally.docs_started += summary["docs_started"]
        tally.rows += summary["rows"]
        tally.expected_rows += summary["expected_rows"]
        tally.parts.extend(p for p in summary["parts"] if p not in tally.parts)
        tally.counts.update({k: summary[k] for k in COUNT_KEYS})
        tally.error_types.update(json.loads(summary["error_types"]))

        expected_docs = self.members[group].docs
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
        marker = {
            "format": FORMAT,
            "group": group,
            "members": [f.uri for f in self.members[group].members],
            "parts": sorted(tally.parts),
            "counts": counts,
        }
        path = f"{self.root}/{GROUPS_DIR}/{group}.json"
        try:
            storage.write_file(self.fs, path, _dumps(marker), f"{self.root}/{STAGING_DIR}")
        except StorageError as e:
            raise StorageError(f"output {redact(self.output)}: {e}") from None
        del self.pending[group]
        self.todo.discard(group)
        self.parts[group] = set(tally.parts)
        self.documents += _docs(counts)
        return marker

    def finish(self) -> None:
        """Checks that every group is done and sweeps parts that no marker lists."""
        if self.todo:
            raise RuntimeError(
                f"{len(self.todo)} of {len(self.members)} groups did not complete "
                f"(e.g. {sorted(self.todo)[0]}): refusing to mark the output done"
            )
        try:
            listed = set().union(*self.parts.values()) if self.parts else set()
            present = {
                _rel(self.root, i.path)
                for d in (EMBEDDINGS_DIR, ERRORS_DIR)
                for i in storage.list_files(self.fs, f"{self.root}/{d}")
            }
            missing = listed - present
            if missing:
                raise RuntimeError(f"{len(missing)} committed parts are gone (e.g. {sorted(missing)[0]})")
            stray = sorted(present - listed)
            _parallel(lambda rel: storage.delete_file(self.fs, f"{self.root}/{rel}"), stray)
        except StorageError as e:
            raise StorageError(f"output {redact(self.output)}: {e}") from None


def _docs(counts: dict) -> int:
    return counts["docs_ok"] + counts["docs_failed"]
