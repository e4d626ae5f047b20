"""Shards: files of many documents (`.jsonl`, `.jsonl.gz`, `.parquet`), streamed row by row.

A jsonl shard holds one JSON object per line; a Parquet shard one row per
document. Each names its document's id and text in fields (`id` and `text` by
default, `ShardFields` to change). A row becomes a document whose doc_id is
`URI#id`. Rows are read in buffered ranges and handed on as they come, so a
shard of any size costs one buffer and one block of documents of memory, never
the whole shard.

A row that cannot be a document (not JSON, no id, no text) becomes an error row
of its own; a shard that cannot be read at all (not Parquet, missing columns,
a corrupt gzip stream, no rows) becomes one error row with the shard's URI as
doc_id, after any documents read before the damage. Storage failures are not the
shard's fault: they raise `StorageError` and stop the job. Ids are expected to be
unique within a shard (the pipeline does not hold a shard's ids to check).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import zlib
from collections.abc import Iterator

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.errors import ShardError, StorageError
from pipeline.io.filesystems import filesystem_for
from pipeline.io.retries import NOT_FOUND, retrying
from pipeline.schemas import error_row

SHARD_SUFFIXES = ((".jsonl.gz", "jsonl"), (".jsonl", "jsonl"), (".parquet", "parquet"))
SHARD_KINDS = ("jsonl", "parquet")
READ_BUFFER = 1 << 20  # bytes per ranged read of a shard
PARQUET_BATCH = 256  # rows decoded at a time


@dataclasses.dataclass(frozen=True)
class ShardFields:
    id: str = "id"
    text: str = "text"


def shard_kind_of(path: str) -> str | None:
    lower = path.lower()
    for suffix, kind in SHARD_SUFFIXES:
        if lower.endswith(suffix):
            return kind
    return None


def _error(doc_id: str, error_type: str, message: str, stage: str = "read") -> dict:
    return error_row({"doc_id": doc_id}, stage, error_type, message)


def _document(uri: str, doc_id, text, where: str) -> dict:
    if doc_id is None or doc_id == "":
        return _error(f"{uri}#{where}", "MissingId", f"{where}: no id")
    full_id = f"{uri}#{doc_id}"
    if not isinstance(text, str):
        kind = "missing" if text is None else type(text).__name__
        return _error(full_id, "NoText", f"{where}: text field is {kind}", stage="extract")
    if not text.strip():
        return _error(full_id, "NoText", f"{where}: empty text", stage="extract")
    return {"doc_id": full_id, "pages": [text]}


def iter_shard(uri: str, kind: str, fields: ShardFields = ShardFields()) -> Iterator[dict]:
    """Document rows of one shard, in order: `{doc_id, pages}` or error rows (see `_error`)."""
    fs, path = filesystem_for(uri)
    count = 0
    try:
        with _RangeReader(fs, path, uri) as raw:
            rows = _jsonl_rows(uri, raw, fields) if kind == "jsonl" else _parquet_rows(uri, raw, fields)
            for row in rows:
                count += 1
                yield row
    except NOT_FOUND as e:
        yield _error(uri, type(e).__name__, str(e))
        return
    except ShardError as e:
        after = f" after {count} documents" if count else ""
        yield _error(uri, e.error_type, f"{e}{after}")
        return
    if count == 0:
        yield _error(uri, "EmptyShard", "the shard holds no documents")


def _jsonl_rows(uri: str, raw: io.RawIOBase, fields: ShardFields) -> Iterator[dict]:
    stream = io.BufferedReader(raw, READ_BUFFER)
    if uri.lower().endswith(".gz"):
        stream = gzip.GzipFile(fileobj=stream, mode="rb")
    line_no = 0
    while True:
        try:
            line = stream.readline()
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:  # storage failures are StorageError: not caught
            raise ShardError("CorruptShard", f"unreadable gzip stream at line {line_no + 1}: {e}") from None
        if not line:
            return
        line_no += 1
        if not line.strip():
            continue
        where = f"line:{line_no}"
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, ValueError) as e:
            yield _error(f"{uri}#{where}", "BadRecord", f"{where}: not a JSON object: {e}")
            continue
        if not isinstance(record, dict):
            yield _error(f"{uri}#{where}", "BadRecord", f"{where}: a JSON {type(record).__name__}, not an object")
            continue
        yield _document(uri, _id_str(record.get(fields.id)), record.get(fields.text), where)


def _parquet_rows(uri: str, raw: io.RawIOBase, fields: ShardFields) -> Iterator[dict]:
    try:
        # No pre-buffering: it would read every row group's columns up front.
        shard = pq.ParquetFile(raw, pre_buffer=False)
    except (ValueError, OSError) as e:  # ArrowInvalid is a ValueError
        if _is_storage(e):
            raise
        raise ShardError("CorruptShard", f"not a Parquet file: {e}") from None
    missing = [f for f in (fields.id, fields.text) if f not in shard.schema_arrow.names]
    if missing:
        raise ShardError("BadShard", f"no column {', '.join(missing)} (columns: {', '.join(shard.schema_arrow.names)})")
    row = 0
    try:
        for batch in shard.iter_batches(batch_size=PARQUET_BATCH, columns=[fields.id, fields.text]):
            ids = batch.column(0).to_pylist()
            texts = batch.column(1).to_pylist()
            for doc_id, text in zip(ids, texts):
                yield _document(uri, _id_str(doc_id), text, f"row:{row}")
                row += 1
    except (ValueError, OSError) as e:
        if _is_storage(e):
            raise
        raise ShardError("CorruptShard", f"unreadable Parquet data at row {row}: {e}") from None


def _is_storage(e: BaseException) -> bool:
    """pyarrow wraps an exception raised inside a Python file object; ours must still stop the job."""
    return isinstance(e, StorageError) or isinstance(e.__cause__, StorageError) or isinstance(e.__context__, StorageError)


def _id_str(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


class _RangeReader(io.RawIOBase):
    """A seekable reader over one stored file that reads ranges, each retried on its own.

    A connection dropped in the middle of a large shard costs one range, not the shard.
    """

    def __init__(self, fs: pafs.FileSystem, path: str, uri: str):
        super().__init__()
        self._fs, self._path, self._uri = fs, path, uri
        self._file = None
        self._pos = 0
        self._size = None
        self._open()

    def _open(self):
        if self._file is None:
            def open_():
                f = self._fs.open_input_file(self._path)
                return f, f.size()

            self._file, self._size = retrying(f"cannot open {self._uri}", open_)
        return self._file

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = min(len(buffer), max(self._size - self._pos, 0))
        if want == 0:
            return 0

        def read():
            try:
                return self._open().read_at(want, self._pos)
            except OSError:
                self._file = None  # reopen: the connection may be what broke
                raise

        data = retrying(f"cannot read {self._uri}", read)
        n = len(data)
        buffer[:n] = data
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()
