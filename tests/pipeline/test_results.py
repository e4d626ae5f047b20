"""Reading an output back without Ray: the report, tables of a run that embedded nothing, and `nearest`'s edges.

(Finished outputs of real runs are read back in tests/pipeline/run/test_job.py and test_output_consumers.py.)
"""

import numpy as np
import pyarrow as pa
import pytest

from pipeline import results
from pipeline.errors import InputError
from pipeline.io import retries
from pipeline.results import embedding_matrix, nearest, read_errors, read_report, read_table
from pipeline.schemas import EMBEDDING_COLUMNS, ERRORS_SCHEMA, embedded_schema


def chunks(vectors_ND: np.ndarray) -> pa.Table:
    n, dim = vectors_ND.shape
    schema = embedded_schema(dim)
    rows = {name: [None] * n for name in EMBEDDING_COLUMNS}
    rows.update(doc_id=[f"d{i}" for i in range(n)], chunk_index=[0] * n, embedding=list(vectors_ND))
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
