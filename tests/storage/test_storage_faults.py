"""Storage through S3 and GCS servers that drop and slow requests: retried reads, writes and shard reads; commits
side by side."""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from pipeline.errors import StorageError
from pipeline.io import filesystems, retries, shards
from pipeline.io.shards import iter_shard
from pipeline.output import resume, sink
from pipeline.output.layout import marker_path
from pipeline.output.ledger import Ledger
from pipeline.schemas import embedded_schema

from support import MANIFEST, keeping, write_after

ROWS = 150


@pytest.fixture(params=["s3", "gs"])
def faulty_store(request, servers, tmp_path, monkeypatch):
    """(scheme, its fault proxy), with this process's storage environment pointed at the proxies."""
    for name, value in servers.env(tmp_path).items():
        monkeypatch.setenv(name, value)
    servers.reset_faults()
    yield request.param, servers.proxies[request.param]
    servers.reset_faults()
    filesystems._object_store.cache_clear()  # drops filesystems made with a patched retry limit


def test_reads_writes_and_shards_survive_injected_faults(faulty_store, servers, monkeypatch):
    """30% of requests fail with 503 and 10% are slowed: every write and read is whole; storage down fails loudly."""
    scheme, proxy = faulty_store
    servers.make_bucket(scheme, "units")
    monkeypatch.setattr(shards, "READ_BUFFER", 4096)  # many ranged reads
    # About ten ranged reads and two writes (each a staged PUT, a size check, a copy into place and a delete:
    # `write_file`): each kind of request meets several faults, and every GCS fault costs google-cloud-cpp's
    # back-off (a second or more, not configurable through pyarrow).
    rows = [json.dumps({"id": i, "text": f"document {i} " * 20}) for i in range(ROWS)]
    fs, root = filesystems.filesystem_for(f"{scheme}://units")
    filesystems.write_file(fs, f"{root}/s.jsonl", "\n".join(rows).encode(), f"{root}/_staging")
    proxy.reset()  # the faults' seeded sequence starts here
    proxy.fail_rate, proxy.slow_rate, proxy.slow_seconds = 0.3, 0.1, 0.05
    for i in range(2):
        filesystems.write_file(fs, f"{root}/out/f{i}", b"x" * i, f"{root}/_staging")
        assert filesystems.read_bytes(f"{scheme}://units/out/f{i}") == b"x" * i
    docs = list(iter_shard(f"{scheme}://units/s.jsonl", "jsonl"))
    assert [d["doc_id"] for d in docs] == [f"{scheme}://units/s.jsonl#{i}" for i in range(ROWS)]
    assert proxy.counts["failed"] >= 5, proxy.counts

    proxy.down = True
    # google-cloud-cpp retries each request for GCS_RETRY_SECONDS, and `retrying` backs off between its
    # attempts: short ones keep this quick (the attempts are what is tested, not their spacing).
    monkeypatch.setattr(filesystems, "GCS_RETRY_SECONDS", 1)
    monkeypatch.setattr(retries, "BACKOFF_SECONDS", 0.01)
    filesystems._object_store.cache_clear()
    with pytest.raises(StorageError, match=f"{scheme}://units/s.jsonl"):
        list(iter_shard(f"{scheme}://units/s.jsonl", "jsonl"))


class StoppedMidWrite:
    """The store, with every upload stream stopped after its first byte by SystemExit, as Ray stops a worker.

    Leaving the `with` closes the stream, which on S3 and GCS commits what it holds (pyarrow's streams do).
    """

    def __init__(self, fs):
        self.fs = fs

    def __getattr__(self, name):
        return getattr(self.fs, name)

    def open_output_stream(self, path):
        return _Stopping(self.fs.open_output_stream(path))


class _Stopping:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stream.close()

    def write(self, data):
        self.stream.write(data[:1])
        raise SystemExit


def test_a_write_stopped_midway_leaves_nothing_at_its_name(faulty_store):
    scheme, _ = faulty_store
    fs, root = filesystems.filesystem_for(f"{scheme}://units")
    fs.create_dir(root)
    with pytest.raises(SystemExit):
        filesystems.write_file(StoppedMidWrite(fs), f"{root}/part.parquet", b"whole body", f"{root}/_staging")
    assert fs.get_file_info(f"{root}/part.parquet").type == pafs.FileType.NotFound
    assert fs.get_file_info(pafs.FileSelector(f"{root}/_staging", allow_not_found=True)) == []
    filesystems.write_file(fs, f"{root}/part.parquet", b"whole body", f"{root}/_staging")
    assert filesystems.read_bytes(f"{scheme}://units/part.parquet") == b"whole body"


def test_a_writer_call_commits_its_groups_side_by_side_and_the_ledger_its_markers(faulty_store, servers, monkeypatch):
    """On an object store a part or a marker is a few requests of its latency (`bench/commits.py`): the groups of
    a writer call, and the markers of the groups complete, are written side by side, each whole."""
    scheme, _ = faulty_store
    servers.make_bucket(scheme, "side")
    output = f"{scheme}://side/out"
    state = resume.open_output(output, overwrite=False, manifest=MANIFEST)
    groups = [f"g{i}" for i in range(4)]
    together = threading.Barrier(len(groups), timeout=30)  # passes only with all four writes in flight at once
    write_after(monkeypatch, together.wait)
    rows = [
        {"doc_id": f"{g}.txt", "chunk_index": 0, "text": "x", "n_tokens": 3, "embedding": [1.0, 0.0], "group": g}
        | {"group_docs": 1, "doc_chunks": 1}
        for g in groups
    ]
    summaries = sink.write_block(pa.Table.from_pylist(rows, schema=embedded_schema(2)), output)
    assert [s["group"] for s in summaries] == groups
    ledger = Ledger(output, state)
    ledger.expect(dict.fromkeys(groups, 1))
    markers = []
    ledger.add(summaries, keeping(markers))
    ledger.landed()
    assert sorted(m["group"] for m in markers) == groups
    ledger.finish()
    fs, root = filesystems.filesystem_for(output)
    for marker in markers:
        assert json.loads(filesystems.read_file(fs, f"{root}/{marker_path(marker['group'])}")) == marker
        (part,) = marker["parts"]
        assert pq.read_table(f"{root}/{part}", filesystem=fs).column("doc_id").to_pylist() == [f"{marker['group']}.txt"]
