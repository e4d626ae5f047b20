"""The Arrow schemas the stages hand each other, and the one way to make an error row.

    INPUTS_SCHEMA    the recorded listing: each input and its group -> _inputs/ (pipeline.output.inputs)
    WORK_SCHEMA      the recorded inputs in blocks, by group      -> extract_block
    DOC_SCHEMA       a document's pages                           -> ChunkBlock
    CHUNK_SCHEMA     a chunk's text and token ids                 -> packed by ChunkBlock as
    PACK_SCHEMA      chunk rows of about one window of tokens     -> EncodeBlock (pipeline.encode.packs)
    embedded_schema  a chunk's embedding, token ids dropped       -> write_block
    SUMMARY_SCHEMA   one row per group a writer call committed    -> the driver's ledger

Every row carries its commit group (see `pipeline.output.ledger`) from the
driver to the writer. A document that fails any stage becomes an error row
(`error_stage`, `error_type`, `error_message` set), which later stages pass
through untouched and the sink writes to `errors/` as ERRORS_SCHEMA.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import pyarrow as pa

ERROR_MESSAGE_CHARS = 2000  # an error row's message is cut here: a parser's message can be a whole document

ERROR_FIELDS = [
    pa.field("error_stage", pa.string()),
    pa.field("error_type", pa.string()),
    pa.field("error_message", pa.string()),
]
ERROR_NAMES = [f.name for f in ERROR_FIELDS]

# Which commit group a row belongs to. group_docs: documents in the group, on every
# row of a file group and of a shard cut into units (its plan counted them), and on
# the rows of a whole shard's last document (its reader only knows the count at the end).
GROUP_FIELDS = [pa.field("group", pa.string()), pa.field("group_docs", pa.int32())]
GROUP_NAMES = [f.name for f in GROUP_FIELDS]

# A shard's unit (pipeline.io.shards.ShardUnit) rides on its work row: null for files and whole shards.
UNIT_FIELDS = [
    pa.field("unit_start", pa.int64()),
    pa.field("unit_stop", pa.int64()),
    pa.field("unit_first", pa.int64()),
    pa.field("unit_repeats", pa.list_(pa.int64())),
]
INPUTS_SCHEMA = pa.schema(
    [pa.field("uri", pa.string()), pa.field("kind", pa.string()), pa.field("size", pa.int64())] + GROUP_FIELDS
)
# A work row is a recorded input with its shard unit: its size is the file's as listed, so that the reader sees
# a file that changed since; its uri is what is read, not the doc_id (`pipeline.io.uris.doc_id_of`).
WORK_SCHEMA = pa.schema(list(INPUTS_SCHEMA) + UNIT_FIELDS)

DOC_SCHEMA = pa.schema(
    [pa.field("doc_id", pa.string()), pa.field("kind", pa.string()), pa.field("pages", pa.list_(pa.string()))]
    + ERROR_FIELDS
    + GROUP_FIELDS
)

CHUNK_FIELDS = [
    pa.field("doc_id", pa.string()),
    pa.field("chunk_index", pa.int32()),
    pa.field("text", pa.string()),
    pa.field("page_start", pa.int32()),
    pa.field("page_end", pa.int32()),
    pa.field("char_start", pa.int64()),
    pa.field("char_end", pa.int64()),
    pa.field("n_tokens", pa.int32()),
]
# doc_chunks: how many chunks the row's document has (null on error rows), so the
# writer can tell when all of a group's rows have been written.
TRACKING_FIELDS = GROUP_FIELDS + [pa.field("doc_chunks", pa.int32())]
CHUNK_SCHEMA = pa.schema(CHUNK_FIELDS + [pa.field("token_ids", pa.list_(pa.int32()))] + ERROR_FIELDS + TRACKING_FIELDS)
PACK_SCHEMA = pa.schema([pa.field("chunks", pa.list_(pa.struct(CHUNK_SCHEMA)))])


def embedded_schema(dim: int) -> pa.Schema:
    return pa.schema(
        CHUNK_FIELDS + [pa.field("embedding", pa.list_(pa.float32(), dim))] + ERROR_FIELDS + TRACKING_FIELDS
    )


# What a chunk row keeps in embeddings/: the stages' tracking columns stay behind.
EMBEDDING_COLUMNS = [f.name for f in CHUNK_FIELDS] + ["embedding"]

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
        pa.field("group", pa.string()),
        pa.field("group_docs", pa.int64()),  # documents in the group, when a row said so
        pa.field("docs_started", pa.int64()),  # documents whose first row (chunk 0 or error) is here
        pa.field("rows", pa.int64()),
        pa.field("expected_rows", pa.int64()),  # rows the documents started here have in all
        pa.field("parts", pa.list_(pa.string())),  # paths under the output, e.g. "embeddings/part-....parquet"
        pa.field("docs_ok", pa.int64()),
        pa.field("docs_failed", pa.int64()),
        pa.field("chunks", pa.int64()),
        pa.field("tokens", pa.int64()),
        pa.field("error_types", pa.string()),  # JSON object: error_type -> count
    ]
)


def is_utf8(text: str) -> bool:
    """Whether Arrow can hold `text`: not when it has a lone surrogate (from a JSON escape such as "\\ud800",
    or a file name's byte that is not UTF-8, which Python decodes to one). The listing asks it of every file:
    ASCII, the common case, is answered without encoding a copy."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def error_row(row: dict, stage: str, error_type: str, message: str) -> dict:
    """`row` (at least its doc_id) as the error row of a document that failed `stage`."""
    return {**row, "error_stage": stage, "error_type": error_type, "error_message": message[:ERROR_MESSAGE_CHARS]}


def is_error(row: dict) -> bool:
    return row.get("error_type") is not None


def rows_digest(table: pa.Table) -> str:
    """A digest of the (doc_id, chunk_index) keys of `table`'s rows, in any order: the same rows, the same digest.

    Names a part (a retried write lands on the same name), and the chunk, encode and
    write stages' calls (a retried call reports under the same name:
    `pipeline.run.stage_clock`). Rows without a chunk_index, documents, by their doc_id."""
    keys = table.column("doc_id").to_pylist()
    if "chunk_index" in table.column_names:
        keys = [f"{d}\0{c}" for d, c in zip(keys, table.column("chunk_index").to_pylist())]
    return keys_digest(keys)


def keys_digest(keys: Iterable[str]) -> str:
    """16 hex digits of the sha256 of `keys`, in any order: the same set of keys, the same digest."""
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
