"""The recorded input set: the listing a run works from, written under its output as it streams.

    _inputs/part-<k>.parquet   the next entries of the listing in URI order (INPUTS_SCHEMA), whole groups
    _inputs/_LISTED.json       written after the last part: how many parts, inputs and skipped files

The driver cuts the listing into groups as pages arrive and records each part
before any of its work starts (`pipeline.run.feed`); the work is read back from
these parts, not from tables the driver holds. A rerun reads the record instead
of listing again, so files added to the bucket after a run started never change
its groups. A listing stopped before `_LISTED.json` (the driver killed) is
continued after its last recorded URI: parts end on group boundaries
(`pipeline.output.groups.GroupCutter`), so the groups are those one whole
listing would have made.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.io import filesystems as storage
from pipeline.io.filesystems import filesystem_for
from pipeline.io.retries import retrying
from pipeline.output.files import dumps, put, read_json
from pipeline.output.layout import INPUTS_DIR, LISTED_FILE, inputs_part_index, inputs_part_path
from pipeline.schemas import INPUTS_SCHEMA

SKIPPED_KEY = "docembed.skipped"  # a part's metadata: files skipped by the listing so far (`Record.skipped`)
GROUP_SIZE_KEY = "docembed.group_size"  # and the --group-size its file groups were cut with


@dataclasses.dataclass
class Record:
    """What an output's `_inputs/` holds: per group, never per file."""

    parts: int = 0  # parts 0 .. parts-1 are recorded
    groups: dict[str, int | None] = dataclasses.field(default_factory=dict)  # group -> files (None: a shard)
    inputs: int = 0  # entries recorded
    # Files the listing skipped up to the end of the last page it had read when the last part was recorded: a
    # page counts its skipped files, not where they lie, and the part may end before the page does (a group's
    # run of files held back). A listing resumed after the part's last URI counts those after it again, so a
    # resumed run's count may be a few files too high.
    skipped: int = 0
    last_uri: str | None = None  # where a stopped listing goes on from
    listed: dict | None = None  # _LISTED.json, once the listing is recorded whole
    group_sizes: set[int] = dataclasses.field(default_factory=set)  # the parts' --group-size (older parts: none)

    @property
    def complete(self) -> bool:
        return self.listed is not None


def read_record(fs: pafs.FileSystem, root: str) -> Record:
    """The record under output `root`, read part by part (the group columns only, and the last URI)."""
    found = sorted(i for i in map(_index, storage.list_files(fs, f"{root}/{INPUTS_DIR}")) if i is not None)
    if found != list(range(len(found))):
        raise RuntimeError(f"{root}/{INPUTS_DIR}: parts {found[:5]}... are not 0..{len(found) - 1}")
    record = Record(parts=len(found), listed=read_json(fs, f"{root}/{LISTED_FILE}"))
    for k in found:
        table = _read(fs, f"{root}/{inputs_part_path(k)}", ["uri", "group", "group_docs"])
        record.inputs += table.num_rows
        record.groups.update(groups_of(table))
        if table.num_rows:
            record.last_uri = table.column("uri")[-1].as_py()
        metadata = table.schema.metadata or {}
        record.skipped = int(metadata.get(SKIPPED_KEY.encode(), b"0"))
        if GROUP_SIZE_KEY.encode() in metadata:
            record.group_sizes.add(int(metadata[GROUP_SIZE_KEY.encode()]))
    if record.complete and record.listed["parts"] != record.parts:
        raise RuntimeError(f"{root}/{LISTED_FILE} names {record.listed['parts']} parts, {record.parts} are there")
    return record


def groups_of(entries: pa.Table) -> dict[str, int | None]:
    """Recorded entries -> each of their groups with its file count (None: a shard, counted by its reader)."""
    groups = entries.group_by("group", use_threads=False).aggregate([("group_docs", "max")])
    return dict(zip(groups.column("group").to_pylist(), groups.column("group_docs_max").to_pylist()))


def write_part(fs: pafs.FileSystem, root: str, k: int, entries: pa.Table, skipped: int, group_size: int) -> None:
    """Records part `k` (INPUTS_SCHEMA rows), whole or not at all; `skipped`: files skipped so far; `group_size`:
    what its groups were cut with, which a resume keeps whatever --group-size it is given."""
    buffer = pa.BufferOutputStream()
    metadata = {SKIPPED_KEY: str(skipped), GROUP_SIZE_KEY: str(group_size)}
    table = entries.cast(INPUTS_SCHEMA).replace_schema_metadata(metadata)
    pq.write_table(table, buffer, compression="zstd")
    put(fs, root, inputs_part_path(k), buffer.getvalue().to_pybytes())


def write_listed(fs: pafs.FileSystem, root: str, parts: int, inputs: int, skipped: int) -> None:
    listed = {"parts": parts, "inputs": inputs, "skipped": skipped}
    put(fs, root, LISTED_FILE, dumps(listed))


def read_part(output: str, k: int) -> pa.Table:
    """Part `k` of `output`'s record, whole (INPUTS_SCHEMA)."""
    fs, root = filesystem_for(output)
    return _read(fs, f"{root}/{inputs_part_path(k)}", None)


def _read(fs: pafs.FileSystem, path: str, columns: list[str] | None) -> pa.Table:
    def read():
        with fs.open_input_file(path) as f:
            return pq.read_table(f, columns=columns)

    return retrying(f"cannot read {storage.shown(fs, path)}", read)


def _index(info: pafs.FileInfo) -> int | None:
    return inputs_part_index(info.path.rsplit("/", 1)[-1])
