"""Reading a finished output back: the run report, chunks, errors, and nearest-neighbour search."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
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


def read_table(output: str, which: str = EMBEDDINGS_DIR) -> pa.Table:
    """All parts under `embeddings/` (or `errors/`) as one table, sorted by document and chunk."""
    if which not in (EMBEDDINGS_DIR, ERRORS_DIR):  # a misspelt one would read as a table without rows
        raise ValueError(f"which must be {EMBEDDINGS_DIR!r} or {ERRORS_DIR!r}, got {which!r}")
    read_report(output)  # only finished runs: parts of an unfinished one may be incomplete
    fs, root = filesystem_for(output)
    # No part (a run without a single error, or one whose every document failed): on object stores no prefix either.
    if not list_files(fs, f"{root}/{which}"):
        table = (ERRORS_SCHEMA if which == ERRORS_DIR else NO_EMBEDDINGS_SCHEMA).empty_table()
    else:
        path = f"{root}/{which}"
        table = retrying(f"cannot read {shown(fs, path)}", lambda: pq.read_table(path, filesystem=fs))
    keys = [("doc_id", "ascending")] + ([("chunk_index", "ascending")] if which == EMBEDDINGS_DIR else [])
    return table.sort_by(keys)


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
    """The k chunks most cosine-similar to `query_D` (or a [1, D] query, as `Embedder.embed` returns one), best
    first, with a `score` column."""
    if k < 0:
        raise ValueError(f"k must be at least 0, got {k}")
    if not table.num_rows:
        return table.append_column("score", pa.array([], pa.float32()))
    query_D = np.asarray(query_D, np.float32).reshape(-1)
    emb_ND = embedding_matrix(table)
    if query_D.shape[0] != emb_ND.shape[1]:
        raise ValueError(f"the query has {query_D.shape[0]} dimensions, the embeddings {emb_ND.shape[1]}")
    norms = np.linalg.norm(emb_ND, axis=1) * max(float(np.linalg.norm(query_D)), 1e-12)
    scores_N = emb_ND @ query_D / np.maximum(norms, 1e-12)
    top = np.argsort(-scores_N, kind="stable")[:k]
    return table.take(top).append_column("score", pa.array(scores_N[top], pa.float32()))
