"""The storage layer, shard readers, commit groups and resume bookkeeping, without Ray."""

from __future__ import annotations

import gzip
import io
import itertools
import json

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from pipeline.io import filesystems as storage, shards
from pipeline.output import resume, sink
from pipeline.errors import ConfigError, OutputError, StorageError
from pipeline.io.shards import ShardFields, iter_shard
from pipeline.io.listing import InputFile, list_inputs, plan_groups, work_blocks
from pipeline.stages import extract_block
from storage_servers import REGION


# --- redaction and locations -------------------------------------------------------------------


def test_redact_scrubs_userinfo_and_credential_values(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-xyz")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY")
    text = storage.redact(
        "s3://AKIA:pw@bucket/x failed; key AKIAEXAMPLEKEY secret s3cr3t-value-xyz; "
        "https://bucket.s3.amazonaws.com/y?X-Amz-Credential=AKIAQUERY&X-Amz-Signature=f00d failed"
    )
    assert "pw" not in text and "AKIAEXAMPLEKEY" not in text and "s3cr3t-value-xyz" not in text
    assert "AKIAQUERY" not in text and "f00d" not in text
    assert "s3://***@bucket/x" in text and "https://bucket.s3.amazonaws.com/y?*** failed" in text


@pytest.mark.parametrize(
    "location, message",
    [
        ("s3://key:secret@bucket/docs", "credentials in URIs are not accepted"),
        ("gs://bucket/docs?endpoint_override=x", "options in URIs are not accepted"),
        ("file:///docs?X-Amz-Signature=secret", "options in URIs are not accepted"),
        ("s3:///docs", "no bucket"),
    ],
)
def test_locations_with_credentials_or_options_are_refused(location, message):
    with pytest.raises(ConfigError, match=message) as e:
        storage.check_location(location)
    assert "secret" not in str(e.value)


def test_local_and_file_uris_name_the_same_files(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "s.jsonl").write_text("{}")
    (tmp_path / "skip.png").write_bytes(b"x")
    by_path, skipped = list_inputs([str(tmp_path)])
    by_uri, _ = list_inputs([f"file://{tmp_path}"])
    assert by_path == by_uri and skipped == 1
    assert [(f.uri, f.kind) for f in by_path] == [(str(tmp_path / "a.txt"), "text"), (str(tmp_path / "s.jsonl"), "jsonl")]


# --- retries -------------------------------------------------------------------------------------


def test_retrying_retries_transient_errors_and_gives_up_in_one_line(monkeypatch):
    monkeypatch.setattr(storage, "BACKOFF_SECONDS", 0.001)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("AWS Error SLOW_DOWN during GetObject operation: Please reduce your request rate.")
        return "ok"

    assert storage.retrying("read x", flaky) == "ok" and len(calls) == 3

    def down():
        raise OSError("AWS Error NETWORK_CONNECTION during GetObject\nsecond line")

    with pytest.raises(StorageError, match="still failing after 3 attempts") as e:
        storage.retrying("read x", down)
    assert "\n" not in str(e.value)

    def refused():
        calls.append(1)
        raise OSError("AWS Error ACCESS_DENIED during HeadObject operation")

    calls.clear()
    with pytest.raises(StorageError, match="check the credentials"):
        storage.retrying("read x", refused)
    assert len(calls) == 1  # permanent: not retried

    def missing():
        raise FileNotFoundError("gone")

    with pytest.raises(FileNotFoundError):
        storage.retrying("read x", missing)


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
    fs, root = storage.filesystem_for("s3://units/out")
    for i in range(5):
        storage.write_file(fs, f"{root}/f{i}", b"x" * i, f"{root}/_staging")
        assert storage.read_bytes(f"s3://units/out/f{i}") == b"x" * i
    docs = list(iter_shard("s3://units/s.jsonl", "jsonl"))
    assert [d["doc_id"] for d in docs] == [f"s3://units/s.jsonl#{i}" for i in range(300)]
    assert proxy.counts["failed"] >= 5, proxy.counts

    proxy.down = True
    with pytest.raises(StorageError, match="s3://units/s.jsonl"):
        list(iter_shard("s3://units/s.jsonl", "jsonl"))


# --- shards --------------------------------------------------------------------------------------


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
    ]
    path.write_text("\n".join(lines))
    rows = list(iter_shard(str(path), "jsonl", ShardFields(id="doc", text="body")))
    got = [(r["doc_id"].split("#")[1], r.get("error_type")) for r in rows]
    assert got == [
        ("a", None),
        ("line:3", "BadRecord"),
        ("line:4", "BadRecord"),
        ("line:5", "MissingId"),
        ("7", "NoText"),
        ("8", None),
        ("line:8", "BadRecord"),
    ]
    assert rows[0]["pages"] == ["first"]


def test_gzip_and_parquet_shards_and_broken_ones(tmp_path):
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps({"id": i, "text": f"t{i}"}) for i in range(5)))
    assert len([r for r in iter_shard(str(tmp_path / "a.jsonl.gz"), "jsonl") if "pages" in r]) == 5

    data = (tmp_path / "a.jsonl.gz").read_bytes()
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) - 12])
    rows = list(iter_shard(str(tmp_path / "cut.jsonl.gz"), "jsonl"))
    assert rows[-1]["doc_id"] == str(tmp_path / "cut.jsonl.gz") and rows[-1]["error_type"] == "CorruptShard"

    pq.write_table(pa.table({"key": ["x", None], "body": ["text x", "text y"]}), tmp_path / "p.parquet")
    rows = list(iter_shard(str(tmp_path / "p.parquet"), "parquet", ShardFields(id="key", text="body")))
    assert [(r["doc_id"].split("#")[1], r.get("error_type")) for r in rows] == [("x", None), ("row:1", "MissingId")]
    rows = list(iter_shard(str(tmp_path / "p.parquet"), "parquet"))
    assert len(rows) == 1 and rows[0]["error_type"] == "BadShard" and "no column id, text" in rows[0]["error_message"]

    (tmp_path / "fake.parquet").write_bytes(b"not parquet at all")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    assert [r["error_type"] for r in iter_shard(str(tmp_path / "fake.parquet"), "parquet")] == ["CorruptShard"]
    assert [r["error_type"] for r in iter_shard(str(tmp_path / "empty.jsonl"), "jsonl")] == ["EmptyShard"]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_shards_are_streamed_not_loaded_whole(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(shards, "READ_BUFFER", 1 << 14)
    n = 20_000
    texts = [f"document number {i}: " + "word " * 30 for i in range(n)]
    path = tmp_path / f"big.{kind}"
    if kind == "jsonl":
        path.write_text("\n".join(json.dumps({"id": i, "text": t}) for i, t in enumerate(texts)))
    else:
        pq.write_table(pa.table({"id": list(range(n)), "text": texts}), path, row_group_size=500, compression="none")
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


def test_extract_stage_streams_a_shard_in_blocks_and_counts_it_at_the_end(tmp_path, monkeypatch):
    import pipeline.stages as stages

    monkeypatch.setattr(stages, "SHARD_BLOCK", 4)
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps({"id": i, "text": f"t{i}"}) for i in range(10)))
    shard = InputFile(str(tmp_path / "s.jsonl"), "jsonl", 1)
    (block,) = work_blocks(plan_groups([shard], 64), 4)
    out = list(extract_block(block))
    assert [b.num_rows for b in out] == [4, 4, 2]
    table = pa.concat_tables(out)
    assert table.column("group_docs").to_pylist() == [None] * 9 + [10]
    assert set(table.column("group").to_pylist()) == {block.column("group")[0].as_py()}


# --- groups, parts, markers ----------------------------------------------------------------------


def files(n: int, prefix: str = "/d/f") -> list[InputFile]:
    return [InputFile(f"{prefix}{i:03d}.txt", "text", 1) for i in range(n)]


def test_groups_are_deterministic_and_depend_on_members_and_settings():
    inputs = files(10) + [InputFile("/d/s.jsonl", "jsonl", 1)]
    groups = plan_groups(inputs, 4, "fp1")
    assert [len(g.members) for g in groups] == [4, 4, 2, 1]
    assert [g.docs for g in groups] == [4, 4, 2, None]
    assert [g.id for g in plan_groups(inputs, 4, "fp1")] == [g.id for g in groups]
    assert not {g.id for g in plan_groups(inputs, 4, "fp2")} & {g.id for g in groups}
    blocks = work_blocks(groups, 3)
    assert [b.num_rows for b in blocks] == [3, 1, 3, 1, 2, 1]
    assert all(len(set(b.column("group").to_pylist())) == 1 for b in blocks)


def chunk_rows(group: str, doc: str, n: int, group_docs=None, start: int = 0, stop: int | None = None) -> list[dict]:
    return [
        {
            "doc_id": doc, "chunk_index": i, "text": f"{doc} {i}", "page_start": None, "page_end": None,
            "char_start": 0, "char_end": 1, "n_tokens": 5, "embedding": [0.5, 0.5],
            "error_stage": None, "error_type": None, "error_message": None,
            "group": group, "group_docs": group_docs, "doc_chunks": n,
        }
        for i in range(start, n if stop is None else stop)
    ]


def error_row(group: str, doc: str, group_docs=None) -> dict:
    return {
        "doc_id": doc, "chunk_index": None, "text": None, "page_start": None, "page_end": None, "char_start": None,
        "char_end": None, "n_tokens": None, "embedding": None, "error_stage": "extract", "error_type": "NoText",
        "error_message": "empty", "group": group, "group_docs": group_docs, "doc_chunks": None,
    }


SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()), ("chunk_index", pa.int32()), ("text", pa.string()), ("page_start", pa.int32()),
        ("page_end", pa.int32()), ("char_start", pa.int64()), ("char_end", pa.int64()), ("n_tokens", pa.int32()),
        ("embedding", pa.list_(pa.float32(), 2)), ("error_stage", pa.string()), ("error_type", pa.string()),
        ("error_message", pa.string()), ("group", pa.string()), ("group_docs", pa.int32()), ("doc_chunks", pa.int32()),
    ]
)
MANIFEST = {"fingerprint": "f" * 16, "model": "m", "model_fingerprint": "mf", "max_tokens": 10, "overlap": 2, "dtype": "float32"}


def write(rows: list[dict], output: str) -> list[dict]:
    return sink.write_block(pa.Table.from_pylist(rows, schema=SCHEMA), output, {"docembed.fingerprint": "f" * 16}).to_pylist()


def test_a_group_is_done_only_when_every_row_of_every_document_is_written(tmp_path):
    output = str(tmp_path / "out")
    file_group = plan_groups(files(2), 2, "s")[0]
    shard_group = plan_groups([InputFile("/d/s.jsonl", "jsonl", 1)], 2, "s")[0]
    state = resume.open_output(output, overwrite=False, manifest=MANIFEST, group_ids={file_group.id, shard_group.id})
    ledger = resume.Ledger(output, [file_group, shard_group], state)
    g, s = file_group.id, shard_group.id
    a, b = (m.uri for m in file_group.members)

    # Rows arrive split across writer calls, a later chunk before the first one, groups mixed.
    first = write(chunk_rows(g, a, 3, 2, start=1) + chunk_rows(s, "/d/s.jsonl#1", 1), output)
    assert [ledger.add(r) for r in first] == [None, None]
    second = write(chunk_rows(g, a, 3, 2, stop=1) + [error_row(g, b, 2)], output)
    marker = ledger.add(second[0])
    assert marker is not None and marker["counts"]["docs_ok"] == 1 and marker["counts"]["docs_failed"] == 1
    assert len(marker["parts"]) == 3  # two embeddings parts, one errors part
    assert ledger.add(second[0]) is None  # the same summary twice: a retried write, counted once
    # The shard's count comes with its last document.
    assert ledger.add(write(chunk_rows(s, "/d/s.jsonl#2", 2, 2, stop=1), output)[0]) is None
    assert ledger.add(write(chunk_rows(s, "/d/s.jsonl#2", 2, 2, start=1), output)[0]) is not None
    ledger.finish()
    assert ledger.documents == 4
    assert {p.name for p in (tmp_path / "out" / "_groups").iterdir()} == {f"{g}.json", f"{s}.json"}
    table = pq.read_table(tmp_path / "out" / "embeddings")
    assert sorted(zip(table["doc_id"].to_pylist(), table["chunk_index"].to_pylist())) == [
        ("/d/f000.txt", 0), ("/d/f000.txt", 1), ("/d/f000.txt", 2), ("/d/s.jsonl#1", 0), ("/d/s.jsonl#2", 0), ("/d/s.jsonl#2", 1)
    ]


def test_resume_keeps_done_groups_and_deletes_everything_else(tmp_path):
    output = str(tmp_path / "out")
    groups = plan_groups(files(4), 2, "s")
    ids = {g.id for g in groups}
    state = resume.open_output(output, overwrite=False, manifest=MANIFEST, group_ids=ids)
    ledger = resume.Ledger(output, groups, state)
    done, unfinished = groups
    for doc in done.members:
        for row in write(chunk_rows(done.id, doc.uri, 1, 2), output):
            ledger.add(row)
    write(chunk_rows(unfinished.id, unfinished.members[0].uri, 1, 2), output)  # its group never completes
    (tmp_path / "out" / "_staging" / "leftover.parquet").write_bytes(b"partial")
    stale = tmp_path / "out" / "_groups" / "0123456789abcdef0123.json"
    stale.write_text(json.dumps({"parts": [], "counts": {}}))

    state = resume.open_output(output, overwrite=False, manifest=MANIFEST, group_ids=ids)
    assert set(state.done) == {done.id} and state.dropped_parts == 1 and state.dropped_groups == 1
    parts = sorted(p.name for p in (tmp_path / "out" / "embeddings").iterdir())
    assert all(p.startswith(f"part-{done.id}-") for p in parts) and len(parts) == 2
    assert not stale.exists() and not list((tmp_path / "out" / "_staging").iterdir())

    # A marker whose part vanished is not trusted: the group is redone.
    (tmp_path / "out" / "embeddings" / parts[0]).unlink()
    state = resume.open_output(output, overwrite=False, manifest=MANIFEST, group_ids=ids)
    assert state.done == {} and not list((tmp_path / "out" / "embeddings").iterdir())

    with pytest.raises(OutputError, match="overlap 2 there, 4 now.*--overwrite"):
        resume.open_output(output, overwrite=False, manifest={**MANIFEST, "fingerprint": "g" * 16, "overlap": 4}, group_ids=ids)
    state = resume.open_output(output, overwrite=True, manifest={**MANIFEST, "fingerprint": "g" * 16}, group_ids=ids)
    assert state.done == {}
    assert json.loads((tmp_path / "out" / "_docembed.json").read_text())["fingerprint"] == "g" * 16

    sink.write_success(output, {"counts": {}})
    assert resume.open_output(output, overwrite=False, manifest=MANIFEST, group_ids=ids) is None


class _BrokenUploads(pafs.FileSystemHandler):
    """A local filesystem whose uploads write half their bytes, then fail as a dropped connection does."""

    def __init__(self):
        self.fs = pafs.LocalFileSystem()

    def __eq__(self, other):
        return isinstance(other, _BrokenUploads)

    def get_type_name(self):
        return "broken-uploads"

    def normalize_path(self, path):
        return path

    def get_file_info(self, paths):
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.fs.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise NotImplementedError

    def delete_file(self, path):
        self.fs.delete_file(path)

    def move(self, src, dest):
        self.fs.move(src, dest)

    def copy_file(self, src, dest):
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.fs.open_input_stream(path)

    def open_input_file(self, path):
        return self.fs.open_input_file(path)

    def open_append_stream(self, path, metadata):
        raise NotImplementedError

    def open_output_stream(self, path, metadata):
        target = open(path, "wb")

        class HalfThenFail(io.RawIOBase):
            def writable(self):
                return True

            def write(self, data):
                target.write(bytes(data)[: len(data) // 2])
                target.flush()
                raise OSError("connection reset while uploading")

            def close(self):
                target.close()
                super().close()

        return pa.PythonFile(HalfThenFail(), mode="w")


def test_a_failed_commit_leaves_no_file_in_place(tmp_path, monkeypatch):
    output = str(tmp_path / "out")
    resume.open_output(output, overwrite=False, manifest=MANIFEST, group_ids=set())
    monkeypatch.setattr(storage, "BACKOFF_SECONDS", 0.001)
    broken = pafs.PyFileSystem(_BrokenUploads())
    monkeypatch.setattr(sink, "filesystem_for", lambda location: (broken, str(tmp_path / "out")))
    with pytest.raises(StorageError, match="still failing after 3 attempts: connection reset"):
        write(chunk_rows("g" * 20, "/d/x.txt", 3, 1), output)
    assert not list((tmp_path / "out" / "embeddings").iterdir())
    assert not list((tmp_path / "out" / "_staging").iterdir())


# --- model directories from storage ---------------------------------------------------------------


def test_model_directory_is_fetched_once_and_refetched_when_it_changes(tmp_path, monkeypatch):
    remote = tmp_path / "remote"
    (remote / "1_Pooling").mkdir(parents=True)
    (remote / "config.json").write_text("{}")
    (remote / "1_Pooling" / "config.json").write_text("{}")
    fetches = []
    real = storage._fetch_file
    monkeypatch.setattr(storage, "_fetch_file", lambda *a: (fetches.append(a[1]), real(*a)))
    cache = tmp_path / "cache"
    local = storage.fetch_dir(f"file://{remote}", cache)
    assert (local / "1_Pooling" / "config.json").read_text() == "{}" and len(fetches) == 2
    assert storage.fetch_dir(f"file://{remote}", cache) == local and len(fetches) == 2
    (remote / "config.json").write_text('{"changed": true}')
    assert json.loads((storage.fetch_dir(f"file://{remote}", cache) / "config.json").read_text()) == {"changed": True}
    assert len(fetches) == 4
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]
