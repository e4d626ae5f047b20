"""Listing the job's inputs, and grouping them into the units that are committed together.

Inputs are local paths, `file://`, `s3://` or `gs://` URIs (see `pipeline.io.filesystems`):
files, or directories and prefixes searched recursively. `.pdf`, `.txt` and `.md`
files are one document each; `.jsonl`, `.jsonl.gz` and `.parquet` files are
shards of many (see `pipeline.io.shards`). The driver only lists names and sizes
here; document bytes are read by the workers.

Groups (see `pipeline.output.resume` for why): the single-document files, sorted by
URI, in runs of `group_size`; and each shard alone. A group's id hashes its
members' URIs with the settings that shape its output, so the same inputs and
settings give the same groups, run after run.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pyarrow as pa
import pyarrow.fs as pafs

from pipeline.errors import InputError, StorageError
from pipeline.extract import kind_of
from pipeline.io.shards import SHARD_KINDS, shard_kind_of
from pipeline.io.filesystems import check_location, file_info, filesystem_for, list_files, redact, scheme_of, uri_of


@dataclasses.dataclass(frozen=True)
class InputFile:
    uri: str  # what the user would write to name this file; the doc_id of a single-document file
    kind: str  # "pdf" or "text" (one document), "jsonl" or "parquet" (a shard of many)
    size: int

    @property
    def is_shard(self) -> bool:
        return self.kind in SHARD_KINDS


def list_inputs(locations: list[str]) -> tuple[list[InputFile], int]:
    """All readable documents under `locations`, sorted by URI, and how many files were skipped.

    A location may be a file or a directory (searched recursively). Files whose
    extension the pipeline does not read are skipped and counted.
    """
    found: dict[str, InputFile] = {}
    skipped = 0
    for location in locations:
        check_location(location)
        fs, path = filesystem_for(location)
        try:
            info = file_info(fs, path)
            if info.type == pafs.FileType.NotFound:
                raise InputError(f"input {redact(location)} does not exist{_missing_bucket(location, fs, path)}")
            infos = [info] if info.type == pafs.FileType.File else list_files(fs, path)
        except StorageError as e:
            raise StorageError(f"input {redact(location)}: {e}") from None
        for entry in infos:
            kind = kind_of(entry.path) or shard_kind_of(entry.path)
            if kind is None:
                skipped += 1
                continue
            uri = uri_of(location, entry.path, path)
            found[uri] = InputFile(uri=uri, kind=kind, size=entry.size)
    return [found[uri] for uri in sorted(found)], skipped


def _missing_bucket(location: str, fs: pafs.FileSystem, path: str) -> str:
    if scheme_of(location) not in ("s3", "gs", "gcs") or "/" not in path:
        return ""
    bucket = path.split("/", 1)[0]
    return f" (there is no bucket {bucket})" if file_info(fs, bucket).type == pafs.FileType.NotFound else ""


@dataclasses.dataclass(frozen=True)
class Group:
    id: str
    members: tuple[InputFile, ...]  # single-document files, or one shard

    @property
    def docs(self) -> int | None:
        """Documents in the group: known up front for files, found while reading for a shard."""
        return None if self.members[0].is_shard else len(self.members)


def plan_groups(inputs: list[InputFile], group_size: int, salt: str = "") -> list[Group]:
    """`inputs` (sorted) -> groups: runs of `group_size` single-document files, and one group per shard.

    `salt` goes into every id: the settings that shape a group's output (model,
    chunking, shard fields), so that changed settings never reuse a group.
    """
    files = [f for f in inputs if not f.is_shard]
    runs = [tuple(files[i : i + group_size]) for i in range(0, len(files), group_size)]
    runs += [(f,) for f in inputs if f.is_shard]
    return [Group(_group_id(members, salt), members) for members in runs]


def _group_id(members: tuple[InputFile, ...], salt: str) -> str:
    digest = hashlib.sha256(salt.encode())
    for f in members:
        digest.update(b"\0" + f.uri.encode())
    return digest.hexdigest()[:20]


WORK_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string()),  # the file's URI
        pa.field("kind", pa.string()),
        pa.field("group", pa.string()),
        pa.field("group_docs", pa.int32()),  # null for a shard: its reader counts
    ]
)


def work_blocks(groups: list[Group], rows_per_block: int) -> list[pa.Table]:
    """The extraction stage's input: blocks of at most `rows_per_block` files, never two groups in one."""
    blocks = []
    for group in groups:
        for i in range(0, len(group.members), rows_per_block):
            members = group.members[i : i + rows_per_block]
            blocks.append(
                pa.table(
                    {
                        "doc_id": [f.uri for f in members],
                        "kind": [f.kind for f in members],
                        "group": [group.id] * len(members),
                        "group_docs": [group.docs] * len(members),
                    },
                    schema=WORK_SCHEMA,
                )
            )
    return blocks
