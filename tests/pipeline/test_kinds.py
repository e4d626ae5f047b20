"""Which files docembed reads, and as what: one table for the listing, the extractors and the shard reader."""

import pytest

from pipeline.kinds import SHARD_KINDS, described, kind_of


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("a/b/Report.PDF", "pdf"),
        ("notes.md", "text"),
        ("notes.txt", "text"),
        ("s3://bucket/rows.jsonl", "jsonl"),
        ("rows.JSONL.GZ", "jsonl"),
        ("s3://bucket/rows.jsonl.zst", "jsonl"),
        ("rows.jsonl.bz2", "jsonl"),
        ("c4/en/c4-train.00000-of-01024.json.gz", "jsonl"),
        ("pile/00.json.zst", "jsonl"),
        ("export/rows.ndjson", "jsonl"),
        ("gs://bucket/rows.NDJSON.gz", "jsonl"),
        ("config.json", None),
        ("gs://bucket/part-0.parquet", "parquet"),
        ("image.png", None),
        ("archive.pdf.gz", None),
        ("rows.jsonl.bak", None),
    ],
)
def test_kind_of_by_name(path, kind):
    assert kind_of(path) == kind


def test_shards_are_the_kinds_of_many_documents():
    assert set(SHARD_KINDS) == {kind_of("a.jsonl"), kind_of("a.parquet")}
    assert described() == (
        ".pdf, .txt, .md, .jsonl.gz, .jsonl.zst, .jsonl.bz2, .ndjson.gz, .ndjson.zst, .ndjson.bz2, .json.gz, "
        ".json.zst, .json.bz2, .jsonl, .ndjson, .parquet"
    )
