"""Shards: files of many documents (JSON Lines, compressed or not, and Parquet), streamed row by row.

A jsonl shard holds one JSON object per line, in a file named `.jsonl` or `.ndjson`,
or compressed whole with gzip, zstd or bzip2 (`.jsonl.gz`, `.ndjson.zst`, and `.json.gz` as
C4 and Dolma name their JSON Lines: `pipeline.kinds`); a Parquet shard holds one
row per document. Each names its document's id and text in fields (`id` and `text` by
default, `ShardFields` to change). A row becomes a document whose doc_id is
`URI#id`, URI being the shard's own doc_id (`pipeline.io.uris.doc_id_of`: a "#"
in its name is "%23", so the first "#" starts the id). Rows are read in buffered
ranges and handed on as they come, so a shard of any size costs one buffer and
one block of documents of memory, never the whole shard.

A row that cannot be a document (not JSON, no id, no text) becomes an error row
of its own; a shard that cannot be read at all (not Parquet, missing columns,
a corrupt compressed stream, no rows) becomes one error row with the shard's doc_id,
after any documents read before the damage. Storage failures are not the
shard's fault: they raise `StorageError` and stop the job.

Big shards are read in units that extraction workers share (`plan_units`):
a Parquet shard by runs of row groups, an uncompressed jsonl shard by byte
ranges that start at line starts; a compressed stream cannot be entered in
the middle and stays one unit. Units are cut from the file alone, so a rerun
cuts the same ones. The plan also counts the shard's documents, so that the
job knows up front how many rows its units give in all.

Ids must be unique within a shard: each repeat of an id becomes a `DuplicateId`
error row (doc_id `URI#line:N` or `URI#row:N`, so that every doc_id in the
output stays unique) and only the first occurrence is a document. For the same
reason an id of that positional form names only its own row: `line:7` is a
document's id on line 7 of a jsonl shard and a `ReservedId` error anywhere
else, as an error row of line 7 would have that doc_id too. A shard read
as one unit finds repeats as it reads (holding the ids it has seen: for a big
compressed shard that is the memory its ids take). A shard cut into units cannot see
the other units' ids, so `plan_units` reads its id column once beforehand (a
pass over the whole file for jsonl, the id column alone for Parquet) and gives
each unit the positions of the repeats that fall in it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.errors import ShardError, StorageError
from pipeline.io.filesystems import filesystem_for
from pipeline.io.retries import NOT_FOUND, retrying
from pipeline.io.uris import doc_id_of
from pipeline.kinds import COMPRESSIONS
from pipeline.schemas import error_row, is_utf8

READ_BUFFER = 1 << 20  # bytes per ranged read of a shard
PARQUET_BATCH = 256  # rows decoded at a time, at most
PARQUET_BATCH_BYTES = 16 << 20  # and about this many bytes of them, by the row groups' own sizes
# Bytes of a shard per work unit: a unit keeps one extraction worker busy for seconds
# to minutes, and a shard this size or smaller is one unit.
UNIT_BYTES = 64 << 20
ID_BATCH = 1 << 16  # ids gathered into one Arrow chunk while looking for repeats
# Each codec's first bytes, to say what a file not named for its compression holds.
_MAGIC = {b"\x1f\x8b": ".gz", b"\x28\xb5\x2f\xfd": ".zst", b"BZh": ".bz2"}
# A JSON escape in the surrogate range: json.loads makes a lone one a str that no UTF-8 encoder (Arrow's) takes.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


@dataclasses.dataclass(frozen=True)
class ShardFields:
    id: str = "id"  # "": no id field, each row named by its position (`line:N`, `row:N`)
    text: str = "text"

    @property
    def positional(self) -> bool:
        return not self.id


@dataclasses.dataclass(frozen=True)
class ShardUnit:
    """A piece of a shard that one worker reads: rows [start, stop) of a Parquet file's row groups, or
    bytes [start, stop) of a jsonl file starting at a line start. `first` is the number of rows (Parquet)
    or lines (jsonl) before it; `repeats` the positions (row index, or 1-based line number) in it whose
    id an earlier row of the shard already had, or None when the unit is the whole shard and finds them
    itself."""

    start: int = 0
    stop: int | None = None  # None: to the end
    first: int = 0
    repeats: tuple[int, ...] | None = None


WHOLE = ShardUnit()


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    units: tuple[ShardUnit, ...]
    docs: int  # document rows (documents and error rows) the units give in all


def _error(doc_id: str, error_type: str, message: str, stage: str = "read") -> dict:
    return error_row({"doc_id": doc_id}, stage, error_type, message)


def compression_of(uri: str) -> str | None:
    """The codec a shard is compressed with, by its name ('gzip', 'zstd', 'bz2'), or None."""
    lower = uri.lower()
    return next((codec for suffix, codec in COMPRESSIONS.items() if lower.endswith(suffix)), None)


def may_split(uri: str, size: int, unit_bytes: int = UNIT_BYTES) -> bool:
    """Whether a shard is big enough, and not compressed, so that `plan_units` may cut it into units."""
    return size > unit_bytes and compression_of(uri) is None


def plan_units(
    uri: str, kind: str, size: int, fields: ShardFields = ShardFields(), unit_bytes: int = UNIT_BYTES
) -> ShardPlan | None:
    """The units a big shard is read in, with each unit's repeated ids; None: read it as one unit.

    One unit when the shard is small, compressed, a single row group, or
    cannot be read whole (its reader then reports the damage as it does today).
    Units hold about `unit_bytes` of the file each.
    """
    if not may_split(uri, size, unit_bytes):
        return None
    fs, path = filesystem_for(uri)
    try:
        with _RangeReader(fs, path, uri) as raw:
            if kind == "jsonl":
                cuts = _jsonl_cuts(uri, raw, fields, unit_bytes)
            else:
                cuts = _parquet_cuts(raw, fields, unit_bytes)
    except (ShardError, *NOT_FOUND):
        return None
    if cuts is None:
        return None
    bounds, firsts, ids, positions, docs = cuts
    if docs == 0 or len(bounds) < 2:
        return None
    repeats = _repeat_positions(ids, positions)
    units = []
    for i, (start, first) in enumerate(zip(bounds, firsts)):
        stop = bounds[i + 1] if i + 1 < len(bounds) else None
        end = firsts[i + 1] if i + 1 < len(firsts) else None
        mine = repeats[(repeats > first) if kind == "jsonl" else (repeats >= first)]
        if end is not None:
            mine = mine[(mine <= end) if kind == "jsonl" else (mine < end)]
        units.append(ShardUnit(start, stop, first, tuple(int(p) for p in mine)))
    return ShardPlan(tuple(units), docs)


class _IdColumn:
    """A shard's ids and their positions, gathered in Arrow chunks (a few bytes per row, not a Python set)."""

    def __init__(self):
        self.chunks, self.positions, self.ids, self.where = [], [], [], []

    def add(self, doc_id: str | None, position: int) -> None:
        if doc_id:
            self.ids.append(doc_id)
            self.where.append(position)
            if len(self.ids) == ID_BATCH:
                self.flush()

    def flush(self) -> None:
        if self.ids:
            self.chunks.append(pa.array(self.ids, pa.large_string()))
            self.positions.append(np.asarray(self.where, np.int64))
            self.ids, self.where = [], []


def _jsonl_cuts(uri: str, raw: io.RawIOBase, fields: ShardFields, unit_bytes: int):
    """Reads every line once: a unit starts at the first line start `unit_bytes` past the last; and the ids."""
    bounds, firsts, column, docs, offset = [], [], _IdColumn(), 0, 0
    for line_no, line in _jsonl_lines(uri, raw, WHOLE):
        if not bounds or offset >= bounds[-1] + unit_bytes:
            bounds.append(offset)
            firsts.append(line_no - 1)
        offset += len(line)
        if not line.strip():
            continue
        docs += 1
        if fields.positional:
            continue  # no ids to repeat: each line is named by its number
        try:
            column.add(_id_str(_jsonl_record(line, "", fields).get(fields.id)), line_no)
        except ShardError:
            continue  # a BadRecord: its reader makes the error row
    column.flush()
    return bounds, firsts, column.chunks, column.positions, docs


def _parquet_cuts(raw: io.RawIOBase, fields: ShardFields, unit_bytes: int):
    """Runs of row groups of about `unit_bytes` each (from the footer), and the id column read alone."""
    shard = _open_parquet(raw, fields)
    meta = shard.metadata
    bounds, firsts, size, rows = [], [], 0, 0
    for g in range(meta.num_row_groups):
        if g == 0 or size >= unit_bytes:
            bounds.append(g)
            firsts.append(rows)
            size = 0
        group = meta.row_group(g)
        size += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        rows += group.num_rows
    column, row = _IdColumn(), 0
    try:
        for batch in [] if fields.positional else _parquet_batches(shard, [fields.id], WHOLE):
            for doc_id in batch.column(0).to_pylist():
                column.add(_id_str(doc_id), row)
                row += 1
    except (ValueError, OSError, OverflowError) as e:
        if _is_storage(e):
            raise
        return None
    column.flush()
    return bounds, firsts, column.chunks, column.positions, meta.num_rows


def _repeat_positions(chunks: list[pa.Array], positions: list[np.ndarray]) -> np.ndarray:
    """Positions whose id an earlier position had: all but each id's first occurrence, in order."""
    if not chunks:
        return np.empty(0, np.int64)
    where = np.concatenate(positions)
    codes = pc.dictionary_encode(pa.concat_arrays(chunks)).indices.to_numpy()
    repeat = np.ones(len(codes), bool)
    repeat[np.unique(codes, return_index=True)[1]] = False
    return where[repeat]


class _Repeats:
    """Which rows repeat an id: given by the unit's plan, or found from the ids seen so far."""

    def __init__(self, unit: ShardUnit):
        self.given = None if unit.repeats is None else frozenset(unit.repeats)
        self.seen: set[str] = set()

    def __call__(self, doc_id: str, position: int) -> bool:
        if self.given is not None:
            return position in self.given
        if doc_id in self.seen:
            return True
        self.seen.add(doc_id)
        return False


ABSENT = object()  # a jsonl record's field that is not there, where null is there
POSITIONAL_HINT = "--id-field '' names each row by its position"  # where a shard lacks the id field


def _document(shard: str, doc_id, text, where: str, fields: ShardFields, repeated: bool = False) -> dict:
    """A row's document, or its error row. `shard` is the shard's doc_id; `where` is the row's position (`line:N`,
    `row:N`); `doc_id` and `text` are its fields' values, or ABSENT."""
    if doc_id is ABSENT or doc_id is None or doc_id == "":
        said = "no" if doc_id is ABSENT else "a null" if doc_id is None else "an empty"
        hint = f"; {POSITIONAL_HINT}" if doc_id is ABSENT else ""
        return _error(f"{shard}#{where}", "MissingId", f"{where}: {said} id field {fields.id!r}{hint}")
    if repeated:
        return _error(f"{shard}#{where}", "DuplicateId", f"{where}: id {doc_id!r} already names an earlier document")
    if _names_another_position(doc_id, where):
        return _error(f"{shard}#{where}", "ReservedId", f"{where}: id {doc_id!r} is the doc_id of that row's errors")
    full_id = f"{shard}#{doc_id}"
    if isinstance(text, bytes):  # a binary column, as some writers store strings
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            return _error(
                full_id, "NoText", f"{where}: text field {fields.text!r} is bytes, not UTF-8: {e}", stage="extract"
            )
    if not isinstance(text, str):
        kind = "missing" if text is ABSENT else "null" if text is None else f"a {type(text).__name__}, not text"
        return _error(full_id, "NoText", f"{where}: text field {fields.text!r} is {kind}", stage="extract")
    if not text.strip():
        return _error(full_id, "NoText", f"{where}: empty text", stage="extract")
    return {"doc_id": full_id, "pages": [text]}


def _names_another_position(doc_id: str, where: str) -> bool:
    """Whether an id has the form of another row's position in this shard (`where` is this row's)."""
    name, _, number = doc_id.partition(":")
    return name == where.partition(":")[0] and number.isascii() and number.isdigit() and doc_id != where


def iter_shard(uri: str, kind: str, fields: ShardFields = ShardFields(), unit: ShardUnit = WHOLE) -> Iterator[dict]:
    """Document rows of one shard's `unit`, in order: `{doc_id, pages}` or error rows (see `_error`)."""
    fs, path = filesystem_for(uri)
    shard = doc_id_of(uri)
    count = 0
    repeats = _Repeats(unit)
    try:
        with _RangeReader(fs, path, uri) as raw:
            if kind == "jsonl":
                rows = _jsonl_rows(uri, shard, raw, fields, unit, repeats)
            else:
                rows = _parquet_rows(shard, raw, fields, unit, repeats)
            for row in rows:
                count += 1
                yield row
    except NOT_FOUND as e:
        yield _error(shard, type(e).__name__, str(e))
        return
    except ShardError as e:
        after = f" after {count} documents" if count else ""
        yield _error(shard, e.error_type, f"{e}{after}")
        return
    if count == 0 and unit.repeats is None:  # a planned unit may hold only blank lines; its shard does not
        yield _error(shard, "EmptyShard", "the shard holds no documents")


def _jsonl_lines(uri: str, raw: io.RawIOBase, unit: ShardUnit) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of the unit's lines: those starting in bytes [start, stop)."""
    raw.seek(unit.start)
    stream = io.BufferedReader(raw, READ_BUFFER)
    codec = compression_of(uri)
    if codec is not None:  # Arrow's codecs: one path for the three, no other package, gzip at the gzip module's rate
        stream = io.BufferedReader(pa.CompressedInputStream(pa.PythonFile(stream, mode="r"), codec), READ_BUFFER)
    line_no, offset = unit.first, unit.start
    if unit.start == 0:
        _check_start(_peek(stream, codec), compressed=codec is not None)
    while unit.stop is None or offset < unit.stop:
        try:
            line = stream.readline()
        except OSError as e:
            raise _corrupt(e, f"unreadable {codec} stream at line {line_no + 1}") from None
        if not line:
            return
        line_no += 1
        offset += len(line)
        yield line_no, line


def _peek(stream: io.BufferedReader, codec: str | None) -> bytes:
    """The stream's first bytes, without consuming them."""
    try:
        return stream.peek(64)[:64]
    except OSError as e:
        raise _corrupt(e, f"unreadable {codec} stream at its start") from None


def _check_start(head: bytes, compressed: bool) -> None:
    """Refuses a shard whose first bytes say it is not UTF-8 JSON Lines: each of its lines would be an error."""
    suffix = next((suffix for magic, suffix in _MAGIC.items() if head.startswith(magic)), None)
    if suffix is not None and not compressed:
        raise ShardError("CorruptShard", f"{suffix} data in a file not named {suffix}: name it .jsonl{suffix}")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(head) > 1 and 0 in head[:2]):
        raise ShardError("BadShard", "UTF-16 or UTF-32 text: JSON Lines is UTF-8")
    if head.lstrip()[:1] == b"[":
        raise ShardError("BadShard", "a JSON array, not JSON Lines: write one object per line")


def _jsonl_record(line: bytes, where: str, fields: ShardFields) -> dict:
    """The line's JSON object, or raises ShardError (BadRecord) saying why it is not one."""
    try:
        record = json.loads(line)
    except (UnicodeDecodeError, ValueError) as e:
        raise ShardError("BadRecord", f"{where}: not a JSON object: {e}") from None
    if not isinstance(record, dict):
        raise ShardError("BadRecord", f"{where}: a JSON {type(record).__name__}, not an object")
    if _SURROGATE_ESCAPE.search(line):
        for name in (fields.id, fields.text):
            value = record.get(name)
            if isinstance(value, str) and not is_utf8(value):
                raise ShardError("BadRecord", f"{where}: field {name!r} holds a lone surrogate escape, not text")
    return record


def _jsonl_rows(
    uri: str, shard: str, raw: io.RawIOBase, fields: ShardFields, unit: ShardUnit, repeats: _Repeats
) -> Iterator[dict]:
    for line_no, line in _jsonl_lines(uri, raw, unit):
        if not line.strip():
            continue
        where = f"line:{line_no}"
        try:
            record = _jsonl_record(line, where, fields)
        except ShardError as e:
            yield _error(f"{shard}#{where}", e.error_type, str(e))
            continue
        doc_id = where if fields.positional else _id_str(record.get(fields.id, ABSENT))
        text = record.get(fields.text, ABSENT)
        repeated = not fields.positional and _named(doc_id) and repeats(doc_id, line_no)
        yield _document(shard, doc_id, text, where, fields, repeated)


def _open_parquet(raw: io.RawIOBase, fields: ShardFields) -> pq.ParquetFile:
    try:
        # No pre-buffering: it would read every row group's columns up front. A buffered stream reads a
        # column chunk a page at a time: pyarrow's writer puts a whole table in one row group by default.
        shard = pq.ParquetFile(raw, pre_buffer=False, buffer_size=READ_BUFFER)
    except (ValueError, OSError) as e:  # ArrowInvalid is a ValueError
        raise _corrupt(e, "not a Parquet file") from None
    names = shard.schema_arrow.names
    wanted = _columns(fields)
    missing = [f for f in wanted if f not in names]
    if missing:
        hint = f"; {POSITIONAL_HINT}" if fields.id in missing else ""
        raise ShardError("BadShard", f"no column {', '.join(missing)} (columns: {', '.join(names)}){hint}")
    repeated = [f for f in wanted if names.count(f) > 1]
    if repeated:
        raise ShardError("BadShard", f"more than one column named {', '.join(repeated)}")
    return shard


def _parquet_batches(shard: pq.ParquetFile, columns: list[str], unit: ShardUnit) -> Iterator:
    """The unit's rows in batches of at most PARQUET_BATCH rows and about PARQUET_BATCH_BYTES."""
    groups = range(unit.start, shard.num_row_groups if unit.stop is None else unit.stop)
    meta = [shard.metadata.row_group(g) for g in groups]
    widest = max((g.total_byte_size / g.num_rows for g in meta if g.num_rows), default=1.0)
    rows = max(1, min(PARQUET_BATCH, int(PARQUET_BATCH_BYTES / max(widest, 1.0))))
    return shard.iter_batches(batch_size=rows, columns=columns, row_groups=groups)


def _parquet_rows(
    shard: str, raw: io.RawIOBase, fields: ShardFields, unit: ShardUnit, repeats: _Repeats
) -> Iterator[dict]:
    parquet = _open_parquet(raw, fields)
    row = unit.first
    try:
        for batch in _parquet_batches(parquet, _columns(fields), unit):
            texts = batch.column(fields.text).to_pylist()
            ids = [None] * len(texts) if fields.positional else batch.column(fields.id).to_pylist()
            for doc_id, text in zip(ids, texts):
                where = f"row:{row}"
                doc_id = where if fields.positional else _id_str(doc_id)
                repeated = not fields.positional and _named(doc_id) and repeats(doc_id, row)
                yield _document(shard, doc_id, text, where, fields, repeated)
                row += 1
    except (ValueError, OSError, OverflowError) as e:  # OverflowError: a date or time beyond Python's
        raise _corrupt(e, f"unreadable Parquet data at row {row}") from None


def _columns(fields: ShardFields) -> list[str]:
    """The columns a Parquet shard's rows are read from, by name: one when the id is the text, none for the id
    where rows are named by their position."""
    return list(dict.fromkeys([fields.text] if fields.positional else [fields.id, fields.text]))


def _corrupt(e: BaseException, what: str) -> ShardError:
    """The shard's damage `e`, as the CorruptShard error to raise; a storage failure, even wrapped by pyarrow,
    is raised as it is here: it stops the job."""
    if _is_storage(e):
        raise e
    return ShardError("CorruptShard", f"{what}: {e}")


def _is_storage(e: BaseException) -> bool:
    """pyarrow wraps an exception raised inside a Python file object; ours must still stop the job."""
    return (
        isinstance(e, StorageError) or isinstance(e.__cause__, StorageError) or isinstance(e.__context__, StorageError)
    )


def _named(doc_id) -> bool:
    """Whether `_id_str` gave an id: not ABSENT, null or empty."""
    return isinstance(doc_id, str) and doc_id != ""


def _id_str(value):
    """An id field's value as the text of a doc_id; None and ABSENT as they are. A true or false, an object or a
    list (a Parquet struct or list) is spelled as JSON spells it, so that the doc_id joins back on the source's."""
    if value is None or value is ABSENT:
        return value
    if isinstance(value, bytes):  # a binary column; bytes that are not UTF-8 keep a printable, stable form
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, (bool, dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
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
