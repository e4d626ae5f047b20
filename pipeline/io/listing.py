"""Listing the job's inputs, and grouping them into the units that are committed together.

Inputs are local paths, `file://`, `s3://` or `gs://` URIs (see `pipeline.io.filesystems`):
files, or directories and prefixes searched recursively. `.pdf`, `.txt` and `.md`
files are one document each; `.jsonl`, `.jsonl.gz` and `.parquet` files are
shards of many (see `pipeline.io.shards`). The driver only lists names and sizes
here; document bytes are read by the workers.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.fs as pafs

from pipeline.errors import InputError
from pipeline.io.filesystems import bucket_missing, file_info, filesystem_for, list_files
from pipeline.io.retries import failing_at
from pipeline.io.uris import check_location, redact, uri_of
from pipeline.kinds import SHARD_KINDS, kind_of


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
        with failing_at(f"input {location}"):
            info = file_info(fs, path)
            if info.type == pafs.FileType.NotFound:
                raise InputError(f"input {redact(location)} does not exist{_missing_bucket(fs, path)}")
            infos = [info] if info.type == pafs.FileType.File else list_files(fs, path)
        for entry in infos:
            kind = kind_of(entry.path)
            if kind is None:
                skipped += 1
                continue
            uri = uri_of(location, entry.path, path)
            found[uri] = InputFile(uri=uri, kind=kind, size=entry.size)
    return [found[uri] for uri in sorted(found)], skipped


def _missing_bucket(fs: pafs.FileSystem, path: str) -> str:
    bucket = bucket_missing(fs, path) if "/" in path else None
    return f" (there is no bucket {bucket})" if bucket else ""


@dataclasses.dataclass(frozen=True)
class Page:
    entries: pa.RecordBatch  # uri, kind, size; ascending URI order
    skipped: int


def list_pages(locations: list[str], *, start_after: str | None = None, page_size: int = 1000):
    """TEMPORARY stand-in until the streaming listing lands (branch i20-listing)."""
    found, skipped = list_inputs(locations)
    found = [f for f in found if start_after is None or f.uri > start_after]
    for i in range(0, max(len(found), 1), page_size):
        chunk = found[i : i + page_size]
        yield Page(
            pa.RecordBatch.from_pydict(
                {"uri": [f.uri for f in chunk], "kind": [f.kind for f in chunk], "size": [f.size for f in chunk]},
                schema=pa.schema([("uri", pa.string()), ("kind", pa.string()), ("size", pa.int64())]),
            ),
            skipped if i == 0 else 0,
        )
