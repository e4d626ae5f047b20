"""Fixtures for the storage tests: S3 and GCS servers on 127.0.0.1, a corpus, a Ray with their environment.

The jobs take endpoints and credentials from the environment, and Ray workers
inherit the environment of the Ray that starts them, so `storage_ray` sets the
variables first, then starts a module-scoped local Ray, and restores both after.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

from storage_servers import Servers
from stored_corpus import NOTES, SAMPLES, note_name, note_text, shard_rows
from support import start_local_ray


@pytest.fixture(scope="session")
def servers():
    s = Servers()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """PDFs (one encrypted), texts, broken files, and jsonl (plain, gzip, zstd) and parquet shards with bad rows."""
    root = tmp_path_factory.mktemp("storage-corpus") / "corpus"
    shutil.copytree(SAMPLES, root / "samples")
    (root / "bad").mkdir()
    pdf = (SAMPLES / "pdf" / "pdflatex-4-pages.pdf").read_bytes()
    (root / "bad" / "truncated.pdf").write_bytes(pdf[: len(pdf) // 3])
    (root / "bad" / "zero.txt").write_bytes(b"")
    (root / "notes").mkdir()
    for i in range(NOTES):
        (root / "notes" / note_name(i)).write_text(note_text(i))
    shards = root / "shards"
    shards.mkdir()
    lines = [json.dumps(r) for r in shard_rows("a")]
    lines[3:3] = ["{not json", json.dumps({"text": "no id here"}), json.dumps({"id": "a-empty", "text": "  "}), ""]
    (shards / "a.jsonl").write_text("\n".join(lines) + "\n")
    with gzip.open(shards / "b.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(r) for r in shard_rows("b")) + "\n")
    with pa.CompressedOutputStream(str(shards / "d.jsonl.zst"), "zstd") as f:
        f.write(("\n".join(json.dumps(r) for r in shard_rows("d")) + "\n").encode())
    rows = shard_rows("c")
    pq.write_table(pa.table({"id": list(range(len(rows))), "text": [r["text"] for r in rows]}), shards / "c.parquet")
    return root


@pytest.fixture(scope="module")
def storage_ray(servers, tmp_path_factory):
    """A local Ray whose workers see the storage servers; yields its address for other drivers."""
    if ray.is_initialized():
        ray.shutdown()
    saved = dict(os.environ)
    os.environ.update(servers.env(tmp_path_factory.mktemp("model-cache")))
    servers.reset_faults()
    try:
        yield start_local_ray()
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)
