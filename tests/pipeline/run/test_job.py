"""The whole job on a real local Ray: samples, broken documents, the output contract."""

import dataclasses
import itertools
import json
import logging
import logging.handlers
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline import Embedder, JobConfig, run_job
from pipeline.cli import embed
from pipeline.encode.cpu_devices import MAX_CPU_DEVICES, forced_cpu_devices
from pipeline.encode.encoder_config import DEFAULT_BATCH_SIZE, EncoderConfig
from pipeline.encode.placement import place_encoders
from pipeline.errors import ConfigError, OutputError, StorageError
from pipeline.extract.sandbox import ExtractConfig
from pipeline.io import filesystems as storage
from pipeline.results import embedding_matrix, read_errors, read_report, read_table
from pipeline.run import job
from pipeline.run.job import ENCODE_CALL_BATCHES, encode_call_packs

from support import (
    REPO,
    SAMPLES,
    decompression_bomb_pdf,
    deeply_nested_pdf,
    encrypt,
    form_fanout_pdf,
    loaded_modules,
    page_tree_loop_pdf,
    text_pdf,
)

LONG_TEXT = "\n\n".join(
    f"Paragraph {i}. Chunking splits long documents into windows of tokens that overlap, "
    f"so a sentence cut at one window's edge is whole in the next. This is paragraph number {i}."
    for i in range(60)
)


def test_the_driver_never_loads_jax():
    """The driver runs no JAX: its config, the encoders' placement and the encoder actors' class are plain
    Python there, and JAX's import would cost every job's start seconds of CPU and ~100 MB on the driver
    (BENCHMARKS.md, "Start-up without JAX on the driver"). The encoder actors load it themselves."""
    assert loaded_modules("pipeline.cli.embed, pipeline.run.job", "m.split('.')[0] == 'jax'") == "[]"


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, bad_documents):
    root = tmp_path_factory.mktemp("corpus")
    shutil.copytree(SAMPLES, root / "samples")
    bad = root / "bad"
    bad.mkdir()
    for name, (data, _, _) in bad_documents.items():
        (bad / name).write_bytes(data)
    (root / "long.txt").write_text(LONG_TEXT)
    (root / "image.png").write_bytes(b"\x89PNG not a document")
    return root


@pytest.fixture(scope="module")
def finished(ray_local, corpus_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "run"
    report = run_job(JobConfig(inputs=(str(corpus_dir),), output=str(out), overlap=16))
    return out, report


def test_every_input_exactly_once(finished, corpus_dir, bad_documents):
    out, report = finished
    documents = {str(p) for p in corpus_dir.rglob("*") if p.suffix in (".pdf", ".txt", ".md")}
    chunks, errors = read_table(str(out)), read_errors(str(out))
    embedded = set(chunks.column("doc_id").to_pylist())
    failed = errors.column("doc_id").to_pylist()
    assert len(failed) == len(set(failed))
    assert embedded.isdisjoint(failed)
    assert embedded | set(failed) == documents
    assert report.docs_ok == len(embedded) and report.docs_failed == len(failed)
    assert report.skipped == 2  # image.png and samples/NOTICE


def test_bad_documents_become_error_rows_with_stage_and_reason(finished, corpus_dir, bad_documents):
    out, _ = finished
    errors = {r["doc_id"]: r for r in read_errors(str(out)).to_pylist()}
    for name, (_, stage, error_type) in bad_documents.items():
        row = errors[str(corpus_dir / "bad" / name)]
        assert (row["stage"], row["error_type"]) == (stage, error_type), name
        assert row["message"]
    locked_sample = errors[str(corpus_dir / "samples" / "pdf" / "libreoffice-writer-password.pdf")]
    assert locked_sample["error_type"] == "EncryptedPDF"


def test_embeddings_follow_the_output_contract(finished):
    out, _ = finished
    files = list((out / "embeddings").glob("*.parquet"))
    assert files and not (out / "_staging").exists()  # a finished output keeps no staging directory
    schema = pq.read_schema(files[0])
    assert schema.field("doc_id").type == pa.string()
    for name in ("chunk_index", "page_start", "page_end", "n_tokens"):
        assert schema.field(name).type == pa.int32(), name
    assert schema.field("embedding").type == pa.list_(pa.float32(), 384)

    table = read_table(str(out))
    by_doc = {}
    for row in table.select(["doc_id", "chunk_index", "page_start", "page_end", "n_tokens"]).to_pylist():
        by_doc.setdefault(row["doc_id"], []).append(row)
        assert 3 <= row["n_tokens"] <= 256
        if row["doc_id"].endswith(".pdf"):
            assert 1 <= row["page_start"] <= row["page_end"]
        else:
            assert row["page_start"] is None and row["page_end"] is None
    for doc, rows in by_doc.items():
        assert [r["chunk_index"] for r in rows] == list(range(len(rows))), doc
    four_pages = next(rows for doc, rows in by_doc.items() if doc.endswith("pdflatex-4-pages.pdf"))
    assert four_pages[-1]["page_end"] == 4 and len(four_pages) > 4
    long_doc = next(rows for doc, rows in by_doc.items() if doc.endswith("long.txt"))
    assert len(long_doc) > 3


def test_single_window_documents_embed_exactly_like_the_embedder(finished, corpus_dir):
    out, _ = finished
    table = read_table(str(out))
    water = table.filter(pa.compute.ends_with(table.column("doc_id"), "water-cycle.txt"))
    assert water.num_rows == 1
    text = water.column("text")[0].as_py()
    assert text == (corpus_dir / "samples" / "text" / "water-cycle.txt").read_text()
    expected = Embedder.load().embed([text])
    got = embedding_matrix(water)
    assert float((got * expected).sum()) >= 0.99999


def test_success_report(finished):
    out, report = finished
    success = read_report(str(out))
    counts = success["counts"]
    assert counts["inputs"] == counts["docs_ok"] + counts["docs_failed"]
    assert counts["chunks"] == read_table(str(out)).num_rows
    assert counts["tokens"] == sum(read_table(str(out)).column("n_tokens").to_pylist())
    assert success["model"]["id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert success["throughput"]["tokens_per_s"] > 0
    assert 0 < success["padding_efficiency"] <= 1
    assert success["errors_by_type"]["EncryptedPDF"] == 2
    assert success["config"]["extract"] == {"pdf_extractor": "pdfium", "timeout_s": 120, "memory_mib": 2048}
    assert json.loads((out / "_docembed.json").read_text())["pdf_extractor"] == "pdfium"
    assert json.loads((out / "_SUCCESS").read_text()) == success


def test_success_names_each_stage_and_the_bottleneck(finished):
    out, _ = finished
    success = read_report(str(out))
    stages = success["stages"]
    assert set(stages) == {"read", "extract", "tokenise", "chunk", "encode", "write"}
    counts = success["counts"]
    assert stages["read"]["docs"] == counts["inputs"]
    assert stages["extract"]["docs"] == counts["inputs"] and stages["extract"]["pages"] > 0
    assert stages["chunk"]["chunks"] == stages["encode"]["chunks"] == counts["chunks"]
    assert stages["encode"]["tokens"] == counts["tokens"]
    assert stages["write"]["rows"] == counts["chunks"] + counts["docs_failed"]
    for stage in stages.values():
        assert stage["workers"] >= 1 and stage["busy_s"] > 0
        assert 0 < stage["utilisation"] <= 1.05  # clocks of different processes: a little slack
    assert success["bottleneck"] in stages
    # The rows each stage took and handed on, which say when the stages starve behind the read's window.
    assert stages["read"]["rows_in"] == counts["inputs"]  # work rows: a file each, no shard read in units
    assert stages["read"]["rows_out"] == stages["chunk"]["rows_in"] == counts["docs_ok"] + counts["docs_failed"]
    assert stages["chunk"]["rows_out"] == stages["encode"]["rows_in"]
    assert stages["encode"]["rows_out"] == stages["write"]["rows_in"] == stages["write"]["rows"]


def test_groups_the_window_cannot_fill_a_call_with_grow_it_and_never_wait_for_the_stall(ray_local, tmp_path):
    """Scanned PDFs (no text: an error row each, sixteen to a pack) and one-line shards (a group each) fill no
    encoder call within a window sized for PDFs of text: every stage waited for rows the window kept back,
    and the job moved a group per 30-second stall (600 scanned PDFs: 135 s instead of 12 s). The stages'
    counts say when they starve, and the window grows at once. The shards sort among the PDFs, so that the
    run of PDFs is broken up by them (a group's blocks must still come together)."""
    corpus = tmp_path / "in"
    corpus.mkdir()
    blank = text_pdf([""])
    for i in range(160):
        (corpus / f"scan{i:03d}.pdf").write_bytes(blank)
    for i in range(0, 160, 8):
        (corpus / f"scan{i:03d}a.jsonl").write_text(json.dumps({"id": f"s{i}", "text": f"Line {i}."}) + "\n")
    out = tmp_path / "out"
    # Calls of 32 packs (batch 1 on 2 CPU devices): 512 error rows fill one; groups of 8 PDFs, 12 in the window.
    run_job(JobConfig(inputs=(str(corpus),), output=str(out), group_size=8, encoder=EncoderConfig(batch_size=1)))
    success = read_report(str(out))
    assert success["counts"]["docs_ok"] == 20 and success["errors_by_type"] == {"NoText": 160}
    window = success["read_window"]
    assert window["stalled"] == 0 and window["starved"] >= 1 and window["grown"] >= 1


def test_success_breaks_the_start_up_into_its_steps(finished):
    out, _ = finished
    pairs = read_report(str(out))["startup_seconds"]
    assert [t for _, t in pairs] == sorted(t for _, t in pairs)
    steps = dict(pairs)
    order = ["Ray ready", "encoder load started", "encoder loaded", "first encode call", "first group committed"]
    assert [step for step in steps if step in order] == order
    assert steps["first part of the listing recorded"] < steps["first extract call"] < steps["first encode call"]
    assert 0 < steps["first group committed"] <= read_report(str(out))["wall_seconds"]


def test_fd_2_is_put_back_after_a_run_returns_and_after_it_raises(finished, corpus_dir, tmp_path):
    """While a run is on Ray its fd 2 is pipeline.run.stderr_filter's pipe; a notebook's or a test's process
    gets its own back, from a run that returns and from one that raises once it is on Ray."""
    out, _ = finished
    before = os.fstat(2)
    assert run_job(JobConfig(inputs=(str(corpus_dir),), output=str(out), overlap=16)) is None
    assert (os.fstat(2).st_dev, os.fstat(2).st_ino) == (before.st_dev, before.st_ino)
    no_fit = EncoderConfig(mesh=(("data", 3), ("model", 5)))  # checked against Ray's nodes, so raised on Ray
    with pytest.raises(ConfigError, match="needs 15 devices"):
        run_job(JobConfig(inputs=(str(SAMPLES),), output=str(tmp_path / "out"), encoder=no_fit))
    assert (os.fstat(2).st_dev, os.fstat(2).st_ino) == (before.st_dev, before.st_ino)


def _short_texts(n: int) -> list[dict]:
    """n texts of every length from one word to a paragraph, cut from the sample texts' paragraphs."""
    words = " ".join(p.read_text() for p in sorted((SAMPLES / "text").iterdir())).split()
    return [{"id": f"t{i}", "text": " ".join(words[i : i + 1 + i % 90])} for i in range(n)]


def test_rerun_is_a_noop_and_overwrite_redoes(finished, corpus_dir, monkeypatch):
    out, _ = finished
    before = sorted(p.name for p in (out / "embeddings").iterdir())
    with monkeypatch.context() as m:
        # In float32, what a run would make is known without Ray: a finished output is seen before Ray starts.
        m.setattr(job, "_init_ray", lambda verbosity: pytest.fail("Ray was started"))
        assert run_job(JobConfig(inputs=(f"{corpus_dir}/",), output=str(out), overlap=16)) is None
        # Asked with other settings or inputs: said so, not "nothing to do" over an output that does not hold them.
        with pytest.raises(
            OutputError, match="holds a finished run made with other settings .*overlap 16 there, 32 now"
        ):
            run_job(JobConfig(inputs=(str(corpus_dir),), output=str(out)))
        with pytest.raises(OutputError, match="holds a finished run .*inputs"):
            run_job(JobConfig(inputs=(str(corpus_dir / "samples"),), output=str(out), overlap=16))
    assert sorted(p.name for p in (out / "embeddings").iterdir()) == before

    report = run_job(JobConfig(inputs=(str(corpus_dir / "samples" / "text"),), output=str(out), overwrite=True))
    assert report.inputs == report.docs_ok == 5
    assert set(read_table(str(out)).column("doc_id").to_pylist()) == {
        str(p) for p in (corpus_dir / "samples" / "text").iterdir()
    }
    assert not list((out / "errors").iterdir())


def test_a_rerun_works_from_the_recorded_listing_and_overwrite_lists_again(ray_local, tmp_path):
    """The listing is recorded under the output (`_inputs/`) as its groups are formed; an unfinished run resumes
    from that record, so a file added meanwhile does not change its groups; `--overwrite` lists again. The
    output lies under its input: its own files (parts, `_inputs/`'s Parquet) are never inputs."""
    corpus = tmp_path / "corpus"
    out = corpus / "out"
    shutil.copytree(SAMPLES / "text", corpus)
    cfg = JobConfig(inputs=(str(corpus),), output=str(out), group_size=2)
    run_job(cfg)
    recorded = pq.read_table(out / "_inputs")
    assert recorded.column("uri").to_pylist() == sorted(str(p) for p in corpus.iterdir() if p != out)
    assert recorded.column("group_docs").to_pylist() == [2, 2, 2, 2, 1]
    assert json.loads((out / "_inputs" / "_LISTED.json").read_text())["inputs"] == 5
    before = read_table(str(out))

    # What a driver killed after its listing leaves: no _SUCCESS, groups not done.
    (out / "_SUCCESS").unlink()
    for marker in sorted((out / "_groups").iterdir())[1:]:
        marker.unlink()
    (corpus / "added.txt").write_text("A note added while the run was stopped.")
    # A file of a group not done, edited meanwhile: read as it is now, and said so.
    done = {p.name.removesuffix(".json") for p in (out / "_groups").iterdir()}
    edited = next(r["uri"] for r in recorded.to_pylist() if r["group"] not in done)
    with open(edited, "a") as f:
        f.write(" A sentence added after the listing.")
    # Other inputs would make it finish this listing and record theirs: refused. The same, spelt otherwise, resume.
    with pytest.raises(OutputError, match=r"inputs \[.*corpus/'\] there, \[.*text/'\] now"):
        run_job(dataclasses.replace(cfg, inputs=(str(SAMPLES / "text"),)))
    report = run_job(dataclasses.replace(cfg, inputs=(f"file://{corpus}/",)))
    success = read_report(str(out))
    assert success["output"]["groups_resumed"] == 1 and success["output"]["groups"] == 3
    assert report.inputs == success["counts"]["inputs"] == 5
    assert report.changed_inputs == success["stages"]["read"]["changed"] == 1
    assert "warning: files that differ in size from this output's recorded listing: 1;" in report.summary()
    after = read_table(str(out))
    assert after.filter(pc.field("doc_id") != edited).equals(before.filter(pc.field("doc_id") != edited))
    assert "after the listing" in " ".join(after.filter(pc.field("doc_id") == edited).column("text").to_pylist())

    assert run_job(dataclasses.replace(cfg, overwrite=True)).inputs == 6


def test_a_marker_that_cannot_be_written_fails_the_run_and_the_rerun_completes(ray_local, tmp_path, monkeypatch):
    """The driver writes done-markers beside its loop (`Ledger`): one that fails ends the run with its error, no
    later group's marker tells the stopped read anything, and the rerun redoes the group and finishes."""
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLES / "text", corpus)
    cfg = JobConfig(inputs=(str(corpus),), output=str(tmp_path / "out"), group_size=2)
    real_write, markers = storage.write_file, itertools.count()

    def write_file(fs, path, data, staging):
        if "/_groups/" in path and next(markers) == 1:
            raise StorageError(f"cannot write {path}: SlowDown")
        real_write(fs, path, data, staging)

    with monkeypatch.context() as m:
        m.setattr(storage, "write_file", write_file)  # the driver's writes: the stages' processes write as they do
        with pytest.raises(StorageError, match="SlowDown"):
            run_job(cfg)
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    report = run_job(cfg)
    success = read_report(str(tmp_path / "out"))
    assert 1 <= success["output"]["groups_resumed"] <= 2 and success["output"]["groups"] == 3
    assert report.docs_ok == success["output"]["documents"] == 5
    chunks = read_table(str(tmp_path / "out"))
    keys = list(zip(chunks.column("doc_id").to_pylist(), chunks.column("chunk_index").to_pylist()))
    assert len(keys) == len(set(keys)) and {d for d, _ in keys} == {str(p) for p in corpus.iterdir()}


def test_a_resume_keeps_the_recorded_groups_and_says_a_new_group_size_applies_only_after_them(
    ray_local, tmp_path, caplog
):
    """A resume's groups come from its recorded listing: another --group-size cuts only what is listed after it,
    and the run says so in one line (the group size is not in the fingerprint: the same output resumes)."""
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"a{i}.txt").write_text(f"Note {i} on how groups of files are committed together.")
    cfg = JobConfig(inputs=(str(corpus),), output=str(out), group_size=2)
    run_job(cfg)
    # What a driver killed while it listed leaves: no _SUCCESS, one group done, the listing recorded in part.
    (out / "_SUCCESS").unlink()
    (out / "_inputs" / "_LISTED.json").unlink()
    for marker in sorted((out / "_groups").iterdir())[1:]:
        marker.unlink()
    for i in range(3):
        (corpus / f"b{i}.txt").write_text(f"Note {i} listed after the recorded part.")
    # Its own handler: caplog's is found at WARNING after a run on Ray.
    caplog.set_level(logging.INFO, logger="docembed")
    handler = logging.handlers.BufferingHandler(capacity=100)
    logging.getLogger("docembed").addHandler(handler)
    try:
        run_job(dataclasses.replace(cfg, group_size=3))
    finally:
        logging.getLogger("docembed").removeHandler(handler)
    said = [r.getMessage() for r in handler.buffer if "--group-size" in r.getMessage()]
    assert said == [
        "docembed: --group-size 3 applies only to the inputs listed after the recorded part: the recorded groups "
        "(cut at --group-size 2) are kept; --overwrite starts afresh with it"
    ]
    assert pq.read_table(out / "_inputs").column("group_docs").to_pylist() == [2, 2, 2, 2, 3, 3, 3]
    assert read_report(str(out))["output"]["groups_resumed"] == 1


def test_a_node_whose_model_files_differ_from_the_drivers_stops_the_run_in_one_line(
    ray_local, tmp_path, monkeypatch, capfd
):
    """The stages on every node load the model from their own copy (a URI's node cache, a path on their own disk).
    One node here stands in for a node whose copy differs: the driver is made to hand the stages another
    tokenizer's digest, as a node with another tokenizer.json would find. Its ids would be written under the output's
    fingerprint: the run stops, saying so in one line, with no worker's traceback."""
    graph = job.JobGraph
    monkeypatch.setattr(job, "JobGraph", lambda *a: graph(*a[:-1], dataclasses.replace(a[-1], tokenizer_sha256="0")))
    out = tmp_path / "out"
    assert embed.main(["--input", str(SAMPLES / "text"), "--output", str(out)]) == 2
    printed = capfd.readouterr()
    assert printed.err.startswith("docembed: error: this node's tokenizer is not the job's driver's"), printed.err
    assert len(printed.err.splitlines()) == 1 and "Traceback" not in printed.out + printed.err
    assert not (out / "_SUCCESS").exists()


def test_real_pdf_corpus_and_short_texts_pack_into_three_programs(ray_local, corpus, tmp_path):
    # Every real PDF but GeoTopo, 117 pages: 84% of the corpus's tokens, all but its last chunk full windows,
    # which fill their rows whatever the packer does. Without them the same figure rests on the documents' last
    # chunks and the short texts alone (98.1% on an EPYC; 99.5% with GeoTopo), and the job encodes a third of the
    # tokens.
    pdfs = tmp_path / "pdfs"
    shutil.copytree(corpus, pdfs, ignore=shutil.ignore_patterns("GeoTopo*.pdf"))
    shard = tmp_path / "short.jsonl"
    shard.write_text("".join(json.dumps(row) + "\n" for row in _short_texts(400)))
    # Exact windows: what this checks is the packer, whose rows the windows fill but for each document's
    # last chunk. Boundary chunks (the default) leave 13% of their rows free on these PDFs, which only short
    # sequences in the same encoder call fill: 90% here (BENCHMARKS.md, chunking modes side by side).
    cfg = JobConfig(inputs=(str(pdfs), str(shard)), output=str(tmp_path / "out"), chunking="window")
    report = run_job(cfg)
    documents = [p for p in pdfs.rglob("*") if p.suffix in (".pdf", ".md", ".txt")]
    assert len(documents) == len([p for p in corpus.rglob("*") if p.suffix in (".pdf", ".md", ".txt")]) - 1
    assert report.inputs == len(documents) + 1
    assert report.docs_ok + report.docs_failed == len(documents) + 400
    assert report.docs_ok >= 420
    emb = embedding_matrix(read_table(str(tmp_path / "out")))
    assert np.isfinite(emb).all()
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-4)
    # Packing: every row holds the window's worth of real tokens but for a call's last rows. On this small job (about
    # 35,000 tokens in 3 calls) those rows are 1-3% of it, by which chunks share a call: 96.8% at 4cdf2ff, where
    # pdfium's joined hyphens moved a few tokens, 98.75% before, 97.4% with other temporary paths (the groups'
    # salt). Unpacked, the same chunks fill 85%; the planner packs the corpus at 99.5% (bench/chunking.py).
    assert report.padding_efficiency >= 0.96
    assert max(map(len, report.compiled_shapes.values())) <= 3


def _hostile_documents(real_pdf: bytes) -> dict[str, tuple[bytes, str | None]]:
    """File name -> (bytes, the error_type it must end in, or None when its chunks must be embedded)."""
    good_line = json.dumps({"id": "good", "text": "A good line among bad ones."}).encode()
    return {
        "owner-only.pdf": (encrypt(real_pdf, user_password="", owner_password="owner"), None),
        "locked.pdf": (encrypt(real_pdf, user_password="user", owner_password="owner"), "EncryptedPDF"),
        "page-loop.pdf": (page_tree_loop_pdf(), "NoText"),  # PDFium loads its one real page, which is blank
        "nested.pdf": (deeply_nested_pdf(), None),
        "bomb.pdf": (decompression_bomb_pdf(), "ExtractorCrashed"),
        "form-bomb.pdf": (form_fanout_pdf(1000), "ExtractorCrashed"),
        "form-slow.pdf": (form_fanout_pdf(100, pages=2000), "ExtractTimeout"),
        # A line per page: what is hostile here is the count of pages, not the tokens to encode.
        "2000-pages.pdf": (text_pdf([f"Tide {i}." for i in range(2000)]), None),
        "50mb.pdf": (text_pdf(["A page of text beside a large image."] * 3, padding_bytes=50_000_000), None),
        # One [UNK] (see ChunkBlock) from any word over the tokenizer's 100 characters; 1 MB, as 10 MB only spent
        # 13 s more in the tokenizer, linear in the length.
        "no-whitespace.txt": (b"x" * 1_000_000, "NoTokens"),
        "invalid-utf8.txt": (b"valid start \xff\xfe then not", "UndecodableText"),
        "nul-bytes.txt": (b"words\x00between\x00NUL bytes\x00", None),
        "malformed.jsonl": (
            b"\n".join([good_line, b"{not json", b"[1, 2]", b'{"id": "x"}', b'{"id": "y", "text": "\xff"}']),
            None,
        ),
    }


def test_hostile_documents_cost_only_themselves(ray_local, real_pdf, tmp_path):
    hostile = _hostile_documents(real_pdf)
    root = tmp_path / "in"
    shutil.copytree(SAMPLES, root / "samples")
    for name, (data, _) in hostile.items():
        (root / name).write_bytes(data)
    started = time.monotonic()
    # PDFium (auto), alone in a sandbox on an AMD EPYC: the form bomb meets a 256 MiB bound in 1.1-1.2 s (1.8 s at
    # 512 MiB, over 10 s beside the job's compiles on a slow CI machine), every other document takes under 0.3 s,
    # and form-slow 257 s. So 15 s keeps the bomb a memory failure on a machine several times slower and form-slow
    # a timeout on one ten times faster; the test's CPU is mostly form-slow's until then (30 s took 18 s longer).
    bounds = ExtractConfig(timeout_s=15, memory_mib=256)
    report = run_job(JobConfig(inputs=(str(root),), output=str(tmp_path / "out"), extract=bounds))
    print(f"\nhostile job: {time.monotonic() - started:.1f}s, {report.summary()}")

    chunks, errors = read_table(str(tmp_path / "out")), read_errors(str(tmp_path / "out"))
    embedded = set(chunks.column("doc_id").to_pylist())
    error_of = {r["doc_id"]: r["error_type"] for r in errors.to_pylist()}
    for name, (_, error_type) in hostile.items():
        if name.endswith(".jsonl"):
            continue
        uri = str(root / name)
        assert (error_of.get(uri), uri in embedded) == (error_type, error_type is None), name
    shard = str(root / "malformed.jsonl")
    assert f"{shard}#good" in embedded
    assert {error_of[f"{shard}#line:{i}"] for i in (2, 3, 5)} == {"BadRecord"}  # 5: invalid UTF-8
    assert error_of[f"{shard}#x"] == "NoText"
    # Every good document of the same run is embedded.
    samples = {str(p) for p in (root / "samples").rglob("*") if p.suffix in (".pdf", ".txt", ".md")}
    assert samples - embedded == {str(root / "samples" / "pdf" / "libreoffice-writer-password.pdf")}
    pages = chunks.filter(pa.compute.ends_with(chunks.column("doc_id"), "2000-pages.pdf")).column("page_end")
    assert pa.compute.max(pages).as_py() == 2000


def test_encoder_calls_hold_a_fixed_number_of_full_batches():
    nodes = [{"Alive": True, "Resources": {"CPU": 240, "TPU": 4}}]
    tpu = place_encoders("tpu", nodes, cpu_actors=None, cpu_per_actor=1)
    cpu = place_encoders("cpu", nodes, cpu_actors=None, cpu_per_actor=1)
    assert encode_call_packs(tpu, EncoderConfig()) == ENCODE_CALL_BATCHES * 64 * 4  # 64 rows per chip, 4 chips
    # A CPU actor alone on its node has one device per core, up to MAX_CPU_DEVICES (unless XLA_FLAGS forces a count).
    devices = forced_cpu_devices() or MAX_CPU_DEVICES
    assert cpu.devices_per_actor == devices
    assert encode_call_packs(cpu, EncoderConfig()) == ENCODE_CALL_BATCHES * DEFAULT_BATCH_SIZE["cpu"] * devices
    assert encode_call_packs(cpu, EncoderConfig(batch_size=2)) == ENCODE_CALL_BATCHES * 2 * devices


RESTART_ARGS_PROBE = """
import sys
import ray
from pipeline.encode.cpu_devices import MAX_CPU_DEVICES, forced_cpu_devices
from pipeline.encode.encoder_config import DEFAULT_BATCH_SIZE, EncoderConfig
from pipeline.encode.stage import EncodeBlock
from pipeline.run.stages import ChunkBlock
from pipeline.run.tally import RunCoordinator, SendToTally
from pipeline.text.chunking import ChunkingConfig

ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never another test's Ray
tally = RunCoordinator.options(name="probe-tally").remote()
record = SendToTally("probe-tally")
# The stage actors with the constructor arguments the job gives them, and restarts on, as Ray Data starts them.
actors = [ray.remote(max_restarts=-1)(ChunkBlock).remote(None, ChunkingConfig(max_tokens=64, overlap=8), record),
          ray.remote(max_restarts=-1)(EncodeBlock).remote(None, EncoderConfig(), None, record, None)]
ray.get([a.__ray_ready__.remote() for a in actors])
print("ours started", file=sys.stderr, flush=True)
# The control: one argument by reference, as Ray Data passes its own (DataContext, MapTransformer).
control = ray.remote(max_restarts=-1)(ChunkBlock).remote(ray.put(None), ChunkingConfig(max_tokens=64, overlap=8))
print("control started", file=sys.stderr, flush=True)
"""


def test_stage_actors_constructor_arguments_are_inline_so_a_restart_cannot_lose_them():
    """Ray logs ray-project/ray#53727's error, once per process, for the first actor with restarts whose
    arguments hold a reference; ours come first and must not, the control after them must."""
    probe = subprocess.run(
        [sys.executable, "-c", RESTART_ARGS_PROBE],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    ours, _, control = probe.stderr.partition("ours started")
    assert "constructor arguments in the object store" not in ours, ours[-2000:]
    assert "constructor arguments in the object store" in control, control[-2000:]


def test_big_shards_in_units_with_repeated_ids_embed_each_id_once_across_a_resume(ray_local, tmp_path, monkeypatch):
    """Shards cut into units (a tiny unit size here) whose repeats fall in other units than their first
    occurrence: one DuplicateId row per repeat, the first occurrence embedded once, and the same after a
    rerun that redoes the shards' groups over the parts a killed driver left."""
    from pipeline.io import shards

    monkeypatch.setattr(shards, "UNIT_BYTES", 300)
    ids = [f"d{i % 7}" for i in range(20)]  # 7 distinct ids, 13 repeats
    texts = [f"Document {i}: a few words about shard units." for i in range(20)]
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "s.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, texts)))
    pq.write_table(pa.table({"id": ids, "text": texts}), inputs / "s.parquet", row_group_size=3)
    out = tmp_path / "out"
    cfg = JobConfig(inputs=(str(inputs),), output=str(out), overlap=8)

    def check() -> None:
        chunks, errors = read_table(str(out)), read_errors(str(out))
        keys = list(zip(chunks.column("doc_id").to_pylist(), chunks.column("chunk_index").to_pylist()))
        assert len(keys) == len(set(keys)) == 14
        assert sorted(d.rsplit("#", 1)[1] for d in chunks.column("doc_id").to_pylist()) == sorted(list(set(ids)) * 2)
        assert errors.column("error_type").to_pylist() == ["DuplicateId"] * 26
        assert read_report(str(out))["counts"]["docs_failed"] == 26

    report = run_job(cfg)
    assert (report.docs_ok, report.docs_failed) == (14, 26)
    check()
    # A driver killed after the shards' parts landed, before their markers and _SUCCESS.
    (out / "_SUCCESS").unlink()
    for marker in (out / "_groups").iterdir():
        marker.unlink()
    run_job(cfg)
    assert read_report(str(out))["output"]["groups_resumed"] == 0
    check()
