"""Reading an output back without Ray: the report, tables of a run that embedded nothing, `nearest`'s edges, and
`search` part by part against `nearest` over the whole table, in memory flat in the output's size.

(Finished outputs of real runs are read back in tests/pipeline/run/test_job.py and test_output_consumers.py.)
"""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import results
from pipeline.errors import InputError
from pipeline.io import retries
from pipeline.results import embedding_matrix, nearest, read_errors, read_report, read_table, search
from pipeline.schemas import EMBEDDING_COLUMNS, ERRORS_SCHEMA, embedded_schema


def chunks(vectors_ND: np.ndarray, doc_ids: list[str] | None = None, text: str | None = None) -> pa.Table:
    n, dim = vectors_ND.shape
    schema = embedded_schema(dim)
    rows = {name: [None] * n for name in EMBEDDING_COLUMNS}
    rows.update(doc_id=doc_ids or [f"d{i}" for i in range(n)], chunk_index=[0] * n, embedding=list(vectors_ND))
    if text is not None:
        rows["text"] = [text] * n
    return pa.Table.from_pydict(rows, schema=pa.schema([schema.field(name) for name in EMBEDDING_COLUMNS]))


def test_nearest_takes_a_row_or_a_vector_and_refuses_what_cannot_be_compared():
    table = chunks(np.eye(4, dtype=np.float32)[:3])
    query = np.array([0.1, 1.0, 0.0, 0.0], np.float32)
    assert nearest(table, query, k=2).column("doc_id").to_pylist() == ["d1", "d0"]
    assert nearest(table, query[None, :], k=1).column("doc_id").to_pylist() == ["d1"]  # as embed([q]) returns it
    assert nearest(table, query, k=10).num_rows == 3 and nearest(table, query, k=0).num_rows == 0
    with pytest.raises(ValueError, match="k must be at least 0"):
        nearest(table, query, k=-1)
    with pytest.raises(ValueError, match="the query has 3 dimensions, the embeddings 4"):
        nearest(table, query[:3])


def test_equal_scores_come_in_document_order_whatever_the_tables_order():
    table = chunks(np.ones((4, 3), np.float32), doc_ids=["c", "a", "d", "b"])
    assert nearest(table, np.ones(3), k=3).column("doc_id").to_pylist() == ["a", "b", "c"]


def written_output(root, parts: list[pa.Table]):
    """A finished output whose embeddings/ holds `parts`, as a run writes them."""
    output = finished_output(root, success='{"counts": {"docs_failed": 0}}')
    for i, part in enumerate(parts):
        pq.write_table(part, f"{output}/embeddings/part-{i:05d}.parquet")
    return output


def test_search_finds_what_nearest_finds_over_the_whole_table(tmp_path, monkeypatch):
    """Three parts, scored in batches of 7 rows, with chunks of equal embeddings across parts and batches: the
    same rows, scores and order as `nearest` over `read_table`, for k within a batch, across batches and past
    the rows there are."""
    rng = np.random.default_rng(0)
    vectors_ND = rng.standard_normal((60, 8)).astype(np.float32)
    vectors_ND[40:50] = vectors_ND[3]  # ties, in another part than the row they equal
    ids = [f"doc-{i:02d}" for i in rng.permutation(60)]
    parts = [chunks(vectors_ND[a:b], ids[a:b], text="x") for a, b in [(0, 25), (25, 26), (26, 60)]]
    output = written_output(tmp_path / "out", parts)
    monkeypatch.setattr(results, "SEARCH_BATCH_ROWS", 7)
    for k in (0, 1, 5, 12, 20, 100):
        for query_D in (vectors_ND[3], rng.standard_normal(8)):
            want = nearest(read_table(output), query_D, k)
            got = search(output, query_D, k)
            assert got.equals(want), (k, got.column("doc_id"), want.column("doc_id"))
    with pytest.raises(ValueError, match="the query has 3 dimensions, the embeddings 8"):
        search(output, np.ones(3, np.float32))


def test_a_table_of_some_columns_and_a_sample_of_the_chunks(tmp_path):
    vectors_ND = np.random.default_rng(0).standard_normal((60, 8)).astype(np.float32)
    ids = [f"doc-{i:02d}" for i in range(60)]
    output = written_output(
        tmp_path / "out", [chunks(vectors_ND[a : a + 10], ids[a : a + 10]) for a in range(0, 60, 10)]
    )
    whole = read_table(output)
    assert read_table(output, columns=["n_tokens"]).column_names == ["doc_id", "chunk_index", "n_tokens"]
    sample = results.read_sample(output, 25, columns=["embedding"])
    assert sample.num_rows == 25 and sample.column_names == ["doc_id", "chunk_index", "embedding"]
    assert sample.equals(results.read_sample(output, 25, columns=["embedding"]))  # the same seed, the same chunks
    assert not sample.equals(results.read_sample(output, 25, columns=["embedding"], seed=1))
    drawn = set(sample.column("doc_id").to_pylist())
    assert drawn < set(ids) and sample.column("doc_id").to_pylist() == sorted(drawn)
    rows = {d: e for d, e in zip(ids, vectors_ND)}
    assert all(
        np.array_equal(rows[d], e) for d, e in zip(sample.column("doc_id").to_pylist(), embedding_matrix(sample))
    )
    assert results.read_sample(output, 1000).equals(whole)  # every chunk where the output holds no more
    empty = finished_output(tmp_path / "none")
    for columns in (None, ["n_tokens"]):  # a run that embedded nothing: no rows, read_table's columns
        assert results.read_sample(empty, 5, columns=columns).equals(read_table(empty, columns=columns))
    with pytest.raises(ValueError, match="rows must be at least 1, got 0"):
        results.read_sample(output, 0)


def test_search_of_a_run_that_embedded_nothing_finds_nothing(tmp_path):
    hits = search(finished_output(tmp_path / "out"), np.ones(384, np.float32), k=3)
    assert hits.num_rows == 0 and hits.column_names == [*EMBEDDING_COLUMNS, "score"]


_POOLS = []  # every pool `arrow_peak` made: alive to the end, as buffers Arrow's threads free late point to them


def arrow_peak(work) -> int:
    """The most bytes Arrow held at once while `work()` ran: a pool of its own's count, which no allocator's cache
    or the process's other memory moves, as they move RSS (by tens of MiB between runs of the same search)."""
    base = pa.default_memory_pool()
    _POOLS.append(pool := pa.proxy_memory_pool(base))
    pa.set_memory_pool(pool)
    try:
        work()
    finally:
        pa.set_memory_pool(base)
    return pool.max_memory()


def test_searchs_memory_is_flat_in_the_outputs_size_where_reading_it_whole_grows(tmp_path, monkeypatch):
    """Outputs of 20,000, 80,000 and 160,000 chunks of 384 dimensions and 1 kB of text, in parts of 5,000: what
    `search` holds at once is the batches of the parts it reads ahead and the part it reads its hits from,
    whatever the output's size; reading the output whole, as `read_table` and `nearest` do, holds every chunk.
    Reading ahead, its peak depends on its threads' timing (54-62 MB at 80,000 chunks here); one part at a time,
    much less, so that is where it is compared across sizes: the least of three searches each, as even then one
    search in about twenty holds a batch more than the others (45.5 MB against 48.9 at every size here), while
    growth with the output's size would show in every search."""
    part = chunks(np.random.default_rng(0).standard_normal((5_000, 384)).astype(np.float32), text="t" * 1000)
    outputs = {n: written_output(tmp_path / str(n), [part] * (n // 5_000)) for n in (20_000, 80_000, 160_000)}
    query_D = np.ones(384, np.float32)
    whole = [arrow_peak(lambda o=outputs[n]: nearest(read_table(o), query_D)) for n in (20_000, 80_000)]
    assert whole[1] > 3.5 * whole[0], whole  # the measure sees the chunks
    ahead = arrow_peak(lambda: search(outputs[160_000], query_D))
    monkeypatch.setattr(results, "SEARCH_PARTS_AHEAD", 1)
    one_part = [min(arrow_peak(lambda o=outputs[n]: search(o, query_D)) for _ in range(3)) for n in (80_000, 160_000)]
    assert ahead < whole[0], (ahead, whole)  # 8 times the chunks in less than reading 20,000 whole
    assert one_part[1] - one_part[0] < 2**20, one_part


def test_the_embedding_matrix_views_a_column_in_one_piece_and_holds_a_sliced_ones_own_rows():
    vectors_ND = np.arange(24, dtype=np.float32).reshape(6, 4)
    table = chunks(vectors_ND)
    buffer = table.column("embedding").chunk(0).values.buffers()[1]
    matrix = embedding_matrix(table)
    assert matrix.ctypes.data == buffer.address  # no copy: the README's view
    np.testing.assert_array_equal(matrix, vectors_ND)
    np.testing.assert_array_equal(embedding_matrix(table.slice(2, 3)), vectors_ND[2:5])
    split = pa.concat_tables([table.slice(0, 2), table.slice(2)])  # as read from two parts
    np.testing.assert_array_equal(embedding_matrix(split), vectors_ND)


def finished_output(root, success: str = '{"counts": {"docs_failed": 2}}'):
    """An output as a run whose every document failed leaves it: a report, errors, no embeddings part."""
    for name in ("embeddings", "errors"):
        (root / name).mkdir(parents=True)
    (root / "_SUCCESS").write_text(success)
    return str(root)


def test_a_run_that_embedded_nothing_reads_as_empty_tables_with_their_columns(tmp_path):
    output = finished_output(tmp_path / "out")
    table = read_table(output)
    assert table.num_rows == 0 and table.column_names == EMBEDDING_COLUMNS
    assert embedding_matrix(table).shape == (0, 0)
    assert nearest(table, np.ones(384, np.float32)).num_rows == 0
    assert read_errors(output).num_rows == 0 and "error_type" in read_errors(output).column_names
    with pytest.raises(ValueError, match="which must be 'embeddings' or 'errors', got 'error'"):
        read_table(output, "error")


def test_a_run_without_parts_reads_as_empty_tables_where_their_directories_are_missing_too(tmp_path):
    # As on object stores, which have no directories: no part under a prefix, no prefix.
    output = finished_output(tmp_path / "out")
    for name in ("embeddings", "errors"):
        (tmp_path / "out" / name).rmdir()
    assert read_table(output).num_rows == 0 and read_errors(output).column_names == ERRORS_SCHEMA.names


class Refusing:
    """A filesystem whose storage refuses or is unreachable."""

    type_name = "s3"

    def __init__(self, error: str):
        self.error, self.calls = error, 0

    def open_input_stream(self, path):
        self.calls += 1
        raise OSError(self.error)


@pytest.mark.parametrize(
    "error, attempts, says",
    [
        ("AWS Error ACCESS_DENIED during GetObject operation: Access Denied", 1, "check the credentials"),
        ("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 7", 3, "still failing after 3 attempts"),
    ],
)
def test_search_says_in_one_line_when_storage_refuses_or_is_down(monkeypatch, capsys, error, attempts, says):
    from pipeline.cli import search

    monkeypatch.setattr(retries, "BACKOFF_SECONDS", 0.001)
    fs = Refusing(error)
    monkeypatch.setattr(results, "filesystem_for", lambda output: (fs, "out1/o"))
    assert search.main(["--output", "s3://out1/o", "--query", "bread"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("docembed: error: cannot read s3://out1/o/_SUCCESS: ") and err.count("\n") == 1, err
    assert says in err and fs.calls == attempts


def test_what_is_not_a_finished_output_is_one_input_error(tmp_path):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "no-run").mkdir()
    for output, message in [
        (tmp_path / "a-file", "a-file is a file, not a run's output"),
        (tmp_path / "missing", "missing does not exist"),
        (tmp_path / "no-run", r"no-run holds no finished run \(no _SUCCESS\)"),
        (finished_output(tmp_path / "empty-report", success=""), "is not a run's report"),
    ]:
        with pytest.raises(InputError, match=message):
            read_report(str(output))
