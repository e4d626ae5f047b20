"""Whole jobs from and to object storage (moto's S3 server, the GCS emulator), read back and checked.

Also: a model directory fetched from S3, transient faults injected by a proxy,
storage that stays down, and bad inputs that must fail in one line writing nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from pipeline import Embedder, JobConfig, run_job
from pipeline.errors import StorageError
from pipeline.io.filesystems import filesystem_for, list_files
from pipeline.results import embedding_matrix, nearest, read_errors, read_report, read_table, search

from stored_corpus import expected_docs, upload
from support import REPO, assert_no_secrets, ray_log_files, recorded_members

GROUP = 4  # files per commit group: the corpus makes several


@pytest.fixture(scope="module")
def stores(servers, storage_ray, corpus, tmp_path_factory):
    """The corpus in s3://jobs-in and gs://jobs-in, the default model in s3://models, and a local reference run."""
    from pipeline.encode.model_location import default_model_dir

    for scheme in ("s3", "gs"):
        servers.make_bucket(scheme, "jobs-in")
        servers.make_bucket(scheme, "jobs-out")
        upload(corpus, f"{scheme}://jobs-in/corpus")
    for scheme in ("s3", "gs"):
        servers.make_bucket(scheme, "models")
        upload(default_model_dir(), f"{scheme}://models/minilm")
    local_out = tmp_path_factory.mktemp("reference") / "out"
    run_job(JobConfig(inputs=(str(corpus),), output=str(local_out), overlap=16, group_size=GROUP))
    return {"reference": read_table(str(local_out)), "reference_errors": read_errors(str(local_out)), "corpus": corpus}


def keys(table) -> list[tuple[str, int]]:
    return list(zip(table.column("doc_id").to_pylist(), table.column("chunk_index").to_pylist()))


def check_output(output: str, base: str, reference, corpus) -> None:
    """Exactly once, readable, and the same chunks and embeddings as the local run of the same corpus."""
    fs, root = filesystem_for(output)
    for info in list_files(fs, root):
        if info.path.endswith(".parquet"):
            pq.read_table(info.path, filesystem=fs)  # every part readable
    # Nothing staged is left, nor the staging directory's marker object (S3).
    assert fs.get_file_info(f"{root}/_staging").type == pafs.FileType.NotFound
    chunks, errors = read_table(output), read_errors(output)
    ok, failed = expected_docs(base)
    assert len(set(keys(chunks))) == chunks.num_rows, "duplicate (doc_id, chunk_index)"
    assert set(chunks.column("doc_id").to_pylist()) == ok
    assert sorted(errors.column("doc_id").to_pylist()) == sorted(failed)
    report = read_report(output)
    assert report["counts"]["docs_ok"] == len(ok) and report["counts"]["docs_failed"] == len(failed)
    assert report["counts"]["chunks"] == chunks.num_rows

    local = str(corpus)
    ref_keys = [(d.replace(local, base, 1), c) for d, c in keys(reference)]
    assert keys(chunks) == ref_keys  # both sorted by (doc_id, chunk_index); the prefix sorts the same
    np.testing.assert_allclose(embedding_matrix(chunks), embedding_matrix(reference), atol=2e-5)
    assert chunks.column("text").to_pylist() == reference.column("text").to_pylist()
    query_D = embedding_matrix(chunks)[0]  # `docembed search`'s read, part by part from the store
    assert search(output, query_D, k=5).equals(nearest(chunks, query_D, k=5))


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_object_store_job_end_to_end_through_transient_faults(stores, servers, scheme):
    """The corpus and the model read from the store, the output written there, while 10% of requests fail with 503
    (SlowDown on S3; 2.5% on GCS, where each costs google-cloud-cpp's back-off of a second or more) and 10% are
    slowed: the output is the local run's. The proxy's faults are seeded: at 2.5%, 6 of the first 100 requests
    fail and 12 of the 450 a run makes (at 5%, 28 cost the run 35 s). One run checks both, as a fault-free one
    would only check less."""
    base, output, model = f"{scheme}://jobs-in/corpus", f"{scheme}://jobs-out/run", f"{scheme}://models/minilm"
    proxy = servers.proxies[scheme]
    proxy.reset()
    proxy.fail_rate, proxy.slow_rate, proxy.slow_seconds = {"s3": 0.1, "gs": 0.025}[scheme], 0.1, 0.2
    try:
        report = run_job(JobConfig(inputs=(base,), output=output, overlap=16, group_size=GROUP, model=model))
        assert proxy.counts["failed"] >= 5, proxy.counts
    finally:
        proxy.reset()
    assert report.inputs == 23 + 4 and report.skipped == 1  # 23 single documents, 4 shards; NOTICE skipped
    check_output(output, base, stores["reference"], stores["corpus"])
    success = read_report(output)
    assert success["model"]["id"] == model
    assert success["output"]["groups"] == 6 + 4 and success["output"]["groups_resumed"] == 0
    fs, root = filesystem_for(output)
    part = next(i.path for i in list_files(fs, f"{root}/embeddings"))
    metadata = pq.read_schema(part, filesystem=fs).metadata
    assert metadata[b"docembed.fingerprint"].decode() == success["output"]["fingerprint"]

    # A finished output: a rerun does nothing.
    assert run_job(JobConfig(inputs=(base,), output=output, overlap=16, group_size=GROUP, model=model)) is None


def test_model_directory_from_s3_is_fetched_once_and_reused(stores, servers, tmp_path):
    import os

    cache = tmp_path / "cache"
    os.environ["DOCEMBED_MODEL_CACHE"] = str(cache)  # this process only; the module's Ray has its own
    try:
        servers.proxies["s3"].reset()
        first = Embedder.load("s3://models/minilm")
        fetched = servers.proxies["s3"].counts["requests"]
        (copy,) = [p for p in cache.iterdir() if p.is_dir()]
        stamps = {p: p.stat().st_mtime_ns for p in copy.rglob("*")}
        second = Embedder.load("s3://models/minilm")
        assert servers.proxies["s3"].counts["requests"] - fetched <= 2  # a listing to check the copy, no download
        assert {p: p.stat().st_mtime_ns for p in copy.rglob("*")} == stamps
    finally:
        del os.environ["DOCEMBED_MODEL_CACHE"]
    text = ["Object storage keeps each file as a whole object."]
    np.testing.assert_allclose(first.embed(text), Embedder.load().embed(text), atol=1e-6)
    assert first.encoder.spec.model_id == "s3://models/minilm"
    np.testing.assert_allclose(second.embed(text), first.embed(text), atol=1e-6)


def test_storage_down_fails_loudly_then_resume_completes(stores, servers, storage_ray):
    """S3 goes down as the listing's record is finished, then, on the rerun, once the first part is committed.
    Each CLI run, a process of its own so that its stderr is what a terminal shows, fails in one line (Ray Data's
    records of the failure, a read task's traceback among them, stay in its log file) and marks nothing done;
    a third run finishes."""
    base, output = "s3://jobs-in/corpus", "s3://jobs-out/down"
    command = [sys.executable, "jobs/embed.py", "--input", base, "--output", output, "--overlap", "16"]
    command += ["--group-size", str(GROUP), "--quiet"]
    proxy = servers.proxies["s3"]
    proxy.reset()
    for when in ("down/_inputs/_LISTED.json", "down/embeddings/"):
        stop = threading.Event()

        def take_down_when_written(prefix=when, stop=stop):
            while not stop.is_set():
                if servers.s3.list_objects_v2(Bucket="jobs-out", Prefix=prefix).get("KeyCount", 0):
                    proxy.down = True
                    return
                time.sleep(0.05)

        watcher = threading.Thread(target=take_down_when_written, daemon=True)
        watcher.start()
        started = time.time()
        try:
            # One attempt per request in the driver's AWS SDK (the module's Ray workers keep their 7): its failure
            # comes in 12 s, not 18.
            env = {**os.environ, "RAY_ADDRESS": storage_ray, "AWS_MAX_ATTEMPTS": "1"}
            run = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
        finally:
            stop.set()
            watcher.join()
            proxy.reset()
        assert run.returncode == 2 and time.time() - started < 120, run.stderr[-3000:]
        lines = run.stderr.strip().splitlines()
        # Storage goes down as the driver finishes writing the listing's record, or as the read task reads it back:
        # the failure is the one or the other, one line either way.
        assert len(lines) == 1 and lines[0].startswith("docembed: error: "), run.stderr[-3000:]
        assert "cannot read s3://jobs-out/down/" in lines[0] or "cannot write s3://jobs-out/down/" in lines[0]
        assert "SLOW_DOWN" in lines[0] or "503" in lines[0], lines[0]
        assert lines[0].endswith("(groups finished so far are kept: rerun the same command to resume)"), lines[0]
        listed = servers.s3.list_objects_v2(Bucket="jobs-out", Prefix="down/")
        assert "down/_SUCCESS" not in [o["Key"] for o in listed.get("Contents", [])]
        assert_markers_hold_their_data(output)

    report = run_job(JobConfig(inputs=(base,), output=output, overlap=16, group_size=GROUP))
    assert report is not None
    check_output(output, base, stores["reference"], stores["corpus"])


def test_a_listing_failing_midway_fails_in_one_line_then_the_rerun_completes(stores, servers, monkeypatch, tmp_path):
    """S3 stops answering listings after the job's first two pages: one line, nothing marked done; a rerun
    continues the recorded part of the listing and finishes with every document once. (The output is local:
    the proxy fails every listing after the limit, and the output's own bookkeeping lists too.)"""
    import functools

    import pipeline.run.job as job
    from pipeline.io import filesystems, listing, object_listing, retries

    base, output = "s3://jobs-in/corpus", str(tmp_path / "out")
    proxy = servers.proxies["s3"]
    proxy.reset()
    monkeypatch.setattr(job, "list_pages", functools.partial(listing.list_pages, page_size=3))
    # Each failing page is still retried by `retrying`; the AWS SDK's own retries of it (backing off up to
    # 20 s each) would only add minutes. A fresh client cache, so the one-attempt client ends with the test.
    monkeypatch.setattr(retries, "BACKOFF_SECONDS", 0.01)
    monkeypatch.setattr(filesystems, "S3_RETRIES", 1)
    monkeypatch.setattr(object_listing, "_s3_client", functools.lru_cache(object_listing._s3_client.__wrapped__))
    check = job._listing_with_documents

    def check_then_fail_listings_after_two_more(locations, output):
        pages = check(locations, output)  # the job's look for a first document, before Ray starts
        proxy.list_limit = proxy.counts["listings"] + 2
        return pages

    monkeypatch.setattr(job, "_listing_with_documents", check_then_fail_listings_after_two_more)
    try:
        with pytest.raises(StorageError) as failure:
            run_job(JobConfig(inputs=(base,), output=output, overlap=16, group_size=GROUP))
    finally:
        monkeypatch.setattr(job, "_listing_with_documents", check)
        proxy.reset()
    message = str(failure.value)
    assert "\n" not in message and "cannot list" in message and "rerun" in message, message
    fs, root = filesystem_for(output)
    names = {i.path[len(root) + 1 :] for i in list_files(fs, root)}
    assert "_SUCCESS" not in names and "_inputs/_LISTED.json" not in names
    assert_markers_hold_their_data(output)

    run_job(JobConfig(inputs=(base,), output=output, overlap=16, group_size=GROUP))
    check_output(output, base, stores["reference"], stores["corpus"])


def assert_markers_hold_their_data(output: str) -> None:
    """Every done-marker's parts exist, are readable, and hold whole documents of its members only."""
    import json

    from pipeline.io.filesystems import read_file

    fs, root = filesystem_for(output)
    markers = list_files(fs, f"{root}/_groups")
    recorded = recorded_members(fs, root) if markers else {}
    for info in markers:
        marker = json.loads(read_file(fs, info.path))
        docs = set()
        for part in marker["parts"]:
            table = pq.read_table(f"{root}/{part}", filesystem=fs)
            docs |= set(table.column("doc_id").to_pylist())
        counts = marker["counts"]
        assert len(docs) == counts["docs_ok"] + counts["docs_failed"]
        members = recorded[marker["group"]]
        assert all(d in members or d.split("#", 1)[0] in members for d in docs)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    from jobs.embed import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def objects_under(servers, scheme: str, bucket: str, prefix: str) -> list[str]:
    fs, root = filesystem_for(f"{scheme}://{bucket}/{prefix}")
    return [i.path for i in list_files(fs, root)]


@pytest.mark.parametrize(
    "scheme, inputs, output, message",
    [
        ("s3", "s3://no-such-bucket/docs", "bad-1", "does not exist (there is no bucket no-such-bucket)"),
        ("s3", "s3://jobs-in/no/such/prefix", "bad-2", "input s3://jobs-in/no/such/prefix does not exist"),
        ("s3", "s3://jobs-in/images", "bad-3", "no documents"),
        ("gs", "gs://no-such-bucket/docs", "bad-4", "does not exist (there is no bucket no-such-bucket)"),
        ("gs", "gs://jobs-in/corpus/samples", "gs://no-such-out/x", "is not writable: there is no bucket no-such-out"),
        ("s3", "s3://jobs-in/corpus/samples", "s3://no-such-out/x", "is not writable: there is no bucket no-such-out"),
        ("s3", "s3://AKIAINURI:uri-secret-value@jobs-in/corpus", "bad-7", "credentials in URIs are not accepted"),
    ],
)
def test_bad_inputs_fail_in_one_line_writing_nothing(stores, servers, capsys, scheme, inputs, output, message):
    if scheme == "s3" and "images" in inputs:
        servers.s3.put_object(Bucket="jobs-in", Key="images/picture.png", Body=b"\x89PNG")
    out_uri = output if "://" in output else f"{scheme}://jobs-out/{output}"
    code, out, err = run_cli(capsys, "--input", inputs, "--output", out_uri)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("docembed: error: "), err
    assert message in lines[0]
    assert "uri-secret-value" not in err + out
    if "://" not in output:
        assert objects_under(servers, scheme, "jobs-out", output) == []


def test_wrong_credentials_fail_in_one_line_without_showing_them(stores, servers, capsys, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-0123456789")
    code, out, err = run_cli(capsys, "--input", "s3://jobs-in/corpus", "--output", "s3://jobs-out/bad-creds")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("docembed: error: input s3://jobs-in/corpus"), err
    assert "check the credentials" in lines[0]
    assert "AKIAWRONGWRONGWRONG1" not in err + out and "wrong-secret-0123456789" not in err + out
    monkeypatch.undo()
    assert objects_under(servers, "s3", "jobs-out", "bad-creds") == []


def test_credentials_appear_in_no_output_and_no_log(stores, servers, capfd):
    """A CLI job's stdout and stderr, every object in the output buckets, and Ray's logs hold no credential."""
    from jobs.embed import main

    assert main(["--input", "s3://jobs-in/corpus/notes", "--output", "s3://jobs-out/creds-check"]) == 0
    out, err = capfd.readouterr()
    assert "12 inputs" in out
    secrets = [servers.creds["AWS_ACCESS_KEY_ID"], servers.creds["AWS_SECRET_ACCESS_KEY"]]
    assert not any(s in out + err for s in secrets)
    blobs = []
    for scheme in ("s3", "gs"):
        fs, _ = filesystem_for(f"{scheme}://jobs-out")
        for info in list_files(fs, "jobs-out"):
            with fs.open_input_stream(info.path) as f:
                blobs.append((info.path, f.read()))
    blobs += [(str(p), p.read_bytes()) for p in ray_log_files()]
    assert assert_no_secrets(secrets, blobs) > 10
