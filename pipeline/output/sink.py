"""The job's output: Parquet parts under `embeddings/` and `errors/`, then `_SUCCESS`.

Each part holds the rows of one commit group (see `pipeline.output.ledger`) that one
writer call received. It is made and read back in memory, then written whole
or not at all (`write_file`: staged under `_staging/`, checked, then moved into
place) and checked by its size, so a reader never sees a partial file. Its name is the group's id and a digest
of its rows' keys, so a retried write lands on the same name. `_SUCCESS` is
written last, whole or not at all.
"""

from __future__ import annotations

import collections
import json
import uuid
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.errors import OutputError, StorageError
from pipeline.io import filesystems as storage
from pipeline.io.filesystems import filesystem_for
from pipeline.io.retries import describe, retrying
from pipeline.io.uris import check_location, redact
from pipeline.output.files import dumps, parallel, put
from pipeline.output.layout import EMBEDDINGS_DIR, ERRORS_DIR, STAGING_DIR, SUCCESS_FILE, part_name
from pipeline.run.stage_clock import Record, StageClock
from pipeline.schemas import EMBEDDING_COLUMNS, ERRORS_SCHEMA, SUMMARY_SCHEMA, rows_digest


def check_writable(output: str) -> None:
    """Raises OutputError unless `output` can be written; leaves no trace behind but the missing parent
    directories of a local output, which it creates with the output's own and does not remove."""
    check_location(output)
    fs, root = filesystem_for(output)
    probe = f"{root}/.docembed-write-probe-{uuid.uuid4().hex[:8]}"
    try:
        if storage.is_object_store(fs):
            bucket = storage.bucket_missing(fs, root)
            if bucket:
                raise OutputError(f"output {redact(output)} is not writable: there is no bucket {bucket}")
            # As a local output over a file is refused: the run would write beside the object, under its name.
            if storage.file_info(fs, root).type == pafs.FileType.File:
                raise OutputError(f"output {redact(output)} is not writable: it is an object, not a prefix")
            retrying(f"cannot write {storage.shown(fs, probe)}", lambda: _write_probe(fs, probe))
            storage.delete_file(fs, probe)
            return
        existed = storage.exists(fs, root)
        fs.create_dir(root, recursive=True)
        _write_probe(fs, probe)
        fs.delete_file(probe)
        if not existed:
            fs.delete_dir(root)
    except (OSError, ValueError, StorageError) as e:
        raise OutputError(f"output {redact(output)} is not writable: {describe(e)}") from None


def _write_probe(fs: pafs.FileSystem, path: str) -> None:
    with fs.open_output_stream(path) as f:
        f.write(b"ok")


def _part(subdir: str, name: str, table: pa.Table) -> tuple[str, bytes]:
    """One part made and checked in memory, so that what goes to storage is known whole (`write_file` then checks
    its size there as it puts it in place): its path under the output, and its bytes."""
    buffer = pa.BufferOutputStream()
    pq.write_table(table, buffer)
    data = buffer.getvalue()
    if pq.read_metadata(pa.BufferReader(data)).num_rows != table.num_rows:
        raise RuntimeError(f"{subdir}/{name}: the Parquet file does not hold the {table.num_rows} rows written")
    return f"{subdir}/{name}", data.to_pybytes()


def write_block(
    batch: pa.Table, output: str, metadata: dict[str, str] | None = None, record: Record | None = None
) -> list[dict]:
    """Embedded chunk rows (and error rows) -> committed Parquet parts; one summary per group in `batch`
    (a row of SUMMARY_SCHEMA).

    `record` gets the time this took.
    """
    clock = StageClock(record)
    clock.begin(f"write:{rows_digest(batch)}")
    with clock.timing("write") as counts:
        fs, root = filesystem_for(output)
        made = [
            _group_parts(group, batch.filter(pc.equal(batch.column("group"), group)), metadata or {})
            for group in pc.unique(batch.column("group")).to_pylist()
        ]
        parts = [part for _, group_parts in made for part in group_parts]

        def put_part(part: tuple[str, bytes]) -> None:
            put(fs, root, *part)

        # On an object store a part is about seven requests of its latency: a block's parts go side by side. A
        # local write is quicker than a thread's hand-off. Either way the parts are made here, one at a time:
        # Parquet's encoding is CPU, beside the encoder.
        if storage.is_object_store(fs):
            parallel(put_part, parts)
        else:
            for part in parts:
                put_part(part)
        summaries = [summary for summary, _ in made]
        counts.update(rows=batch.num_rows, parts=len(parts))
    clock.count("write", rows_in=batch.num_rows)
    clock.send()
    return summaries


class WriteBlock:
    """`write_block` as the job runs it: in long-lived writer actors (`pipeline.run.job`), started with the job.

    As tasks, each burst of writes after an idle spell started a worker process
    in the middle of the run (Ray stops idle workers after a second), whose
    start-up took CPU from the encoder beside it.

    The summary rows go to `send` (the run's coordinator), which has them
    before the block, left empty, leaves the actor: the driver takes them
    from there and reads no block. Each block it read from Ray's object store
    touched store pages that then stayed in its RSS, 0.37 KiB per PDF over a
    run of 10,000 PDFs (BENCHMARKS.md).
    """

    def __init__(self, output: str, metadata: dict[str, str], record: Record, send: Callable[[list[dict]], None]):
        self.output, self.metadata, self.record, self.send = output, metadata, record, send

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.send(write_block(batch, self.output, self.metadata, self.record))
        return SUMMARY_SCHEMA.empty_table()


def _group_parts(group: str, rows: pa.Table, metadata: dict[str, str]) -> tuple[dict, list[tuple[str, bytes]]]:
    """One group's rows of a writer call -> its summary and its parts (an embeddings part, an errors part, or both)."""
    failed = pc.is_valid(rows.column("error_type"))
    chunks = rows.filter(pc.invert(failed))
    errors = rows.filter(failed)
    parts = []
    if chunks.num_rows:
        table = chunks.select(EMBEDDING_COLUMNS)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        parts.append(_part(EMBEDDINGS_DIR, part_name(group, table), table))
    if errors.num_rows:
        table = pa.table(
            [errors.column(c) for c in ("doc_id", "error_stage", "error_type", "error_message")], schema=ERRORS_SCHEMA
        ).replace_schema_metadata(metadata)
        parts.append(_part(ERRORS_DIR, part_name(group, table), table))
    firsts = chunks.filter(pc.equal(chunks.column("chunk_index"), 0))
    group_docs = pc.max(rows.column("group_docs")).as_py()
    summary = {
        "group": group,
        "group_docs": group_docs,
        "docs_started": firsts.num_rows + errors.num_rows,
        "rows": rows.num_rows,
        "expected_rows": (pc.sum(firsts.column("doc_chunks")).as_py() or 0) + errors.num_rows,
        "parts": [path for path, _ in parts],
        "docs_ok": firsts.num_rows,
        "docs_failed": errors.num_rows,
        "chunks": chunks.num_rows,
        "tokens": pc.sum(chunks.column("n_tokens")).as_py() or 0,
        "error_types": json.dumps(collections.Counter(errors.column("error_type").to_pylist())),
    }
    return summary, parts


def write_success(output: str, report: dict) -> None:
    """Writes `_SUCCESS`, the run's last file, then removes `_staging/`: it holds only what failed writes left
    (a rerun would sweep it), and an empty one, a marker object on S3, would stay in the finished output."""
    fs, root = filesystem_for(output)
    staging = f"{root}/{STAGING_DIR}"
    put(fs, root, SUCCESS_FILE, dumps(report))
    if storage.file_info(fs, staging).type == pafs.FileType.Directory:
        retrying(f"cannot remove {storage.shown(fs, staging)}", lambda: fs.delete_dir(staging))
