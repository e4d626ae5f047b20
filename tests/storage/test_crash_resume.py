"""Crash and resume: the driver is SIGKILLed at several points, then rerun; on S3, GCS and local files.

Each driver is a real process (`jobs/embed.py`'s `main`) connected to this module's
Ray, as a `ray job submit` driver is to its cluster; it is killed with SIGKILL
when the output reaches a chosen state, or kills itself right after it marks a
group done or records a part of the listing (`crash_driver.py`). After every kill the output must hold no
partial or unreadable Parquet file and no marker without its data; the next run
resumes; the last one must match a clean run of the same corpus exactly.

The drivers run with small encoder calls so that this small corpus is committed
in many steps and each kill point falls inside the run.
Every store: an object store commits a part with one upload, a local directory by
a rename out of `_staging/`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline import JobConfig, run_job
from pipeline.io.filesystems import filesystem_for, list_files, read_file
from pipeline.io.uris import doc_id_of
from pipeline.kinds import SHARD_KINDS, kind_of
from pipeline.results import read_errors, read_report, read_table

from stored_corpus import REPO, expected_docs, upload
from support import recorded_members, wait_for_idle_cluster

GROUP = 2
ARGS = ["--overlap", "16", "--group-size", str(GROUP)]
DRIVER = Path(__file__).with_name("crash_driver.py")


@pytest.fixture(scope="module", params=["s3", "gs", "local"])
def place(request, servers, storage_ray, corpus, tmp_path_factory) -> tuple[str, str]:
    """(the corpus's location, a folder for outputs) on one store."""
    if request.param == "local":
        return str(corpus), str(tmp_path_factory.mktemp("crash-out"))
    scheme = request.param
    for bucket in ("crash-in", "crash-out"):
        servers.make_bucket(scheme, bucket)
    upload(corpus, f"{scheme}://crash-in/corpus")
    return f"{scheme}://crash-in/corpus", f"{scheme}://crash-out"


@pytest.fixture(scope="module")
def clean(storage_ray, corpus, tmp_path_factory):
    """A clean run over the local corpus: what every store's resumed run must match, its doc_ids on that store.

    One for all stores: a store changes only the doc_ids' prefix (test_object_store_jobs checks that much)."""
    output = str(tmp_path_factory.mktemp("crash-clean") / "out")
    run_job(JobConfig(inputs=(str(corpus),), output=output, overlap=16, group_size=GROUP))
    return read_table(output), read_errors(output)


def state(output: str) -> dict:
    fs, root = filesystem_for(output)
    names = [info.path[len(root) + 1 :] for info in list_files(fs, root)]
    return {
        "manifest": "_docembed.json" in names,
        "parts": sum(n.startswith("embeddings/") for n in names),
        "markers": sum(n.startswith("_groups/") for n in names),
        "inputs_parts": sum(n.startswith("_inputs/part-") for n in names),
        "listed": "_inputs/_LISTED.json" in names,
        "success": "_SUCCESS" in names,
    }


def settle(output: str, quiet: float = 1.0, timeout: float = 30) -> None:
    """Until the output's listing has not changed for `quiet` seconds: a request the killed driver sent whole
    (a marker's or a part's upload from its writing threads) may still be landing at the store's server."""
    deadline = time.time() + timeout
    last, since = state(output), time.time()
    while time.time() - since < quiet:
        assert time.time() < deadline, f"the output still changes {timeout} s after the kill: {last}"
        time.sleep(0.1)
        now = state(output)
        if now != last:
            last, since = now, time.time()


def check_crashed_output(output: str) -> int:
    """No _SUCCESS, every Parquet file a reader sees readable, every marker's parts whole; returns the markers' count.

    `_staging/` is never read: a local write killed there may leave a partial file.
    """
    fs, root = filesystem_for(output)
    for info in list_files(fs, root):
        if info.path.endswith(".parquet") and "/_staging/" not in info.path:
            pq.read_table(info.path, filesystem=fs)
    assert not any(i.path.endswith("/_SUCCESS") for i in list_files(fs, root))
    markers = list_files(fs, f"{root}/_groups")
    recorded = recorded_members(fs, root) if markers else {}
    for info in markers:
        marker = json.loads(read_file(fs, info.path))
        docs = set()
        for part in marker["parts"]:
            docs |= set(pq.read_table(f"{root}/{part}", filesystem=fs).column("doc_id").to_pylist())
        counts = marker["counts"]
        assert len(docs) == counts["docs_ok"] + counts["docs_failed"], marker
        members = recorded[marker["group"]]
        assert {d.split("#", 1)[0] for d in docs} <= {doc_id_of(m) for m in members}
        if not any(kind_of(m) in SHARD_KINDS for m in members):
            assert docs == {doc_id_of(m) for m in members}  # a file group is done only with every member
    return len(markers)


def test_sigkill_at_several_points_then_resume(storage_ray, place, clean, corpus, tmp_path, capsys):
    source, outputs = place
    output = f"{outputs}/killed"
    groups = -(-23 // GROUP) + 4  # 23 single-document files in runs of GROUP, and 4 shards
    # A point is reached when the output shows it (the test kills the driver), or the driver kills itself
    # there (crash_driver.py).
    kill_points = [
        ("the listing is recorded in part", {"DOCEMBED_TEST_DIE_AFTER_PART": "1"}),  # the fingerprint is written
        ("the first part is committed", lambda s: s["parts"] >= 1),
        ("a group is marked done", {"DOCEMBED_TEST_DIE_AFTER_MARKER": "1"}),
    ]
    env = {**os.environ, "RAY_ADDRESS": storage_ray}
    markers_seen = []
    for i, (name, reached) in enumerate(kill_points):
        log = tmp_path / f"driver-{i}.log"
        with open(log, "wb") as sink:
            driver = subprocess.Popen(
                [sys.executable, str(DRIVER), "--input", source, "--output", output, *ARGS],
                env={**env, **reached} if isinstance(reached, dict) else env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
            if isinstance(reached, dict):
                driver.wait(timeout=180)
            else:
                deadline = time.time() + 180
                while not reached(state(output)) and driver.poll() is None and time.time() < deadline:
                    time.sleep(0.03)
                driver.send_signal(signal.SIGKILL)
                driver.wait()
        assert driver.returncode == -signal.SIGKILL, f"the driver ended before {name}: {log.read_text()[-3000:]}"
        wait_for_idle_cluster()
        settle(output)
        markers_seen.append(check_crashed_output(output))
        if name == "the listing is recorded in part":
            recorded = state(output)
            assert recorded["manifest"] and recorded["inputs_parts"] == 2 and not recorded["listed"], recorded
        if i:
            assert "resuming" in log.read_text() or markers_seen[i - 1] == 0
    assert markers_seen[-1] > markers_seen[-2]

    # Resuming with other chunking settings is refused; nothing changes.
    from jobs.embed import main

    assert main(["--input", source, "--output", output, "--overlap", "8", "--group-size", str(GROUP)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("docembed: error:") and "unfinished run made with other settings" in err and "\n" not in err
    assert check_crashed_output(output) == markers_seen[-1]

    report = run_job(JobConfig(inputs=(source,), output=output, overlap=16, group_size=GROUP))
    success = read_report(output)
    assert success["output"]["groups_resumed"] == markers_seen[-1] and success["output"]["groups"] == groups
    assert (
        report.docs_ok + report.docs_failed == success["output"]["documents"] == len(set.union(*expected_docs(source)))
    )

    chunks, errors = read_table(output), read_errors(output)
    keys = list(zip(chunks.column("doc_id").to_pylist(), chunks.column("chunk_index").to_pylist()))
    clean_chunks, clean_errors = clean
    clean_ids = [d.replace(str(corpus), source, 1) for d in clean_chunks.column("doc_id").to_pylist()]
    clean_keys = list(zip(clean_ids, clean_chunks.column("chunk_index").to_pylist()))
    # Both sorted by (doc_id, chunk_index): the store's prefix sorts the same as the local one.
    assert len(keys) == len(set(keys)) and keys == clean_keys
    clean_failed = [d.replace(str(corpus), source, 1) for d in clean_errors.column("doc_id").to_pylist()]
    assert errors.column("doc_id").to_pylist() == clean_failed
    ok, failed = expected_docs(source)
    assert set(chunks.column("doc_id").to_pylist()) == ok and set(errors.column("doc_id").to_pylist()) == failed
    fs, root = filesystem_for(output)
    for info in list_files(fs, root):
        if info.path.endswith(".parquet"):
            pq.read_table(info.path, filesystem=fs)
    assert success["counts"]["chunks"] == chunks.num_rows == clean_chunks.num_rows
