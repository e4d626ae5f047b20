import time

from pipeline.stage_stats import StageClock, StageTable


class Collector:
    """Stands in for the RunStats actor handle: `add_stages.remote(...)` lands in a table."""

    def __init__(self):
        self.table = StageTable()
        self.add_stages = self
        self.sends = 0

    def remote(self, worker, increments):
        self.sends += 1
        self.table.add(worker, increments)


def test_a_clock_sends_what_it_timed_since_the_last_send():
    collector = Collector()
    clock = StageClock(collector)
    with clock.timing("extract") as counts:
        time.sleep(0.05)
        counts["pages"] += 3
    with clock.timing("extract") as counts:
        counts["pages"] += 2
    clock.send()
    clock.send()  # nothing new: nothing sent
    assert collector.sends == 1
    extract = collector.table.stages["extract"]
    assert extract.counts["pages"] == 5 and extract.busy_s >= 0.05
    assert extract.workers == {clock.worker}


def test_time_inside_a_failing_call_still_counts():
    clock = StageClock()
    try:
        with clock.timing("read"):
            raise OSError("unreachable")
    except OSError:
        pass
    assert "read" in clock.pending


def test_utilisation_per_worker_names_the_bottleneck():
    table = StageTable()
    # Two extract workers busy 4 s each of a 10 s run; one encoder busy 9 s.
    table.add("a:1", {"extract": (4.0, {"pages": 40}), "encode": (9.0, {"tokens": 9000})})
    table.add("a:2", {"extract": (4.0, {"pages": 40})})
    assert table.utilisation("extract", 10.0) == 0.4
    assert table.utilisation("encode", 10.0) == 0.9
    assert table.bottleneck(10.0) == "encode"
    report = table.to_json(10.0)
    assert list(report) == ["extract", "encode"]
    assert report["extract"] == {"workers": 2, "busy_s": 8.0, "utilisation": 0.4, "pages_per_busy_s": 10.0, "pages": 80}
    assert report["encode"]["tokens_per_busy_s"] == 1000.0
    assert table.line(10.0) == "stages busy: extract 40%, encode 90%; bottleneck encode"
    assert StageTable().bottleneck(1.0) is None
