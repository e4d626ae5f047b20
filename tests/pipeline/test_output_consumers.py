"""The embeddings Parquet as its consumers read it: pyarrow, pandas, Polars and DuckDB, with no conversion.

`embedding` is a fixed-size list of float32, which pyarrow reads as one flat
float32 buffer, pandas as float32 vectors, Polars as Array(Float32, dim), and
DuckDB as a float list (over the Parquet files) or FLOAT[dim] (over Arrow),
which its vector functions take as they are: a cosine-similarity search is one
SQL query.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from pipeline import Embedder, JobConfig, run_job
from pipeline.results import nearest, read_table

from support import SAMPLES

DIM = 384
QUERY = "how do plants turn sunlight into energy?"


@pytest.fixture(scope="module")
def output(ray_local, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "run"
    run_job(JobConfig(inputs=(str(SAMPLES / "text"),), output=str(out)))
    return out


@pytest.fixture(scope="module")
def query_vec() -> np.ndarray:
    return Embedder.load().embed([QUERY])[0]


def test_pyarrow_reads_one_flat_float32_buffer(output):
    table = pads.dataset(output / "embeddings", format="parquet").to_table()
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), DIM)
    column = table.column("embedding").combine_chunks()
    flat = column.values.to_numpy(zero_copy_only=True)  # raises if it had to convert
    assert flat.dtype == np.float32 and flat.reshape(len(column), DIM).shape == (5, DIM)


def test_pandas_reads_float32_vectors(output):
    df = pd.read_parquet(output / "embeddings")
    assert len(df) == 5 and df["chunk_index"].dtype == np.int32
    matrix = np.stack(df["embedding"].to_numpy())
    assert matrix.dtype == np.float32 and matrix.shape == (5, DIM)


def test_polars_reads_a_fixed_size_array(output):
    df = pl.read_parquet(output / "embeddings" / "*.parquet")
    assert df.schema["embedding"] == pl.Array(pl.Float32, DIM)
    assert df.schema["chunk_index"] == pl.Int32
    matrix = df["embedding"].to_numpy()
    assert matrix.dtype == np.float32 and matrix.shape == (5, DIM)


def duckdb_types(con, relation: str) -> dict[str, str]:
    return {name: type_ for name, type_, *_ in con.sql(f"DESCRIBE SELECT * FROM {relation}").fetchall()}


def test_duckdb_cosine_similarity_in_sql(output, query_vec):
    """SQL straight over the Parquet files.

    Parquet has no fixed-size list type (pyarrow restores it from the Arrow
    schema it stores beside the data; DuckDB does not read that), so DuckDB's
    read_parquet sees FLOAT[]: the list_* vector functions take it as it is.
    """
    con = duckdb.connect()
    parts = str(output / "embeddings" / "*.parquet").replace("'", "''")
    types = duckdb_types(con, f"read_parquet('{parts}')")
    assert types["embedding"] == "FLOAT[]" and types["chunk_index"] == "INTEGER", types

    rows = con.execute(
        f"""
        SELECT doc_id, chunk_index, list_cosine_similarity(embedding, $query) AS score
        FROM read_parquet('{parts}')
        ORDER BY score DESC
        LIMIT 3
        """,
        {"query": query_vec.tolist()},
    ).fetchall()
    assert rows[0][0].endswith("photosynthesis.md")

    expected = nearest(read_table(str(output)), query_vec, k=3).to_pylist()
    assert [(r[0], r[1]) for r in rows] == [(e["doc_id"], e["chunk_index"]) for e in expected]
    np.testing.assert_allclose([r[2] for r in rows], [e["score"] for e in expected], atol=1e-5)


def test_duckdb_over_arrow_sees_a_fixed_size_array(output, query_vec):
    """Through pyarrow (a dataset DuckDB scans in place) the column is FLOAT[dim]: the array_* functions and
    DuckDB's vector index take it without a cast."""
    con = duckdb.connect()
    con.register("chunks", pads.dataset(output / "embeddings", format="parquet"))
    assert duckdb_types(con, "chunks")["embedding"] == f"FLOAT[{DIM}]"
    best = con.execute(
        f"""
        SELECT doc_id, array_cosine_similarity(embedding, $query::FLOAT[{DIM}]) AS score
        FROM chunks
        ORDER BY score DESC
        LIMIT 1
        """,
        {"query": query_vec.tolist()},
    ).fetchone()
    assert best[0].endswith("photosynthesis.md") and best[1] > 0.5
