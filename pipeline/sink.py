"""The job's output: Parquet parts under `embeddings/` and `errors/`, then `_SUCCESS`.

Each part is written under `_staging/`, read back to check it, and only then
moved to its final name, so a reader never sees a partial file; `_SUCCESS` is
written last, the same way.
"""

from __future__ import annotations

import collections
import json
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.errors import OutputError
from pipeline.sources import filesystem_for

EMBEDDINGS_DIR = "embeddings"
ERRORS_DIR = "errors"
STAGING_DIR = "_staging"
SUCCESS_FILE = "_SUCCESS"

ERRORS_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string()),
        pa.field("stage", pa.string()),
        pa.field("error_type", pa.string()),
        pa.field("message", pa.string()),
    ]
)

SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("docs_ok", pa.int64()),
        pa.field("docs_failed", pa.int64()),
        pa.field("chunks", pa.int64()),
        pa.field("tokens", pa.int64()),
        pa.field("error_types", pa.string()),  # JSON object: error_type -> count
    ]
)


def check_writable(output: str) -> None:
    """Raises OutputError unless `output` can be written; leaves no trace behind."""
    fs, root = filesystem_for(output)
    probe = f"{root}/.docembed-write-probe"
    try:
        existed = _exists(fs, root)
        fs.create_dir(root, recursive=True)
        with fs.open_output_stream(probe) as f:
            f.write(b"ok")
        fs.delete_file(probe)
        if not existed:
            fs.delete_dir(root)
    except (OSError, ValueError) as e:
        raise OutputError(f"output {output} is not writable: {e}") from None


def prepare_output(output: str, overwrite: bool) -> bool:
    """Makes `output` ready for a run. Returns False when it already holds a finished run.

    Without `overwrite`, an output with `_SUCCESS` is left alone; leftovers of an
    unfinished run are cleared, since runs are not resumable yet.
    """
    fs, root = filesystem_for(output)
    try:
        success = f"{root}/{SUCCESS_FILE}"
        if _exists(fs, success):
            if not overwrite:
                return False
            fs.delete_file(success)
        fs.create_dir(root, recursive=True)
        for name in (EMBEDDINGS_DIR, ERRORS_DIR, STAGING_DIR):
            path = f"{root}/{name}"
            if _exists(fs, path):
                fs.delete_dir(path)
            fs.create_dir(path, recursive=True)
    except (OSError, ValueError) as e:
        raise OutputError(f"output {output} is not writable: {e}") from None
    return True


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def _commit(fs: pafs.FileSystem, root: str, subdir: str, name: str, table: pa.Table) -> None:
    staged = f"{root}/{STAGING_DIR}/{subdir}-{name}"
    pq.write_table(table, staged, filesystem=fs)
    written = pq.read_metadata(staged, filesystem=fs).num_rows
    if written != table.num_rows:
        raise OSError(f"{staged}: wrote {table.num_rows} rows but read back {written}")
    fs.move(staged, f"{root}/{subdir}/{name}")


def write_block(batch: pa.Table, output: str, embedding_columns: list[str]) -> pa.Table:
    """Embedded chunk rows (and error rows) -> committed Parquet parts; returns one summary row."""
    fs, root = filesystem_for(output)
    failed = pc.is_valid(batch.column("error_type"))
    chunks = batch.filter(pc.invert(failed)).select(embedding_columns)
    errors = batch.filter(failed)
    errors = pa.table(
        [errors.column(c) for c in ("doc_id", "error_stage", "error_type", "error_message")], schema=ERRORS_SCHEMA
    )
    name = f"part-{uuid.uuid4().hex}.parquet"
    if chunks.num_rows:
        _commit(fs, root, EMBEDDINGS_DIR, name, chunks)
    if errors.num_rows:
        _commit(fs, root, ERRORS_DIR, name, errors)
    error_types = collections.Counter(errors.column("error_type").to_pylist())
    summary = {
        "docs_ok": pc.sum(pc.equal(chunks.column("chunk_index"), 0)).as_py() or 0,
        "docs_failed": errors.num_rows,
        "chunks": chunks.num_rows,
        "tokens": pc.sum(chunks.column("n_tokens")).as_py() or 0,
        "error_types": json.dumps(error_types),
    }
    return pa.Table.from_pylist([summary], schema=SUMMARY_SCHEMA)


def write_success(output: str, report: dict) -> None:
    fs, root = filesystem_for(output)
    staged = f"{root}/{STAGING_DIR}/{SUCCESS_FILE}"
    with fs.open_output_stream(staged) as f:
        f.write(json.dumps(report, indent=2, sort_keys=True).encode())
    fs.move(staged, f"{root}/{SUCCESS_FILE}")
