import collections
import time

import pytest

from pipeline.encode.batching import EncodeStats
from pipeline.run.stage_clock import (
    RETRY_WINDOW,
    EncoderCall,
    Flow,
    Increment,
    RunTally,
    StageClock,
    StageTable,
    StageTotals,
)


def test_a_clock_sends_what_it_timed_since_the_last_send():
    tally = RunTally()
    clock = StageClock(tally.record)
    before = time.time()
    with clock.timing("extract") as counts:
        time.sleep(0.05)
        counts["pages"] += 3
    with clock.timing("extract") as counts:
        counts["pages"] += 2
    clock.send()
    clock.send()  # nothing new: nothing added
    extract = tally.stages().stages["extract"]
    assert extract.counts["pages"] == 5 and extract.busy_s >= 0.05
    assert extract.workers == {clock.worker}
    assert before <= extract.first and extract.span_s >= extract.busy_s - 1e-6


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
    table.add(
        {
            "extract": StageTotals(4.0, {"pages": 40}, {"a:1"}, 100.0, 104.0),
            "encode": StageTotals(9.0, {"tokens": 9000}, {"a:1"}, 101.0, 110.0),
        }
    )
    table.add({"extract": StageTotals(4.0, {"pages": 40}, {"a:2"}, 100.0, 106.0)})
    assert table.utilisation("extract", 10.0) == 0.4
    assert table.utilisation("encode", 10.0) == 0.9
    assert table.bottleneck(10.0) == "encode"
    report = table.to_json(10.0)
    assert list(report) == ["extract", "encode"]
    assert report["extract"] == {
        "workers": 2,
        "busy_s": 8.0,
        "span_s": 6.0,
        "utilisation": 0.4,
        "pages_per_busy_s": 10.0,
        "pages": 80,
    }
    assert report["encode"]["tokens_per_busy_s"] == 1000.0
    assert table.line(10.0) == "stages busy: extract 40%, encode 90%; bottleneck encode"
    assert StageTable().bottleneck(1.0) is None


def test_a_stage_busy_for_a_moment_of_a_long_run_reports_above_zero():
    table = StageTable()
    table.add({"read": StageTotals(0.000412, {"docs": 30}, {"a:1", "a:2"}, 100.0, 100.000412)})
    read = table.to_json(60.0)["read"]
    assert read["busy_s"] == 0.000412 and read["span_s"] == 0.000412
    assert read["utilisation"] == 3.433e-06


def test_a_retried_encoder_call_counts_once():
    """Ray retries a call whose actor died: the retry's report (same call, new process) replaces the first one's,
    its busy time and counts included."""
    tally = RunTally()
    state = EncoderCall(EncodeStats(100, 128, 1), ((4, 32),), {"hits": 0, "misses": 1})
    for worker, call, busy_s, tokens in (
        ("host:1", "rows-a", 1.0, 100),
        ("host:1", "rows-b", 2.0, 90),
        ("host:2", "rows-b", 4.0, 100),
    ):
        encode = StageTotals(busy_s, collections.Counter(tokens=tokens, rows_in=1), {worker})
        tally.record(Increment(worker, {"encode": encode}, call, state))
    encoders = tally.encoders()
    assert encoders["host:1"].stats == EncodeStats(100, 128, 1)
    assert encoders["host:2"].stats == EncodeStats(100, 128, 1)
    encode = tally.stages().stages["encode"]
    assert (encode.busy_s, encode.counts["tokens"], encode.counts["rows_in"]) == (5.0, 200, 2)
    assert encoders["host:2"].pid == 2 and encoders["host:2"].compiled_shapes == ((4, 32),)


def test_a_retried_cpu_stage_call_counts_once_and_a_clock_names_each_send_of_a_call():
    """Every stage names its calls by what they took (`begin`): a retry of the call on a restarted actor, another
    process, sends the same names, and replaces what the first attempt sent."""
    tally = RunTally()
    first, retry = StageClock(tally.record), StageClock(tally.record)
    retry.worker = "host:2"
    for clock, calls in ((first, ["read:a", "read:b"]), (retry, ["read:b"])):
        for call in calls:
            clock.begin(call)
            for _ in range(2):  # a call streaming two shards sends at the end of each
                with clock.timing("read") as counts:
                    counts["docs"] += 3
                clock.send()
    assert tally.stages().stages["read"].counts["docs"] == 12
    assert set(tally.shares) == {"read:a/0", "read:a/1", "read:b/0", "read:b/1"}
    assert tally.shares["read:b/0"].worker == "host:2"


def test_a_retry_that_reports_fewer_stages_takes_the_others_back_whole():
    """A read whose first attempt extracted a file and whose retry could not read it: the extraction leaves the
    table, with no busy time left below zero; what the tally hands out is a copy of its sums."""
    tally = RunTally()
    first, retry = StageClock(tally.record), StageClock(tally.record)
    retry.worker = "host:2"
    for clock, stages in ((first, ("read", "extract")), (retry, ("read",))):
        clock.begin("read:a")
        for stage in stages:
            with clock.timing(stage) as counts:
                counts["docs"] += 1
        clock.send()
    table = tally.stages()
    assert set(table.stages) == {"read"} and table.stages["read"].counts["docs"] == 1
    table.stages["read"].counts["docs"] = 99
    assert tally.stages().stages["read"].counts["docs"] == 1


def test_a_call_sends_its_own_timing_alone():
    """What a call that raised left unsent is not sent under the next call's name."""
    tally = RunTally()
    clock = StageClock(tally.record)
    clock.begin("chunk:a")
    with pytest.raises(ValueError), clock.timing("chunk") as counts:
        counts["chunks"] += 5
        raise ValueError("a call that fails")
    clock.begin("chunk:b")
    with clock.timing("chunk") as counts:
        counts["chunks"] += 1
    clock.send()
    assert tally.stages().stages["chunk"].counts["chunks"] == 1 and set(tally.shares) == {"chunk:b/0"}


def test_the_tally_forgets_a_workers_calls_past_its_retry_window():
    """Only a worker's last RETRY_WINDOW calls may still be retried: the tally holds as much after any number of
    calls, and their counts stay in the sums."""
    tally = RunTally()
    clock = StageClock(tally.record)
    for i in range(RETRY_WINDOW + 50):
        clock.begin(f"chunk:{i}")
        clock.count("chunk", rows_in=1)
        clock.send()
    assert len(tally.shares) == RETRY_WINDOW and "chunk:49/0" not in tally.shares and "chunk:50/0" in tally.shares
    assert tally.stages().stages["chunk"].counts["rows_in"] == RETRY_WINDOW + 50
    # A retry within the window still replaces; the forgotten one would count again.
    clock.begin("chunk:60")
    clock.count("chunk", rows_in=1)
    clock.send()
    assert tally.stages().stages["chunk"].counts["rows_in"] == RETRY_WINDOW + 50


def test_the_tally_keeps_a_keyed_call_as_its_share_alone():
    """What a call's increment carries besides its counts (the encoder's shapes, cache counts, where it runs) is
    kept once per encoder, not per call: a run of many calls holds a few numbers for each."""
    tally = RunTally()
    ran = {"dtype": "float32", "attention": ["blockwise at 256 keys"] * 50}
    for i in range(3):
        state = EncoderCall(EncodeStats(10, 16, 1), ((4, 32),) * 50, {"hits": i}, ran=ran)
        encode = StageTotals(1.0, collections.Counter(tokens=10), {"host:1"})
        tally.record(Increment("host:1", {"encode": encode}, f"call-{i}", state, where={"node_id": "n" * 56}))
    assert set(tally.latest) == {"host:1"} and tally.latest["host:1"].encoder.compile_cache == {"hits": 2}
    held = [value for share in tally.shares.values() for value in (share.worker, share.stages, share.stats)]
    assert not any(isinstance(value, (EncoderCall, dict)) for value in held)
    assert tally.encoders()["host:1"].stats == EncodeStats(30, 48, 3)


def _flowed(**stages: tuple[int, int]) -> StageTable:
    """A tally whose stages took and handed on these rows (rows_in, rows_out), as their calls count them."""
    tally = RunTally()
    clock = StageClock(tally.record)
    for stage, (rows_in, rows_out) in stages.items():
        clock.count(stage, rows_in=rows_in, rows_out=rows_out)
    clock.send()
    return tally.stages()


def test_the_stages_starve_when_none_holds_the_rows_its_call_waits_for():
    flow = Flow((("read", 16), ("chunk", 16), ("encode", 32), ("write", 1)))
    # 200 work rows yielded, all extracted and chunked into 20 packs, none encoded: the encoder waits for 32.
    assert flow.starved(_flowed(read=(200, 200), chunk=(200, 20)), yielded=200)
    # 40 packs: a call's worth is queued (or in the running call, whose rows count only as it ends).
    assert not flow.starved(_flowed(read=(200, 200), chunk=(200, 40)), yielded=200)
    # 16 work rows not yet extracted: the extraction can start a call, which will hand on more.
    assert not flow.starved(_flowed(read=(184, 184), chunk=(184, 20)), yielded=200)
    # 15 of them: the fused extraction bundles 16, so it waits too.
    assert flow.starved(_flowed(read=(185, 185), chunk=(185, 20)), yielded=200)
    # An encoded call not yet written: its group will commit.
    assert not flow.starved(_flowed(read=(200, 200), chunk=(200, 20), encode=(10, 50)), yielded=200)
    # Nothing reported yet: the read's rows are queued in front of the extraction.
    assert not flow.starved(StageTable(), yielded=16) and flow.starved(StageTable(), yielded=3)
