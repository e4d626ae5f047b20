"""Reading a finished output back: the run report, chunks, errors, and nearest-neighbour search."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.io.filesystems import file_info, filesystem_for, list_files, read_file, shown
from pipeline.io.retries import retrying
from pipeline.output.layout import EMBEDDINGS_DIR, ERRORS_DIR, SUCCESS_FILE
from pipeline.schemas import CHUNK_FIELDS, ERRORS_SCHEMA

# `embeddings/` of a run that embedded nothing: its columns, the embedding's size unknown (no part says it).
NO_EMBEDDINGS_SCHEMA = pa.schema(CHUNK_FIELDS + [pa.field("embedding", pa.list_(pa.float32()))])


def read_report(output: str) -> dict:
    """The `_SUCCESS` report of a finished run. Storage failing (after retries) is `StorageError`, as in a job."""
    fs, root = filesystem_for(output)
    try:
        return json.loads(read_file(fs, f"{root}/{SUCCESS_FILE}"))
    except (FileNotFoundError, NotADirectoryError):
        kind = file_info(fs, root).type
        if kind == pafs.FileType.NotFound:
            raise InputError(f"{output} does not exist") from None
        if kind == pafs.FileType.File:
            raise InputError(f"{output} is a file, not a run's output") from None
        raise InputError(
            f"{output} holds no finished run (no {SUCCESS_FILE}): if a run was stopped, rerun its command to finish it"
        ) from None
    except ValueError as e:  # written whole by the run (pipeline.output.ledger): what else wrote it?
        raise InputError(f"{output}/{SUCCESS_FILE} is not a run's report: {e}") from None


def read_table(output: str, which: str = EMBEDDINGS_DIR, columns: list[str] | None = None) -> pa.Table:
    """All parts under `embeddings/` (or `errors/`) as one table, sorted by document and chunk. `columns`: only
    those (and the keys it is sorted by), where every chunk's embedding and text need not be held."""
    if which not in (EMBEDDINGS_DIR, ERRORS_DIR):  # a misspelt one would read as a table without rows
        raise ValueError(f"which must be {EMBEDDINGS_DIR!r} or {ERRORS_DIR!r}, got {which!r}")
    keys = [("doc_id", "ascending")] + ([("chunk_index", "ascending")] if which == EMBEDDINGS_DIR else [])
    wanted = None if columns is None else list(dict.fromkeys([*(key for key, _ in keys), *columns]))
    table = _over_parts(output, which, lambda path, fs: pq.read_table(path, filesystem=fs, columns=wanted))
    return (_without_parts(which, wanted) if table is None else table).sort_by(keys)


def _without_parts(which: str, wanted: list[str] | None) -> pa.Table:
    """The table of a `which` folder without parts: no rows, its `wanted` columns (all where None)."""
    table = (ERRORS_SCHEMA if which == ERRORS_DIR else NO_EMBEDDINGS_SCHEMA).empty_table()
    return table if wanted is None else table.select(wanted)


def read_sample(output: str, rows: int, columns: list[str] | None = None, seed: int = 0) -> pa.Table:
    """`rows` chunks of a finished output drawn at random (every chunk where it holds no more), the same for the
    same `seed`, sorted by document and chunk; `columns` as `read_table`'s. Its parts are read in a random order
    until they hold `rows`, so it holds about those and a part, whatever the output's size (a map of an output, a
    look at its chunks); documents come whole where their part is read."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    wanted = None if columns is None else list(dict.fromkeys([*_KEYS, *columns]))

    def draw(path: str, fs: pafs.FileSystem) -> pa.Table:
        parts = sorted(ds.dataset(path, filesystem=fs, format="parquet").get_fragments(), key=lambda part: part.path)
        rng = np.random.default_rng(seed)
        read, held = [], 0
        for p in rng.permutation(len(parts)):
            if held >= rows:
                break
            read.append(parts[p].to_table(columns=wanted))
            held += read[-1].num_rows
        table = pa.concat_tables(read)
        if table.num_rows > rows:
            table = table.take(np.sort(rng.choice(table.num_rows, rows, replace=False)))
        return table.sort_by([(key, "ascending") for key in _KEYS])

    drawn = _over_parts(output, EMBEDDINGS_DIR, draw)
    return _without_parts(EMBEDDINGS_DIR, wanted) if drawn is None else drawn


def read_errors(output: str) -> pa.Table:
    return read_table(output, ERRORS_DIR)


def embedding_matrix(table: pa.Table) -> np.ndarray:
    """The `embedding` column as a float32 array [n, dim] ([0, 0] for a run that embedded nothing: no part says its
    dim): a view of a column in one piece, one copy of a column in several chunks."""
    pieces = table.column("embedding").chunks
    column = pieces[0] if len(pieces) == 1 else table.column("embedding").combine_chunks()
    dim = getattr(column.type, "list_size", 0)
    return column.flatten().to_numpy().reshape(len(column), dim)  # flatten: a sliced column's own rows


def nearest(table: pa.Table, query_D: np.ndarray, k: int = 3) -> pa.Table:
    """The k chunks of `table` most cosine-similar to `query_D` (or a [1, D] query, as `Embedder.embed` returns
    one), best first, equal scores in document and chunk order, with a `score` column."""
    return _best([_TablePart(table)], table.schema, query_D, k)


def search(output: str, query_D: np.ndarray, k: int = 3) -> pa.Table:
    """`nearest` over a finished output's chunks, read part by part: their keys and embeddings in batches of
    `SEARCH_BATCH_ROWS`, `SEARCH_PARTS_AHEAD` parts at once, then only the k rows found, whole. Its memory is
    those batches' and k rows', whatever the output's size; `read_table` holds every chunk."""

    def scan(path: str, fs: pafs.FileSystem) -> pa.Table:
        dataset = ds.dataset(path, filesystem=fs, format="parquet")
        fragments = list(dataset.get_fragments())
        return _best(fragments, dataset.schema, query_D, k, functools.partial(_scanned, dataset))

    found = _over_parts(output, EMBEDDINGS_DIR, scan)
    return nearest(NO_EMBEDDINGS_SCHEMA.empty_table(), query_D, k) if found is None else found


def _over_parts(output: str, which: str, read: Callable[[str, pafs.FileSystem], pa.Table]) -> pa.Table | None:
    """`read(path, filesystem)` of a finished output's `which` folder of parts, retried as one read on transient
    storage errors; None where it holds no part (a run without a single error, or one whose every document
    failed): on object stores no prefix either. Only finished runs: parts of an unfinished one may be incomplete."""
    read_report(output)
    fs, root = filesystem_for(output)
    path = f"{root}/{which}"
    if not list_files(fs, path):
        return None
    return retrying(f"cannot read {shown(fs, path)}", lambda: read(path, fs))


# Rows scored at a time: 8,192 embeddings of 384 float32 are 12 MiB. Only the keys and the embedding are read.
SEARCH_BATCH_ROWS = 8192
# Parts read at once while the batches before are scored: a read's wait and its decoding overlap (on the Zen 3,
# 200,000 chunks' keys and embeddings in 40 local parts read in 0.33 s, against 0.65 s one part after another).
SEARCH_PARTS_AHEAD = 4
_KEYS = ["doc_id", "chunk_index"]
_RANK = [("score", "descending"), ("doc_id", "ascending"), ("chunk_index", "ascending")]


class _TablePart:
    """A table in memory, read as `search` reads a Parquet part (`pyarrow.dataset.Fragment`)."""

    def __init__(self, table: pa.Table):
        self.table = table

    def to_batches(self, columns: list[str] | None = None, *, batch_size: int, **_) -> list[pa.RecordBatch]:
        return (self.table if columns is None else self.table.select(columns)).to_batches(max_chunksize=batch_size)


def _best(parts: list, schema: pa.Schema, query_D: np.ndarray, k: int, scan=None) -> pa.Table:
    """The k rows of `parts` (Parquet fragments, or one `_TablePart`) that score best against `query_D`, whole,
    with their `score`, ranked. `scan(parts, columns)` reads them (`_batches` where not given). Each batch keeps
    its rows that score at least its k-th (ties included), then the running best are cut back to k: never more
    than the batches read ahead and the candidates in memory."""
    if k < 0:
        raise ValueError(f"k must be at least 0, got {k}")
    query_D = np.asarray(query_D, np.float32).reshape(-1)
    query_norm = max(float(np.linalg.norm(query_D)), 1e-12)
    best = []  # small tables: score, doc_id, chunk_index, the part's index and the row's within it
    for p, batch, offset in (scan or _batches)(parts if k else [], [*_KEYS, "embedding"]):
        emb_ND = embedding_matrix(pa.Table.from_batches([batch]))
        if query_D.shape[0] != emb_ND.shape[1]:
            raise ValueError(f"the query has {query_D.shape[0]} dimensions, the embeddings {emb_ND.shape[1]}")
        # einsum sums each row by itself, where a matrix-vector product's rounding depends on the rows beside it: a
        # chunk's score is the same in whichever batch it is read. Nor does it make a [N, D] temporary.
        norms = np.sqrt(np.einsum("nd,nd->n", emb_ND, emb_ND)) * query_norm
        scores_N = np.einsum("nd,d->n", emb_ND, query_D) / np.maximum(norms, 1e-12)
        keep = np.arange(len(scores_N))
        if len(scores_N) > k:
            keep = np.flatnonzero(scores_N >= np.partition(scores_N, -k)[-k])
        found = batch.select(_KEYS).take(keep)
        best.append(
            pa.table(
                {
                    "score": pa.array(scores_N[keep], pa.float32()),
                    **dict(zip(_KEYS, found.columns)),
                    "part": pa.array(np.full(len(keep), p), pa.int32()),
                    "row": pa.array(offset + keep, pa.int64()),
                }
            )
        )
        best = [pa.concat_tables(best).sort_by(_RANK).slice(0, k)]
    if not best or not best[0].num_rows:
        return schema.empty_table().append_column("score", pa.array([], pa.float32()))
    return _whole_rows(parts, best[0])


def _batches(parts: list, columns: list[str] | None = None):
    """(part index, batch, the batch's first row within its part) over `parts`, each part read in batches."""
    for p, part in enumerate(parts):
        offset = 0
        for batch in part.to_batches(columns=columns, batch_size=SEARCH_BATCH_ROWS, batch_readahead=1):
            yield p, batch, offset
            offset += batch.num_rows


def _scanned(dataset: ds.Dataset, parts: list[ds.Fragment], columns: list[str]):
    """`_batches` over a dataset's fragments `parts`, `SEARCH_PARTS_AHEAD` of them read at once, in order."""
    where = {part.path: p for p, part in enumerate(parts)}
    offsets = [0] * len(parts)
    scanner = dataset.scanner(
        columns=columns, batch_size=SEARCH_BATCH_ROWS, batch_readahead=1, fragment_readahead=SEARCH_PARTS_AHEAD
    )
    for tagged in scanner.scan_batches() if parts else []:
        p = where[tagged.fragment.path]
        yield p, tagged.record_batch, offsets[p]
        offsets[p] += tagged.record_batch.num_rows


def _whole_rows(parts: list, best: pa.Table) -> pa.Table:
    """The rows `best` locates (its part and row columns), every column, with their score, ranked. Only the parts
    that hold one are read, a batch at a time up to the last row wanted, and each row is copied out of its batch
    (a `Fragment.take` keeps the whole batch it read alive behind the few rows it returns)."""
    rows = []
    for p in sorted(set(best.column("part").to_pylist())):
        mine = best.filter(pc.equal(best.column("part"), p))
        wanted, scores = mine.column("row").to_numpy(), mine.column("score").combine_chunks()
        for _, batch, offset in _batches([parts[p]]):
            inside = (wanted >= offset) & (wanted < offset + batch.num_rows)
            if inside.any():
                taken = pa.Table.from_batches([batch.take(wanted[inside] - offset)])
                rows.append(taken.append_column("score", scores.filter(inside)))
            if offset + batch.num_rows > wanted.max():
                break
    return pa.concat_tables(rows).sort_by(_RANK)
