"""Shard readers: rows and bad records of jsonl (plain, gzip, zstd, bzip2) and Parquet shards, streamed rather
than loaded."""

from __future__ import annotations

import bz2
import gzip
import itertools
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import StorageError
from pipeline.io import shards
from pipeline.io.shards import ShardFields, iter_shard

from support import REPO

# Five rows in two zstd frames, as the zstd command-line tool wrote them (`zstd -19`, then `zstd >>`):
# {"id": "z0", "text": "zstd row 0"} ... {"id": "z4", ...}.
ZSTD_SHARD = REPO / "tests" / "fixtures" / "shards" / "rows.jsonl.zst"
ROWS = b"".join(json.dumps({"id": f"z{i}", "text": f"zstd row {i}"}).encode() + b"\n" for i in range(5))


def _compressed(suffix: str, data: bytes) -> bytes:
    """`data` as each codec's usual writer makes it: Python's gzip (two members) and bz2, the zstd tool."""
    if suffix.endswith(".gz"):
        return gzip.compress(data[:40]) + gzip.compress(data[40:])
    if suffix.endswith(".bz2"):
        return bz2.compress(data)
    assert data == ROWS, "the zstd shard is a fixture of ROWS"
    return ZSTD_SHARD.read_bytes()


def test_jsonl_shard_rows_and_bad_records(tmp_path):
    path = tmp_path / "s.jsonl"
    lines = [
        json.dumps({"doc": "a", "body": "first"}),
        "",
        "[1, 2]",
        "{broken",
        json.dumps({"body": "no id"}),
        json.dumps({"doc": 7, "body": None}),
        json.dumps({"doc": 8.0, "body": "eight"}),
        b"\xff\xfe not utf-8".decode("latin-1"),
        json.dumps({"doc": 9, "text": "the wrong field"}),
        json.dumps({"doc": None, "body": "null id"}),
    ]
    path.write_text("\n".join(lines))
    rows = list(iter_shard(str(path), "jsonl", ShardFields(id="doc", text="body")))
    got = [(r["doc_id"].split("#")[1], r.get("error_type"), r.get("error_message")) for r in rows]
    assert got == [
        ("a", None, None),
        ("line:3", "BadRecord", "line:3: a JSON list, not an object"),
        ("line:4", "BadRecord", got[2][2]),
        ("line:5", "MissingId", "line:5: no id field 'doc'; --id-field '' names each row by its position"),
        ("7", "NoText", "line:6: text field 'body' is null"),
        ("8", None, None),
        ("line:8", "BadRecord", got[6][2]),
        ("9", "NoText", "line:9: text field 'body' is missing"),
        ("line:10", "MissingId", "line:10: a null id field 'doc'"),
    ]
    assert rows[0]["pages"] == ["first"]


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".json.gz", ".ndjson.gz", ".jsonl.bz2", ".JSONL.ZST"])
def test_compressed_jsonl_shards_read_whole_and_a_cut_one_keeps_the_rows_before_the_damage(tmp_path, suffix):
    data = _compressed(suffix, ROWS)
    (tmp_path / f"a{suffix}").write_bytes(data)
    rows = list(iter_shard(str(tmp_path / f"a{suffix}"), "jsonl"))
    assert [(r["doc_id"], r["pages"]) for r in rows] == [
        (f"{tmp_path}/a{suffix}#z{i}", [f"zstd row {i}"]) for i in range(5)
    ]
    assert shards.plan_units(str(tmp_path / f"a{suffix}"), "jsonl", 10**12, unit_bytes=10) is None

    (tmp_path / f"cut{suffix}").write_bytes(data[: len(data) - 12])
    *before, last = iter_shard(str(tmp_path / f"cut{suffix}"), "jsonl")
    assert last["doc_id"] == str(tmp_path / f"cut{suffix}") and last["error_type"] == "CorruptShard"
    assert last["error_message"].startswith(f"unreadable {shards.compression_of(suffix)} stream at ")
    assert [r["doc_id"] for r in before] == [f"{tmp_path}/cut{suffix}#z{i}" for i in range(len(before))]


def test_a_storage_failure_inside_a_compressed_shard_stops_the_job_and_is_no_corrupt_shard(tmp_path, monkeypatch):
    (tmp_path / "a.jsonl.zst").write_bytes(ZSTD_SHARD.read_bytes())
    read = shards._RangeReader.readinto

    def fails_after_the_first_range(self, buffer):
        if self.tell():
            raise StorageError("cannot read it: the store is down")
        return read(self, buffer)

    monkeypatch.setattr(shards, "READ_BUFFER", 16)
    monkeypatch.setattr(shards._RangeReader, "readinto", fails_after_the_first_range)
    with pytest.raises(StorageError, match="the store is down"):
        list(iter_shard(str(tmp_path / "a.jsonl.zst"), "jsonl"))


def test_parquet_shards_and_broken_ones(tmp_path):
    pq.write_table(pa.table({"key": ["x", None], "body": ["text x", "text y"]}), tmp_path / "p.parquet")
    rows = list(iter_shard(str(tmp_path / "p.parquet"), "parquet", ShardFields(id="key", text="body")))
    assert [(r["doc_id"].split("#")[1], r.get("error_type")) for r in rows] == [("x", None), ("row:1", "MissingId")]
    rows = list(iter_shard(str(tmp_path / "p.parquet"), "parquet"))
    assert len(rows) == 1 and rows[0]["error_type"] == "BadShard" and "no column id, text" in rows[0]["error_message"]

    (tmp_path / "fake.parquet").write_bytes(b"not parquet at all")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    assert [r["error_type"] for r in iter_shard(str(tmp_path / "fake.parquet"), "parquet")] == ["CorruptShard"]
    assert [r["error_type"] for r in iter_shard(str(tmp_path / "empty.jsonl"), "jsonl")] == ["EmptyShard"]


@pytest.mark.parametrize("layout", ["jsonl", "parquet", "parquet-one-row-group"])
def test_shards_are_streamed_not_loaded_whole(tmp_path, monkeypatch, layout):
    # pyarrow's writer puts a whole table in one row group by default: that too is read a buffer at a time.
    monkeypatch.setattr(shards, "READ_BUFFER", 1 << 14)
    n = 20_000
    texts = [f"document number {i}: " + "word " * 30 for i in range(n)]
    kind = layout.split("-")[0]
    path = tmp_path / f"big.{kind}"
    if kind == "jsonl":
        path.write_text("\n".join(json.dumps({"id": i, "text": t}) for i, t in enumerate(texts)))
    else:
        # One row group is read a page at a time: small pages here, as a big file's are small beside it.
        groups = (
            {"row_group_size": 500} if layout == "parquet" else {"use_dictionary": False, "data_page_size": 1 << 16}
        )
        pq.write_table(pa.table({"id": list(range(n)), "text": texts}), path, compression="none", **groups)
        assert pq.ParquetFile(path).num_row_groups == (n // 500 if layout == "parquet" else 1)
    read = []
    original = shards._RangeReader.readinto

    def counting(self, buffer):
        got = original(self, buffer)
        read.append(got)
        return got

    monkeypatch.setattr(shards._RangeReader, "readinto", counting)
    first = list(itertools.islice(iter_shard(str(path), kind), 100))
    assert len(first) == 100
    assert sum(read) < path.stat().st_size / 10, (sum(read), path.stat().st_size)


def test_parquet_batches_of_big_documents_hold_a_few_megabytes_not_a_fixed_row_count(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "PARQUET_BATCH_BYTES", 1 << 20)
    texts = [f"{i} " + "x" * (256 << 10) for i in range(40)]  # 256 KiB each: 4 to a batch of 1 MiB
    pq.write_table(pa.table({"id": list(range(40)), "text": texts}), tmp_path / "wide.parquet")
    sizes = []
    original = pq.ParquetFile.iter_batches

    def recording(self, batch_size, **kwargs):
        sizes.append(batch_size)
        return original(self, batch_size=batch_size, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", recording)
    rows = list(iter_shard(str(tmp_path / "wide.parquet"), "parquet"))
    assert [r["pages"][0] for r in rows] == texts and sizes == [3]  # 1 MiB over a row's 256 KiB and more


def test_parquet_columns_that_python_or_a_name_cannot_read_are_error_rows(tmp_path):
    pq.write_table(
        pa.Table.from_arrays([pa.array(["q"]), pa.array(["a"]), pa.array(["b"])], ["id", "text", "text"]),
        tmp_path / "twice.parquet",
    )
    (row,) = iter_shard(str(tmp_path / "twice.parquet"), "parquet")
    assert row["error_type"] == "BadShard" and row["error_message"] == "more than one column named text"
    # A timestamp id past Python's datetime range: pyarrow cannot hand it over.
    ids = pa.array([1, 10**12], pa.timestamp("s"))
    pq.write_table(pa.table({"id": ids, "text": ["a doc", "b doc"]}), tmp_path / "dates.parquet")
    (row,) = iter_shard(str(tmp_path / "dates.parquet"), "parquet")
    assert row["error_type"] == "CorruptShard" and "out of range" in row["error_message"]


IDS = ["a", "b", "a", "c", "b", "d", "a", "e", "f", "g", "c", "h"]


def write_shard(tmp_path, kind: str, ids=IDS):
    """A shard with repeated ids and a bad line (jsonl) or several row groups (Parquet)."""
    texts = [f"text number {i} " * 5 for i in range(len(ids))]
    if kind == "jsonl":
        path = tmp_path / "dups.jsonl"
        lines = [json.dumps({"id": i, "text": t}) for i, t in zip(ids, texts)]
        lines[4:4] = ["", "{broken"]
        path.write_text("\n".join(lines) + "\n")
    else:
        path = tmp_path / "dups.parquet"
        pq.write_table(pa.table({"id": ids, "text": texts}), path, row_group_size=2)
    return str(path)


def read_all(uri: str, kind: str, plan) -> list[dict]:
    units = plan.units if plan is not None else (shards.WHOLE,)
    return [row for unit in units for row in iter_shard(uri, kind, unit=unit)]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_each_repeated_id_is_one_duplicate_error_row_and_the_first_occurrence_a_document(tmp_path, kind):
    uri = write_shard(tmp_path, kind)
    rows = list(iter_shard(uri, kind))
    docs = [r["doc_id"].split("#")[1] for r in rows if "pages" in r]
    assert docs == ["a", "b", "c", "d", "e", "f", "g", "h"]
    dups = [r for r in rows if r.get("error_type") == "DuplicateId"]
    where = ["line:3", "line:7", "line:9", "line:13"] if kind == "jsonl" else ["row:2", "row:4", "row:6", "row:10"]
    assert [r["doc_id"] for r in dups] == [f"{uri}#{w}" for w in where]
    assert "id 'a' already names an earlier document" in dups[0]["error_message"]
    assert len({r["doc_id"] for r in rows}) == len(rows)  # every row of the shard once, under its own doc_id


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_shard_cut_into_units_reads_as_the_whole_shard_does_repeats_across_units_included(tmp_path, kind):
    uri = write_shard(tmp_path, kind)
    size = (tmp_path / uri.rsplit("/", 1)[1]).stat().st_size
    plan = shards.plan_units(uri, kind, size, unit_bytes=150)
    assert plan is not None and len(plan.units) >= 3
    assert plan == shards.plan_units(uri, kind, size, unit_bytes=150)  # a rerun cuts the same units
    whole = list(iter_shard(uri, kind))
    assert read_all(uri, kind, plan) == whole
    assert plan.docs == len(whole)
    # Each unit finds only the repeats its plan gives it: a unit alone cannot see the earlier units' ids.
    assert sum(len(u.repeats) for u in plan.units) == 4


POSITIONAL = ShardFields(id="")


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_without_an_id_field_each_row_is_named_by_its_position_whole_or_in_units(tmp_path, kind):
    """--id-field '': the ids the shard holds, repeated or not, are not read; every row is a document under its
    line or row, the blank and the broken ones are what they are with ids."""
    uri = write_shard(tmp_path, kind)
    whole = list(iter_shard(uri, kind, POSITIONAL))
    docs = [r["doc_id"].split("#", 1)[1] for r in whole if "pages" in r]
    lines = [*range(1, 5), *range(7, 15)]  # line 5 is blank, line 6 broken
    assert docs == ([f"line:{n}" for n in lines] if kind == "jsonl" else [f"row:{n}" for n in range(12)])
    assert [r["pages"] for r in whole if "pages" in r] == [[f"text number {i} " * 5] for i in range(12)]
    errors = [(r["doc_id"].split("#", 1)[1], r["error_type"]) for r in whole if "error_type" in r]
    assert errors == ([("line:6", "BadRecord")] if kind == "jsonl" else [])
    size = (tmp_path / uri.rsplit("/", 1)[1]).stat().st_size
    plan = shards.plan_units(uri, kind, size, POSITIONAL, unit_bytes=150)
    assert plan is not None and len(plan.units) >= 3 and all(u.repeats == () for u in plan.units)
    assert [row for u in plan.units for row in iter_shard(uri, kind, POSITIONAL, u)] == whole


def test_a_parquet_shard_without_the_id_column_says_how_to_name_rows_by_position(tmp_path):
    pq.write_table(pa.table({"content": ["one", "two"], "url": ["u1", "u2"]}), tmp_path / "p.parquet")
    (row,) = iter_shard(str(tmp_path / "p.parquet"), "parquet", ShardFields(text="content"))
    assert row["error_type"] == "BadShard" and row["error_message"] == (
        "no column id (columns: content, url); --id-field '' names each row by its position"
    )
    rows = list(iter_shard(str(tmp_path / "p.parquet"), "parquet", ShardFields(id="", text="content")))
    assert [(r["doc_id"].split("#")[1], r["pages"]) for r in rows] == [("row:0", ["one"]), ("row:1", ["two"])]
    rows = list(iter_shard(str(tmp_path / "p.parquet"), "parquet", ShardFields(id="url", text="content")))
    assert [r["doc_id"].split("#")[1] for r in rows] == ["u1", "u2"]


def test_a_small_shard_is_one_unit(tmp_path):
    uri = write_shard(tmp_path, "jsonl")
    assert shards.plan_units(uri, "jsonl", 100, unit_bytes=150) is None


def test_a_lone_surrogate_escape_costs_only_its_record_in_a_shard_read_whole_or_in_units(tmp_path):
    # json.loads accepts "\ud800" and makes a str that Arrow cannot encode: the block it lands in failed whole.
    path = tmp_path / "s.jsonl"
    lines = [
        r'{"id": "s1", "text": "lone \ud800 here"}',
        r'{"id": "bad\udc80id", "text": "x"}',
        r'{"id": "pair", "text": "a real pair \ud83d\ude00 is fine"}',
        '{"id": "s2", "text": "fine"}',
    ]
    path.write_text(("\n".join(lines) + "\n") * 3)
    rows = list(iter_shard(str(path), "jsonl"))
    got = [(r["doc_id"].split("#")[1], r.get("error_type")) for r in rows]
    assert got[:4] == [("line:1", "BadRecord"), ("line:2", "BadRecord"), ("pair", None), ("s2", None)]
    assert "field 'text' holds a lone surrogate" in rows[0]["error_message"]
    assert rows[2]["pages"] == ["a real pair \N{GRINNING FACE} is fine"]
    pa.Table.from_pylist(rows)  # every row is Arrow text
    plan = shards.plan_units(str(path), "jsonl", path.stat().st_size, unit_bytes=100)
    assert plan is not None and read_all(str(path), "jsonl", plan) == rows


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_an_id_of_another_rows_positional_form_is_refused_so_doc_ids_stay_unique(tmp_path, kind):
    # Line 3 (row 2) has no id: its error row is URI#line:3 (URI#row:2), which a record's id may not take.
    ids = ["line:3", None, None, "line:4", "row:0", "row:2", "line:x"]
    if kind == "jsonl":
        path = tmp_path / "s.jsonl"
        path.write_text("\n".join(json.dumps({"id": i, "text": f"text {n}"}) for n, i in enumerate(ids)))
    else:
        path = tmp_path / "s.parquet"
        pq.write_table(pa.table({"id": ids, "text": [f"text {n}" for n in range(len(ids))]}), path)
    rows = list(iter_shard(str(path), kind))
    got = [(r["doc_id"].split("#")[1], r.get("error_type")) for r in rows]
    if kind == "jsonl":
        expected = [("line:1", "ReservedId"), ("line:2", "MissingId"), ("line:3", "MissingId"), ("line:4", None)]
        expected += [("row:0", None), ("row:2", None), ("line:x", None)]
    else:
        expected = [("line:3", None), ("row:1", "MissingId"), ("row:2", "MissingId"), ("line:4", None)]
        expected += [("row:4", "ReservedId"), ("row:5", "ReservedId"), ("line:x", None)]
    assert got == expected
    assert len({r["doc_id"] for r in rows}) == len(rows)


def test_an_id_that_is_true_an_object_or_a_list_is_spelled_as_json_spells_it(tmp_path):
    """So that a doc_id joins back on the source's id: Python's spelling (True, {'k': 1}) is nobody's."""
    ids = [True, {"k": 1, "é": [2]}, [1, "two"], 7.0]
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps({"id": i, "text": "some text"}) for i in ids))
    pq.write_table(pa.table({"id": [{"k": 1}, {"k": 2}], "text": ["a", "b"]}), tmp_path / "s.parquet")
    jsonl = [r["doc_id"].split("#", 1)[1] for r in iter_shard(str(tmp_path / "s.jsonl"), "jsonl")]
    assert jsonl == ["true", '{"k":1,"é":[2]}', '[1,"two"]', "7"]
    assert [r["doc_id"].split("#", 1)[1] for r in iter_shard(str(tmp_path / "s.parquet"), "parquet")] == [
        '{"k":1}',
        '{"k":2}',
    ]


def test_parquet_id_and_text_from_one_column_and_binary_columns(tmp_path):
    pq.write_table(pa.table({"text": ["one text", "two text"]}), tmp_path / "same.parquet")
    rows = list(iter_shard(str(tmp_path / "same.parquet"), "parquet", ShardFields(id="text", text="text")))
    assert [(r["doc_id"].split("#")[1], r["pages"]) for r in rows] == [(t, [t]) for t in ("one text", "two text")]

    ids, texts = pa.array([b"b1", b"\xff"], pa.binary()), pa.array([b"caf\xc3\xa9", b"\xff"], pa.binary())
    table = pa.table({"id": ids, "text": texts})
    pq.write_table(table, tmp_path / "binary.parquet")
    rows = list(iter_shard(str(tmp_path / "binary.parquet"), "parquet"))
    assert rows[0]["doc_id"].endswith("#b1") and rows[0]["pages"] == ["café"]
    assert rows[1]["doc_id"].endswith("#\\xff") and rows[1]["error_type"] == "NoText"
    assert "not UTF-8" in rows[1]["error_message"]


@pytest.mark.parametrize(
    "name, data, error",
    [
        ("s.jsonl", gzip.compress(ROWS), "CorruptShard: .gz data in a file not named .gz: name it .jsonl.gz"),
        ("s.jsonl", ZSTD_SHARD.read_bytes(), "CorruptShard: .zst data in a file not named .zst: name it .jsonl.zst"),
        ("s.jsonl", bz2.compress(ROWS), "CorruptShard: .bz2 data in a file not named .bz2: name it .jsonl.bz2"),
        ("s.jsonl.zst", gzip.compress(ROWS), "CorruptShard: unreadable zstd stream at its start: "),
        ("s.jsonl", '{"id": 1, "text": "a"}\n{"id": 2, "text": "b"}\n'.encode("utf-16"), "BadShard: UTF-16 or "),
        ("s.jsonl", '{"id": 1, "text": "a"}\n'.encode("utf-32-le"), "BadShard: UTF-16 or UTF-32 text"),
        ("s.jsonl.gz", gzip.compress("{}".encode("utf-16")), "BadShard: UTF-16 or UTF-32 text"),
        ("s.json.gz", gzip.compress(b' \n[{"id": 1, "text": "a"},\n {"id": 2}]'), "BadShard: a JSON array, not"),
    ],
    ids=[
        "gzip-named-jsonl",
        "zstd-named-jsonl",
        "bzip2-named-jsonl",
        "gzip-named-zst",
        "utf-16",
        "utf-32",
        "utf-16-in-gzip",
        "json-array",
    ],
)
def test_a_jsonl_shard_that_is_not_utf8_json_lines_is_one_error_row(tmp_path, name, data, error):
    (tmp_path / name).write_bytes(data)
    (row,) = iter_shard(str(tmp_path / name), "jsonl")
    assert row["doc_id"] == str(tmp_path / name)
    assert f"{row['error_type']}: {row['error_message']}".startswith(error)
