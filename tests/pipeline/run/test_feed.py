"""The work's source: the recorded parts read back through Ray Data as the listing grows, each work block a
Ray Data block of its own; and the run's coordinator actor that holds the feed and the stages' tally (a real
local Ray)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import ray
from ray.data._internal.logical.optimizers import get_physical_ruleset  # private: where the rule lives

from pipeline.io.shards import UNIT_BYTES, ShardFields
from pipeline.output import inputs
from pipeline.output.groups import record_groups, work_blocks
from pipeline.run.feed import BlocksAsYielded, RecordedInputs, Window, in_flight_groups, read_recorded
from pipeline.run.stage_clock import StageClock
from pipeline.run.tally import RunCoordinator, SendToTally

from support import listing, text_files

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_local")]


def _source(output: str, feed, window: int = 1000) -> ray.data.Dataset:
    return read_recorded(RecordedInputs(output, feed, frozenset(), ShardFields(), UNIT_BYTES, window))


def _recorded(tmp_path, files: int, group_size: int) -> list[pa.Table]:
    """`files` tiny files recorded as part 0 in groups of `group_size`: their work blocks, one per group."""
    recorded = record_groups(listing(text_files(files)), group_size, "s")
    for layout_dir in ("_inputs", "_staging"):
        (tmp_path / layout_dir).mkdir()
    inputs.write_part(pafs.LocalFileSystem(), str(tmp_path), 0, recorded, 0, group_size)
    return list(work_blocks(recorded))


def test_each_work_block_leaves_the_read_as_a_block_of_its_own_before_the_listing_ends(tmp_path):
    """Ray Data merges a read task's yields up to 128 MiB unless BlocksAsYielded turns that off for this read:
    merged, the first block would wait for the listing's end, and one extraction task would get every file."""
    expected = _recorded(tmp_path, 40, 8)
    feed = RunCoordinator.remote()
    ray.get(feed.recorded.remote(1))
    assert len(expected) == 5  # one per group of 8 tiny files
    # The listing ends only once all but the last block reached the driver (its iterator holds one back),
    # or after a minute: merged blocks would wait for the end, and so never arrive before it.
    nearly_all, ended = threading.Event(), threading.Event()

    def end_listing():
        nearly_all.wait(timeout=60)
        ended.set()
        ray.get(feed.end.remote())

    threading.Thread(target=end_listing, daemon=True).start()
    blocks, before_the_end = [], 0
    for block in _source(str(tmp_path), feed).iter_batches(batch_size=None, batch_format="pyarrow"):
        blocks.append(block)
        before_the_end += not ended.is_set()
        if len(blocks) == len(expected) - 1:
            nearly_all.set()

    assert sorted(b.column("uri").to_pylist() for b in blocks) == sorted(b.column("uri").to_pylist() for b in expected)
    assert before_the_end == len(expected) - 1, "the work blocks waited for the listing's end"


def test_the_read_stays_a_window_of_groups_ahead_of_the_commits(tmp_path):
    """Without the window the read would run through the whole record at once (Ray Data holds stages back by
    bytes, and tiny files are a few KiB), and the driver would hold Ray Data's state for every queued block."""
    expected = _recorded(tmp_path, 24, 4)
    feed = RunCoordinator.remote(stall_seconds=600)
    ray.get([feed.recorded.remote(1), feed.end.remote()])
    window, arrived, first = 2, [], threading.Event()

    def consume():
        for block in _source(str(tmp_path), feed, window).iter_batches(batch_size=None):
            arrived.append(block)
            first.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    assert first.wait(timeout=120)
    time.sleep(3)  # unbounded, the other groups' blocks would come now
    assert 1 <= len(arrived) <= window
    ray.get(feed.commit.remote(len(expected)))
    consumer.join(timeout=120)
    assert len(arrived) == len(expected) == 6


def test_the_drivers_narrower_window_holds_the_read_back(tmp_path):
    """The window the driver sends with a commit (`Window`, from what committed groups held) binds the read,
    though the read's own window, the most files a call may hold, is far wider: PDFs queued in front of the
    encoder otherwise, the whole corpus and Ray Data's state for each of its blocks on the driver."""
    expected = _recorded(tmp_path, 24, 4)
    feed = RunCoordinator.remote(stall_seconds=600)
    ray.get([feed.recorded.remote(1), feed.end.remote(), feed.commit.remote(0, 2)])
    arrived, first = [], threading.Event()

    def consume():
        for block in _source(str(tmp_path), feed, window=1000).iter_batches(batch_size=None):
            arrived.append(block)
            first.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    assert first.wait(timeout=120)
    time.sleep(3)  # with the read's own window, the other groups' blocks would come now
    assert 1 <= len(arrived) <= 2
    ray.get(feed.commit.remote(len(expected)))
    consumer.join(timeout=120)
    assert len(arrived) == len(expected) == 6


def test_the_window_follows_the_tokens_per_file_of_the_committed_groups():
    # One 2-core CPU encoder: calls of 256 packs of 256 tokens, at most 16 files a pack; groups of 64.
    window = Window(call_tokens=256 * 256, call_files=256 * 16, actors=1, group_size=64)
    assert window.groups == in_flight_groups(256 * 16, 1, 64) == 192  # before any commit: the most files
    tiny = {"docs_ok": 64, "docs_failed": 0, "tokens": 64 * 17}
    assert window.committed(tiny) == 181  # 17-token notes: a call's 65,536 tokens are 3,855 of them
    pdfs = {"docs_ok": 63, "docs_failed": 1, "tokens": 64 * 2700}
    window = Window(call_tokens=256 * 256, call_files=256 * 16, actors=1, group_size=64)
    assert window.committed(pdfs) == 2  # 24 PDFs of 2,700 tokens to a call: 3 calls are 72 files
    failed = {"docs_ok": 0, "docs_failed": 64, "tokens": 0}
    assert Window(256 * 256, 256 * 16, 1, 64).committed(failed) == 192  # no tokens yet: nothing to go by


def test_a_full_window_without_commits_stalls_then_lets_the_next_group_through(tmp_path):
    """A stage batching rows that a full window keeps back would wait for ever: the read goes on after a stall."""
    expected = _recorded(tmp_path, 12, 4)
    feed = RunCoordinator.remote(stall_seconds=0.5)
    ray.get([feed.recorded.remote(1), feed.end.remote()])
    blocks = list(_source(str(tmp_path), feed, window=1).iter_batches(batch_size=None))
    assert len(blocks) == len(expected) == 3


def test_the_feeds_count_of_recorded_parts_only_grows():
    """The recorder tells the feed what a stopped run had recorded without waiting for it (the feed's process
    may still be starting), then each new part: an async actor may run those calls out of order."""
    feed = RunCoordinator.remote()
    ray.get([feed.recorded.remote(3), feed.recorded.remote(1)])
    assert ray.get(feed.wait_for.remote(2), timeout=60)


def test_the_rule_is_registered_once_and_leaves_other_datasets_shaped():
    BlocksAsYielded.register()
    BlocksAsYielded.register()
    assert list(get_physical_ruleset()).count(BlocksAsYielded) == 1

    def many_small(batch: pa.Table):
        for i in range(50):
            yield pa.table({"i": [i]})

    merged = ray.data.range(1).map_batches(many_small, batch_size=None, batch_format="pyarrow", num_cpus=0.5)
    assert merged.materialize().num_blocks() == 1


@ray.remote(num_cpus=0)  # three of them at once on the module's 2-CPU Ray
class _Stage:
    """A stage's worker as the job makes one: it times calls and reports them through the stages' `record`."""

    def __init__(self, record: SendToTally):
        self.clock = StageClock(record)

    def work(self, calls: int) -> int:
        for _ in range(calls):
            with self.clock.timing("write") as counts:
                counts["rows"] += 1
            self.clock.send()
        return calls


def test_a_stage_call_returns_only_once_its_increments_are_in_the_tally():
    """The driver reads the run's tally once the last output has arrived: every increment a stage sent before
    returning must be in it by then. The coordinator is an async actor, which runs calls from different
    processes in no set order, so `record` waits for each; sent and not waited for, a fresh process's
    increments landed 0.2 s after the driver's read. Once the driver has killed the coordinator, a stage's call
    still returns."""
    coordinator = RunCoordinator.options(name="tally-probe").remote()
    sent = 0
    for _ in range(3):  # a fresh worker process each time: its first calls are the slowest to land
        stage = _Stage.remote(SendToTally("tally-probe"))
        sent += ray.get(stage.work.remote(20))
        stages = ray.get(coordinator.stages.remote()).stages
        assert stages["write"].counts["rows"] == sent
    ray.kill(coordinator)  # as a stopping driver does while its stages may still run: they go on
    assert ray.get(stage.work.remote(1), timeout=60) == 1
