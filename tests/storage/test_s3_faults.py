"""Storage through an S3 server that drops and slows requests: retried reads, writes and shard reads."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import StorageError
from pipeline.io import filesystems, shards
from pipeline.io.shards import iter_shard

from storage_servers import REGION


@pytest.fixture
def s3_env(servers, monkeypatch):
    for name, value in {**servers.creds, "AWS_ENDPOINT_URL": servers.s3_proxy.url, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    servers.s3_proxy.reset()
    yield servers
    servers.s3_proxy.reset()


def test_s3_reads_writes_and_shards_survive_injected_faults(s3_env, monkeypatch):
    servers = s3_env
    servers.make_bucket("s3", "units")
    monkeypatch.setattr(shards, "READ_BUFFER", 4096)  # many ranged reads
    rows = [json.dumps({"id": i, "text": f"document {i} " * 20}) for i in range(300)]
    servers.s3.put_object(Bucket="units", Key="s.jsonl", Body="\n".join(rows).encode())
    proxy = servers.s3_proxy
    proxy.fail_rate, proxy.slow_rate, proxy.slow_seconds = 0.3, 0.1, 0.05
    fs, root = filesystems.filesystem_for("s3://units/out")
    for i in range(5):
        filesystems.write_file(fs, f"{root}/f{i}", b"x" * i, f"{root}/_staging")
        assert filesystems.read_bytes(f"s3://units/out/f{i}") == b"x" * i
    docs = list(iter_shard("s3://units/s.jsonl", "jsonl"))
    assert [d["doc_id"] for d in docs] == [f"s3://units/s.jsonl#{i}" for i in range(300)]
    assert proxy.counts["failed"] >= 5, proxy.counts

    proxy.down = True
    with pytest.raises(StorageError, match="s3://units/s.jsonl"):
        list(iter_shard("s3://units/s.jsonl", "jsonl"))
