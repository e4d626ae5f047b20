import json
import math
import shutil

from pipeline import Embedder, JobConfig
from pipeline.encode import model_dir
from pipeline.encode.batching import EncodeStats
from pipeline.extract.sandbox import ExtractConfig
from pipeline.run.report import ProgressLine, RunReport, startup
from pipeline.run.stage_clock import EncoderTotals, StageTable, StageTotals
from pipeline.text.chunking import ChunkingConfig

from support import FAMILY_FIXTURES


def test_progress_line_is_periodic_and_estimates_the_rest():
    now = [100.0]
    lines = []
    progress = ProgressLine(every_s=10, clock=lambda: now[0], emit=lines.append)
    report = RunReport("m", "f", {}, inputs=10, skipped=0)
    report.add_summaries([{"docs_ok": 2, "docs_failed": 1, "chunks": 5, "tokens": 3000, "error_types": "{}"}])
    now[0] = 105.0
    progress.update(report, 1, 3)
    assert lines == []  # too soon
    now[0] = 120.0
    progress.update(report, 1, 3)
    assert lines == ["docembed: progress 25%: 3 docs (1 failed), 3000 tokens; 0.1 docs/s, 150 tokens/s; ETA 60s"]
    progress.update(report, 1, 3, listing=True, force=True)  # more groups to come: the rest is not known
    assert lines[-1].endswith("ETA unknown")
    progress.update(report, 4, 0, force=True)
    assert lines[-1].endswith("ETA 0s")


def test_progress_line_says_how_busy_each_stage_is():
    table = StageTable()
    table.add(
        {"extract": StageTotals(5.0, {"pages": 50}, {"a:1"}), "encode": StageTotals(9.0, {"tokens": 900}, {"a:1"})}
    )
    lines = []
    progress = ProgressLine(clock=lambda: 110.0, emit=lines.append, started=100.0, stages=lambda: table)
    progress.update(RunReport("m", "f", {}, inputs=1, skipped=0), 1, 1, force=True)
    assert lines[0].endswith("; stages busy: extract 50%, encode 90%; bottleneck encode")


def test_startup_lists_the_first_steps_in_the_order_they_came_as_seconds_from_the_start():
    stages = StageTable()
    stages.add({"encode": StageTotals(3.0, first=1012.0, last=1015.0), "read": StageTotals(0.1, first=1004.0)})
    loaded = {"h:1": EncoderTotals(EncodeStats(), (), {}, {}, (1005.0, 1009.5))}
    never = {"h:2": EncoderTotals(EncodeStats(), (), {}, {}, (math.nan, math.nan))}
    marks = {"Ray ready": 1002.0, "first part of the listing recorded": 1003.5, "first group committed": None}
    assert startup(1000.0, marks, stages, {**loaded, **never}) == [
        ("Ray ready", 2.0),
        ("first part of the listing recorded", 3.5),
        ("first read call", 4.0),
        ("encoder load started", 5.0),
        ("encoder loaded", 9.5),
        ("first encode call", 12.0),
    ]
    assert startup(1000.0, {"Ray ready": 1001.0}, StageTable(), {}) == [("Ray ready", 1.0)]


def test_throughput_counts_this_runs_work_not_the_groups_an_earlier_run_finished():
    report = RunReport("m", "f", {}, inputs=30, skipped=0)
    group = {"docs_ok": 9, "docs_failed": 1, "chunks": 20, "tokens": 4000, "error_types": '{"EmptyFile": 1}'}
    report.add_summaries([group, group], resumed=True)
    report.add_summaries([group])
    report.finish(10.0, {}, StageTable())
    success = report.to_json()
    assert success["counts"]["docs_ok"] == 27 and success["counts"]["tokens"] == 12000
    assert success["throughput"] == {"docs_per_s": 1.0, "chunks_per_s": 2.0, "tokens_per_s": 400.0}


def test_the_progress_lines_rates_are_this_runs_work_not_the_groups_an_earlier_run_finished():
    lines = []
    progress = ProgressLine(clock=lambda: 110.0, emit=lines.append, started=100.0)
    report = RunReport("m", "f", {}, inputs=30, skipped=0)
    group = {"docs_ok": 9, "docs_failed": 1, "chunks": 20, "tokens": 4000, "error_types": "{}"}
    report.add_summaries([group, group], resumed=True)
    progress.update(report, 2, 2, force=True)
    assert "progress 50%: 20 docs (2 failed), 8000 tokens; 0.0 docs/s, 0 tokens/s; ETA unknown" in lines[-1]
    report.add_summaries([group])  # this run's first group, 10 s in: 10 s for the one left
    progress.update(report, 3, 1, force=True)
    assert lines[-1].endswith("30 docs (3 failed), 12000 tokens; 1.0 docs/s, 400 tokens/s; ETA 10s")


def test_the_report_says_what_each_encoder_ran_and_the_summary_each_setting_once():
    ran = {
        "dtype": "bfloat16",
        "mesh": {"data": 2},
        "rows_per_shard": 4,
        "packing": True,
        "attention": [{"impl": "blockwise", "kv_seq": 256}, {"impl": "reference", "kv_seq": 64}],
        "dense": [{"impl": "onednn", "weights": "bfloat16", "out": "float32"}],
    }
    encoders = {name: EncoderTotals(EncodeStats(), (), {}, {}, (0.0, 1.0), ran) for name in ("h:1", "h:2")}
    report = RunReport("m", "f", {}, inputs=1, skipped=0)
    report.finish(1.0, encoders, StageTable())
    assert report.to_json()["encoders_ran"] == {"h:1": ran, "h:2": ran}
    assert report.ran_line() == (
        "bfloat16, mesh data=2, attention blockwise at 256 keys, attention reference at 64 keys, "
        "dense onednn (bfloat16 weights)"
    )
    assert "  ran: bfloat16, mesh data=2," in report.summary()
    assert RunReport("m", "f", {}, inputs=0, skipped=0).ran_line() == "no encoder call"


def test_the_summary_counts_documents_beside_inputs_where_shards_make_them_differ():
    """A shard is one input of many documents, which the embedded and failed counts are."""
    group = {"docs_ok": 8, "docs_failed": 1, "chunks": 9, "tokens": 90, "error_types": "{}"}
    shards = RunReport("m", "f", {}, inputs=2, skipped=1)
    shards.add_summaries([group])
    shards.finish(1.0, {}, StageTable())
    assert shards.summary().startswith("docembed: 2 inputs (1 skipped), 9 documents: 8 embedded, 1 failed;")
    files = RunReport("m", "f", {}, inputs=9, skipped=0)
    files.add_summaries([group])
    files.finish(1.0, {}, StageTable())
    assert files.summary().startswith("docembed: 9 inputs (0 skipped): 8 embedded, 1 failed;")


def test_a_local_model_given_relative_is_recorded_absolute_and_searchable_from_elsewhere(tmp_path, monkeypatch):
    """Recorded as typed, `in/model` was a hub id to search and the notebook started in another directory."""
    shutil.copytree(FAMILY_FIXTURES / "distilbert-dense", tmp_path / "in" / "model")
    monkeypatch.chdir(tmp_path)
    spec = model_dir.resolve("in/model")
    assert spec.source == "in/model"  # what the stages load, each node relative to its working directory
    cfg = JobConfig(inputs=("docs",), output="out", model=spec.source)
    report = RunReport.start(cfg, spec, ChunkingConfig(64, 8), ExtractConfig())
    assert report.config["model"] == report.config["model_path"] == str(tmp_path / "in" / "model")
    monkeypatch.chdir(tmp_path.parent)
    recorded = {"config": report.config, "model": {"id": spec.model_id, "fingerprint": spec.fingerprint}}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "_SUCCESS").write_text(json.dumps(recorded))
    assert Embedder.for_output(str(tmp_path / "out")).fingerprint == spec.fingerprint  # the report read there
