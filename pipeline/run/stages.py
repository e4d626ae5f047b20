"""The per-block work of the CPU stages, as plain functions and classes over Arrow tables.

Ray Data runs these (see `pipeline.run.job`); they know nothing of Ray themselves,
so tests and the capacity planner call them directly. Each takes `record`, the
one callable its stage clock reports through (`pipeline.run.stage_clock`). The
tables they pass on are `pipeline.schemas`'s; a document that fails any stage
becomes an error row, which later stages pass through untouched. (The encoder's
stage is `pipeline.encode.stage.EncodeBlock`, the writer's
`pipeline.output.sink.write_block`.)

Nothing here imports JAX: the CPU stages' processes would pay a second of CPU
and a hundred MB each for it, beside an encoder that needs the cores.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from pipeline.encode import model_dir
from pipeline.encode.model_location import local_dir
from pipeline.encode.packs import Packer
from pipeline.errors import DocumentError, ModelError, SandboxError, UserError
from pipeline.extract import extract_pages
from pipeline.extract.sandbox import ExtractConfig, process_sandbox
from pipeline.io.filesystems import read_many
from pipeline.io.shards import WHOLE, ShardFields, ShardUnit, iter_shard
from pipeline.io.uris import doc_id_of
from pipeline.kinds import SHARD_KINDS
from pipeline.run.stage_clock import Record, StageClock
from pipeline.schemas import (
    CHUNK_SCHEMA,
    DOC_SCHEMA,
    ERROR_NAMES,
    GROUP_NAMES,
    error_row,
    is_error,
    keys_digest,
    rows_digest,
)
from pipeline.text.chunking import ChunkingConfig, chunk_document, join_pages

SHARD_BLOCK = 64  # documents per block handed on from a shard


def extract_block(
    batch: pa.Table,
    fields: ShardFields = ShardFields(),
    extract: ExtractConfig = ExtractConfig(),
    record: Record | None = None,
) -> Iterator[pa.Table]:
    """Input rows (uri, kind, size as listed, group) -> document rows with the text of each page.

    A shard's documents are streamed out in blocks of SHARD_BLOCK as they are read.
    PDFs are parsed in this process's sandbox (`pipeline.extract.sandbox`) within
    `extract`'s time and memory bounds; text files are decoded here, which is
    linear in their size and cannot hang. `record` gets this block's read and
    extract times.

    A function using its process's sandbox rather than a class owning one: Ray
    Data fuses this stage into the CPU stages' actors (pipeline.run.job), long-lived
    processes, and where it runs as tasks Ray reuses worker processes; either way
    the sandbox's child starts once per process and lives as long as it. And the
    stage stays a plain call without Ray (pipeline.run.capacity, tests).
    """
    clock = StageClock(record)
    items = batch.to_pylist()
    clock.begin(f"read:{_work_digest(items)}")
    rows = []
    with clock.timing("read") as counts:
        # The block's files are fetched side by side: object storage is latency-bound.
        files = [r for r in items if r["kind"] not in SHARD_KINDS]
        contents = read_many([r["uri"] for r in files])
        counts["docs"] += len(contents)
        counts["bytes"] += sum(len(data) for data in contents if isinstance(data, bytes))
        # Read as it is now, which a resumed run's groups that finished before did not see (README).
        counts["changed"] += sum(
            isinstance(data, bytes) and r["size"] is not None and len(data) != r["size"]
            for r, data in zip(files, contents)
        )
    contents = iter(contents)
    handed = 0
    for row in items:
        group = {name: row[name] for name in GROUP_NAMES}
        if row["kind"] in SHARD_KINDS:
            for block in _shard_blocks(row["uri"], row["kind"], group, _unit(row), fields, clock):
                handed += block.num_rows
                yield block
            continue
        doc = {"doc_id": doc_id_of(row["uri"]), "kind": row["kind"], "pages": None, **group}
        data = next(contents)
        if isinstance(data, Exception):
            rows.append(error_row(doc, "read", type(data).__name__, str(data)))
            continue
        with clock.timing("extract") as counts:
            counts["docs"] += 1
            try:
                if row["kind"] == "pdf":
                    pages = process_sandbox(extract).extract_pages(data, "pdf")
                else:
                    pages = extract_pages(data, "text")
                counts["pages"] += len(pages)
                counts["chars"] += sum(map(len, pages))
                rows.append({**doc, "pages": pages})
            except DocumentError as e:
                rows.append(error_row(doc, "extract", e.error_type, str(e)))
            except SandboxError:
                raise  # not this document's fault: every document after it would fail the same way
            except Exception as e:  # one document's failure must never take its batch mates down
                rows.append(error_row(doc, "extract", type(e).__name__, str(e)))
    # The flow's counts once the call is done, so that its work rows count as queued until then (`Flow`).
    clock.count("read", rows_in=len(items), rows_out=handed + len(rows))
    clock.send()
    if rows:
        yield pa.Table.from_pylist(rows, schema=DOC_SCHEMA)


def _work_digest(items: list[dict]) -> str:
    """Names a read call by its work rows: each is a file or a shard's unit of one group, read once a run."""
    return keys_digest(f"{r['uri']}\0{r['unit_start']}\0{r['group']}" for r in items)


def _unit(row: dict) -> ShardUnit:
    if row["unit_start"] is None:
        return WHOLE
    return ShardUnit(row["unit_start"], row["unit_stop"], row["unit_first"], tuple(row["unit_repeats"]))


def _shard_blocks(
    uri: str, kind: str, group: dict, unit: ShardUnit, fields: ShardFields, clock: StageClock
) -> Iterator[pa.Table]:
    """One shard unit's document rows in blocks. A whole shard's last row carries its document
    count; a planned unit's rows carry the count its plan made (`group`'s group_docs).

    Reading a shard is its documents' read stage (parsing jsonl or Parquet is the extraction).
    """
    block, count, previous = [], 0, None
    for doc in _timed_reads(iter_shard(uri, kind, fields, unit), clock):
        if previous is not None:
            block.append(previous)
            if len(block) == SHARD_BLOCK:
                yield pa.Table.from_pylist(block, schema=DOC_SCHEMA)
                block = []
        count += 1
        previous = {"kind": "text", "pages": None, **doc, **group}
        if unit is WHOLE:
            previous["group_docs"] = None
    if unit is WHOLE:
        previous["group_docs"] = count  # iter_shard yields at least one row, an error row for an empty shard
    if previous is not None:
        block.append(previous)
    clock.send()
    if block:
        yield pa.Table.from_pylist(block, schema=DOC_SCHEMA)


def _timed_reads(docs: Iterator[dict], clock: StageClock) -> Iterator[dict]:
    """`docs`, with the time spent producing each one (not the consumer's) counted as reading."""
    while True:
        with clock.timing("read") as counts:
            doc = next(docs, None)
            if doc is None:
                return
            counts["docs"] += 1
        yield doc


class ChunkBlock:
    """Document rows -> chunk rows with token ids. One tokenizer per actor, loaded once.

    `call_packs`: the rows handed on are packs of about one window of tokens (`pipeline.encode.packs`), for
    the job's encoder, which takes this many a call; None: one row per chunk, for callers that read the
    chunks themselves. `tokenizer_identity`: the driver's tokenizer's (`Tokenizer.identity`), which a node's
    own must have; None takes this node's as it is.
    """

    def __init__(
        self,
        model: str | None,
        chunking: ChunkingConfig,
        record: Record | None = None,
        call_packs: int | None = None,
        tokenizer_identity: str | None = None,
    ):
        # Refused at the first call, as an encoder refuses (`pipeline.encode.stage.EncodeBlock`): one line.
        self.refusal: UserError | None = None
        try:
            # The model as the user named it, resolved on this node: a URI is fetched into its cache.
            self.tokenizer = model_dir.tokenizer(local_dir(model), prompt=chunking.prompt)
        except UserError as e:  # this node's copy: missing, cut short, its fetch failed
            self.refusal = e
            return
        if tokenizer_identity is not None and self.tokenizer.identity != tokenizer_identity:
            self.refusal = ModelError(
                f"this node's tokenizer is not the job's driver's ({self.tokenizer.identity} here, "
                f"{tokenizer_identity} there): every node must hold the same model files"
            )
        self.chunking = chunking
        self.clock = StageClock(record)
        self.packer = None if call_packs is None else Packer(chunking.max_tokens, call_packs)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.refusal is not None:
            raise self.refusal
        self.clock.begin(f"chunk:{rows_digest(batch)}")
        rows = []
        for doc in batch.to_pylist():
            group = {name: doc[name] for name in GROUP_NAMES}
            base = {"doc_id": doc["doc_id"], "chunk_index": None, "token_ids": [], **group}
            if is_error(doc):
                rows.append({**base, **{name: doc[name] for name in ERROR_NAMES}})
                continue
            try:
                chunks = self._chunks(doc)
            except Exception as e:  # one document's failure must never take its batch mates down
                rows.append(error_row(base, "chunk", type(e).__name__, str(e)))
                continue
            n = None if is_error(chunks[0]) else len(chunks)
            rows.extend({**chunk, **group, "doc_chunks": n} for chunk in chunks)
        chunks = pa.Table.from_pylist(rows, schema=CHUNK_SCHEMA)
        handed = chunks if self.packer is None else self.packer(chunks)
        self.clock.count("chunk", rows_in=batch.num_rows, rows_out=handed.num_rows)
        self.clock.send()
        return handed

    def _chunks(self, doc: dict) -> list[dict]:
        with self.clock.timing("tokenise") as counts:
            text, page_starts = join_pages(doc["pages"])
            ids, offsets = self.tokenizer.encode_document(text)
            counts["docs"] += 1
            counts["tokens"] += len(ids)
        if not len(ids) or (ids == self.tokenizer.unk_id).all():
            # Nothing, or only unknown words: 10 million characters without whitespace are
            # one [UNK], whose embedding says nothing of the text.
            message = (
                "text yields no tokens"
                if not len(ids)
                else f"text yields no tokens the model knows ({len(ids)} unknown)"
            )
            # "tokenize": the errors' spelling of this stage (README), older than the stage clock's "tokenise".
            return [error_row({"doc_id": doc["doc_id"], "token_ids": []}, "tokenize", "NoTokens", message)]
        with self.clock.timing("chunk") as counts:
            chunks = chunk_document(
                text, ids, offsets, page_starts if doc["kind"] == "pdf" else None, self.tokenizer, self.chunking
            )
            counts["chunks"] += len(chunks)
        return [
            {
                "doc_id": doc["doc_id"],
                "chunk_index": i,
                "text": c.text,
                "page_start": c.page_start,
                "page_end": c.page_end,
                "char_start": c.char_start,
                "char_end": c.char_end,
                "n_tokens": len(c.token_ids),
                "token_ids": c.token_ids,
            }
            for i, c in enumerate(chunks)
        ]
