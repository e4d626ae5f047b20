"""Exactly once, without Ray: the sink's parts, the ledger's markers, and what a rerun keeps (sink, ledger, resume)."""

from __future__ import annotations

import io
import json
import threading
import time

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from pipeline.errors import OutputError, StorageError
from pipeline.io import filesystems as storage
from pipeline.io import retries
from pipeline.io.filesystems import filesystem_for
from pipeline.output import files, inputs, resume, sink
from pipeline.output.fingerprint import same_run
from pipeline.output.groups import record_groups
from pipeline.output.ledger import Ledger
from pipeline.schemas import SUMMARY_SCHEMA

from support import MANIFEST, keeping, listing, text_files, write_after


def chunk_rows(group: str, doc: str, n: int, group_docs=None, start: int = 0, stop: int | None = None) -> list[dict]:
    return [
        {
            "doc_id": doc,
            "chunk_index": i,
            "text": f"{doc} {i}",
            "page_start": None,
            "page_end": None,
            "char_start": 0,
            "char_end": 1,
            "n_tokens": 5,
            "embedding": [0.5, 0.5],
            "error_stage": None,
            "error_type": None,
            "error_message": None,
            "group": group,
            "group_docs": group_docs,
            "doc_chunks": n,
        }
        for i in range(start, n if stop is None else stop)
    ]


def error_row(group: str, doc: str, group_docs=None) -> dict:
    return {
        "doc_id": doc,
        "chunk_index": None,
        "text": None,
        "page_start": None,
        "page_end": None,
        "char_start": None,
        "char_end": None,
        "n_tokens": None,
        "embedding": None,
        "error_stage": "extract",
        "error_type": "NoText",
        "error_message": "empty",
        "group": group,
        "group_docs": group_docs,
        "doc_chunks": None,
    }


SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("chunk_index", pa.int32()),
        ("text", pa.string()),
        ("page_start", pa.int32()),
        ("page_end", pa.int32()),
        ("char_start", pa.int64()),
        ("char_end", pa.int64()),
        ("n_tokens", pa.int32()),
        ("embedding", pa.list_(pa.float32(), 2)),
        ("error_stage", pa.string()),
        ("error_type", pa.string()),
        ("error_message", pa.string()),
        ("group", pa.string()),
        ("group_docs", pa.int32()),
        ("doc_chunks", pa.int32()),
    ]
)


def write(rows: list[dict], output: str) -> list[dict]:
    return sink.write_block(pa.Table.from_pylist(rows, schema=SCHEMA), output, {"docembed.fingerprint": "f" * 16})


def record(output: str, uris: list[str], group_size: int) -> dict[str, list[str]]:
    """Records `uris` as the output's whole listing; returns each group's members."""
    recorded = record_groups(listing(uris), group_size, "s")
    fs, root = filesystem_for(output)
    inputs.write_part(fs, root, 0, recorded, skipped=3, group_size=group_size)
    inputs.write_listed(fs, root, parts=1, inputs=recorded.num_rows, skipped=3)
    groups: dict[str, list[str]] = {}
    for uri, group in zip(recorded.column("uri").to_pylist(), recorded.column("group").to_pylist()):
        groups.setdefault(group, []).append(uri)
    return groups


def opened(output: str) -> tuple[resume.Resume, Ledger]:
    state = resume.open_output(output, overwrite=False, manifest=MANIFEST)
    ledger = Ledger(output, state)
    ledger.expect(state.record.groups)
    return state, ledger


def test_the_writer_sends_its_summaries_and_its_block_leaves_empty(tmp_path):
    # The job's driver takes the summaries from the run's coordinator and reads no block (sink.WriteBlock).
    output = str(tmp_path / "out")
    resume.open_output(output, overwrite=False, manifest=MANIFEST)
    sent, increments = [], []
    writer = sink.WriteBlock(output, {"docembed.fingerprint": "f" * 16}, increments.append, sent.extend)
    rows = chunk_rows("g1", "/d/a.txt", 2, 1) + chunk_rows("g2", "/d/b.txt", 1, 1)
    block = writer(pa.Table.from_pylist(rows, schema=SCHEMA))
    assert block.num_rows == 0 and block.schema == SUMMARY_SCHEMA
    assert {s["group"]: (s["rows"], len(s["parts"])) for s in sent} == {"g1": (2, 1), "g2": (1, 1)}
    assert pa.Table.from_pylist(sent, schema=SUMMARY_SCHEMA).to_pylist() == sent  # rows of the summary schema
    assert increments and all(i.stages for i in increments)  # the write's time goes to the tally too


def test_a_group_is_done_only_when_every_row_of_every_document_is_written(tmp_path):
    output = str(tmp_path / "out")
    resume.open_output(output, overwrite=False, manifest=MANIFEST)
    groups = record(output, ["/d/f000.txt", "/d/f001.txt", "/d/s.jsonl"], 2)
    _, ledger = opened(output)
    (g, (a, b)), (s, _) = groups.items()

    # Rows arrive split across writer calls, a later chunk before the first one, groups mixed.
    markers = []
    first = write(chunk_rows(g, a, 3, 2, start=1) + chunk_rows(s, "/d/s.jsonl#1", 1), output)
    assert ledger.add(first, keeping(markers)) == first
    ledger.landed()
    assert markers == [] and ledger.done == 0
    second = write(chunk_rows(g, a, 3, 2, stop=1) + [error_row(g, b, 2)], output)
    assert ledger.add(second[:1], keeping(markers)) == second[:1]
    ledger.landed()
    [marker] = markers
    assert marker["counts"]["docs_ok"] == 1 and marker["counts"]["docs_failed"] == 1
    assert len(marker["parts"]) == 3  # two embeddings parts, one errors part
    assert (tmp_path / "out" / "_groups" / f"{g}.json").exists() and ledger.done == 1
    # The same summaries again: a retried write, counted once, in the ledger and in what it hands the report.
    assert ledger.add(second[:1], keeping(markers)) == [] and ledger.add(first, keeping(markers)) == []
    # The shard's count comes with its last document.
    ledger.add(write(chunk_rows(s, "/d/s.jsonl#2", 2, 2, stop=1), output)[:1], keeping(markers))
    ledger.landed()
    assert len(markers) == 1
    ledger.add(write(chunk_rows(s, "/d/s.jsonl#2", 2, 2, start=1), output)[:1], keeping(markers))
    ledger.landed()
    assert len(markers) == 2 and ledger.done == 2 and ledger.todo == 0
    ledger.finish()
    assert ledger.documents == 4
    assert {p.name for p in (tmp_path / "out" / "_groups").iterdir()} == {f"{g}.json", f"{s}.json"}
    table = pq.read_table(tmp_path / "out" / "embeddings")
    assert sorted(zip(table["doc_id"].to_pylist(), table["chunk_index"].to_pylist())) == [
        ("/d/f000.txt", 0),
        ("/d/f000.txt", 1),
        ("/d/f000.txt", 2),
        ("/d/s.jsonl#1", 0),
        ("/d/s.jsonl#2", 0),
        ("/d/s.jsonl#2", 1),
    ]


def complete_groups(output: str, count: int) -> tuple[Ledger, list[dict]]:
    """`count` recorded groups of one file each, and one writer summary that completes each."""
    resume.open_output(output, overwrite=False, manifest=MANIFEST)
    groups = record(output, text_files(count), 1)
    _, ledger = opened(output)
    return ledger, [s for g, (doc,) in groups.items() for s in write(chunk_rows(g, doc, 1, 1), output)]


def test_markers_are_written_side_by_side_and_each_group_is_done_once_its_marker_lands(tmp_path, monkeypatch):
    # On an object store a marker is a few requests of its latency: one at a time they would cap the commits.
    output = str(tmp_path / "out")
    ledger, summaries = complete_groups(output, 3)
    together = threading.Barrier(3, timeout=10)  # passes only with three markers in flight at once
    landing = threading.Event()
    write_after(monkeypatch, lambda: (together.wait(), landing.wait(30)))
    landed = []
    assert ledger.add(summaries, lambda marker, done: landed.append((marker["group"], done))) == summaries
    time.sleep(0.2)
    assert (landed, ledger.done, ledger.todo) == ([], 0, 3)  # complete, not done: no marker has landed
    landing.set()
    ledger.landed()
    assert sorted(group for group, _ in landed) == sorted(s["group"] for s in summaries)
    assert sorted(done for _, done in landed) == [1, 2, 3]  # each with the groups done once it had landed
    assert (ledger.done, ledger.todo) == (3, 0)
    ledger.finish()
    assert len(resume.open_output(output, overwrite=False, manifest=MANIFEST).done) == 3


def test_a_marker_that_does_not_land_fails_the_run_and_its_group_is_redone(tmp_path, monkeypatch):
    output = str(tmp_path / "out")
    ledger, summaries = complete_groups(output, 3)
    lost = summaries[1]["group"]
    real_write = storage.write_file

    def write_file(fs, path, data, staging):
        if lost in path:
            raise StorageError("output: still failing after 6 attempts: SlowDown")
        real_write(fs, path, data, staging)

    monkeypatch.setattr(storage, "write_file", write_file)
    markers = []
    ledger.add(summaries, keeping(markers))
    with pytest.raises(StorageError, match="SlowDown"):
        ledger.landed()
    assert len(markers) == ledger.done == 2 and lost not in {m["group"] for m in markers}
    with pytest.raises(StorageError, match="SlowDown"):  # the driver's next block meets it too
        ledger.add([], keeping(markers))
    with pytest.raises(StorageError, match="SlowDown"):
        ledger.finish()
    assert set(resume.open_output(output, overwrite=False, manifest=MANIFEST).done) == {
        s["group"] for s in summaries
    } - {lost}


def test_a_stopped_run_waits_for_the_markers_being_written_and_drops_the_rest(tmp_path, monkeypatch):
    # Ctrl-C or a failure: no marker may land once the run has let go of its output, nor tell its stopped read.
    monkeypatch.setattr(files, "IN_FLIGHT", 2)
    output = str(tmp_path / "out")
    ledger, summaries = complete_groups(output, 3)
    writing, go_on = threading.Semaphore(0), threading.Event()
    write_after(monkeypatch, lambda: (writing.release(), go_on.wait(30)))
    markers = []
    ledger.add(summaries, keeping(markers))
    assert writing.acquire(timeout=10) and writing.acquire(timeout=10)  # two being written, the third queued
    closing = threading.Thread(target=ledger.close)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive()  # it waits for the two being written
    go_on.set()
    closing.join(10)
    assert not closing.is_alive() and markers == []
    assert len(list((tmp_path / "out" / "_groups").iterdir())) == 2  # the queued one was never written


def test_committed_parts_gone_at_the_end_are_one_output_error_and_the_rerun_redoes_their_group(tmp_path):
    # What a second run's --overwrite on an object store, where two runs are not detected, does to the first.
    output = str(tmp_path / "out")
    resume.open_output(output, overwrite=False, manifest=MANIFEST)
    ((group, members),) = record(output, text_files(2), 2).items()
    _, ledger = opened(output)
    for doc in members:
        ledger.add(write(chunk_rows(group, doc, 1, 2), output))
    for part in (tmp_path / "out" / "embeddings").iterdir():
        part.unlink()
    with pytest.raises(OutputError, match=r"2 parts of committed groups are gone .*rerun the same command to redo"):
        ledger.finish()
    assert set(resume.open_output(output, overwrite=False, manifest=MANIFEST).done) == set()


def test_an_output_whose_run_folders_hold_files_but_no_fingerprint_is_refused_untouched(tmp_path):
    # Someone's own folder named embeddings/: without a fingerprint no run wrote it, and a run would clear it.
    (tmp_path / "out" / "embeddings").mkdir(parents=True)
    (tmp_path / "out" / "embeddings" / "my_notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="holds embeddings/ but no _docembed.json: not a docembed output"):
        resume.open_output(str(tmp_path / "out"), overwrite=False, manifest=MANIFEST)
    assert (tmp_path / "out" / "embeddings" / "my_notes.txt").read_text() == "mine"
    (tmp_path / "empty" / "_groups").mkdir(parents=True)  # what a run leaves that stopped before its fingerprint
    assert resume.open_output(str(tmp_path / "empty"), overwrite=False, manifest=MANIFEST).done == {}


def test_resume_keeps_done_groups_and_deletes_everything_else(tmp_path):
    output = str(tmp_path / "out")
    resume.open_output(output, overwrite=False, manifest=MANIFEST)
    (done, members), (unfinished, others) = record(output, text_files(4), 2).items()
    _, ledger = opened(output)
    for doc in members:
        ledger.add(write(chunk_rows(done, doc, 1, 2), output))
    ledger.landed()
    write(chunk_rows(unfinished, others[0], 1, 2), output)  # its group never completes
    (tmp_path / "out" / "_staging" / "leftover.parquet").write_bytes(b"partial")
    stale = tmp_path / "out" / "_groups" / "0123456789abcdef0123.json"
    stale.write_text(json.dumps({"parts": [], "counts": {}}))

    state = resume.open_output(output, overwrite=False, manifest=MANIFEST)
    assert set(state.done) == {done} and state.dropped_parts == 1 and state.dropped_groups == 1
    assert state.record.complete and state.record.inputs == 4 and set(state.record.groups) == {done, unfinished}
    assert state.record.skipped == 3 and state.record.last_uri == text_files(4)[-1]
    parts = sorted(p.name for p in (tmp_path / "out" / "embeddings").iterdir())
    assert all(p.startswith(f"part-{done}-") for p in parts) and len(parts) == 2
    assert not stale.exists() and not list((tmp_path / "out" / "_staging").iterdir())

    # A marker whose part vanished is not trusted: the group is redone.
    (tmp_path / "out" / "embeddings" / parts[0]).unlink()
    state = resume.open_output(output, overwrite=False, manifest=MANIFEST)
    assert state.done == {} and not list((tmp_path / "out" / "embeddings").iterdir())

    with pytest.raises(OutputError, match="overlap 2 there, 4 now.*--overwrite"):
        resume.open_output(output, overwrite=False, manifest={**MANIFEST, "fingerprint": "g" * 16, "overlap": 4})
    # Other inputs make the same numbers, but resuming would finish this output's recorded listing instead.
    with pytest.raises(OutputError, match=r"inputs \['/d/'\] there, \['/e/'\] now.*the same inputs"):
        resume.open_output(output, overwrite=False, manifest={**MANIFEST, "inputs": ["/e/"]})
    assert same_run({k: v for k, v in MANIFEST.items() if k != "inputs"}, MANIFEST)  # recorded before inputs were
    state = resume.open_output(output, overwrite=True, manifest={**MANIFEST, "fingerprint": "g" * 16})
    assert state.done == {} and state.record.parts == 0 and not state.record.groups  # the listing is redone too
    assert json.loads((tmp_path / "out" / "_docembed.json").read_text())["fingerprint"] == "g" * 16

    sink.write_success(output, {"counts": {}})
    changed = {**MANIFEST, "fingerprint": "g" * 16}
    assert resume.open_output(output, overwrite=False, manifest=changed) is None  # finished with these: nothing to do
    # Finished with other settings: not "nothing to do", which would leave the user thinking it holds these.
    with pytest.raises(OutputError, match="holds a finished run made with other settings .*overlap 2 there, 4 now"):
        resume.open_output(output, overwrite=False, manifest={**changed, "fingerprint": "h" * 16, "overlap": 4})


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
    resume.open_output(output, overwrite=False, manifest=MANIFEST)
    monkeypatch.setattr(retries, "BACKOFF_SECONDS", 0.001)
    broken = pafs.PyFileSystem(_BrokenUploads())
    monkeypatch.setattr(sink, "filesystem_for", lambda location: (broken, str(tmp_path / "out")))
    with pytest.raises(StorageError, match="still failing after 3 attempts: connection reset"):
        write(chunk_rows("g" * 20, "/d/x.txt", 3, 1), output)
    assert not list((tmp_path / "out" / "embeddings").iterdir())
    assert not list((tmp_path / "out" / "_staging").iterdir())
