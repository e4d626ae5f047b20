from pipeline.run.report import ProgressLine, RunReport
from pipeline.run.stage_clock import StageTable, StageTotals


def test_progress_line_is_periodic_and_estimates_the_rest():
    now = [100.0]
    lines = []
    progress = ProgressLine(every_s=10, clock=lambda: now[0], emit=lines.append)
    report = RunReport("m", "f", {}, inputs=10, skipped=0)
    report.add_summaries([{"docs_ok": 2, "docs_failed": 1, "chunks": 5, "tokens": 3000, "error_types": "{}"}])
    now[0] = 105.0
    progress.update(report, 0.25)
    assert lines == []  # too soon
    now[0] = 120.0
    progress.update(report, 0.25)
    assert lines == ["docembed: progress 25%: 3 docs (1 failed), 3000 tokens; 0.1 docs/s, 150 tokens/s; ETA 60s"]
    progress.update(report, 1.0, force=True)
    assert lines[-1].endswith("ETA 0s")


def test_progress_line_says_how_busy_each_stage_is():
    table = StageTable()
    table.add(
        {"extract": StageTotals(5.0, {"pages": 50}, {"a:1"}), "encode": StageTotals(9.0, {"tokens": 900}, {"a:1"})}
    )
    lines = []
    progress = ProgressLine(clock=lambda: 110.0, emit=lines.append, started=100.0, stages=lambda: table)
    progress.update(RunReport("m", "f", {}, inputs=1, skipped=0), 0.5, force=True)
    assert lines[0].endswith("; stages busy: extract 50%, encode 90%; bottleneck encode")
