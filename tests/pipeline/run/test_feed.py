"""The work's source: the recorded parts read back through Ray Data as the listing grows, each work block a
Ray Data block of its own (a real local Ray)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import ray
from ray.data._internal.logical.optimizers import get_physical_ruleset  # private: where the rule lives

from pipeline.io.shards import UNIT_BYTES, ShardFields
from pipeline.output import inputs
from pipeline.output.groups import record_groups, work_blocks
from pipeline.run.feed import BlocksAsYielded, ListingFeed, RecordedInputs, read_recorded

from support import listing, text_files

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def ray_local():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _source(output: str, feed) -> ray.data.Dataset:
    return read_recorded(RecordedInputs(output, feed, frozenset(), ShardFields(), UNIT_BYTES))


def test_each_work_block_leaves_the_read_as_a_block_of_its_own_before_the_listing_ends(tmp_path):
    """Ray Data merges a read task's yields up to 128 MiB unless BlocksAsYielded turns that off for this read:
    merged, the first block would wait for the listing's end, and one extraction task would get every file."""
    recorded = record_groups(listing(text_files(40)), 8, "s")
    for layout_dir in ("_inputs", "_staging"):
        (tmp_path / layout_dir).mkdir()
    inputs.write_part(pafs.LocalFileSystem(), str(tmp_path), 0, recorded, 0)
    feed = ListingFeed.remote()
    ray.get(feed.recorded.remote(1))

    expected = list(work_blocks(recorded))
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

    assert sorted(b.column("doc_id").to_pylist() for b in blocks) == sorted(
        b.column("doc_id").to_pylist() for b in expected
    )
    assert before_the_end == len(expected) - 1, "the work blocks waited for the listing's end"


def test_the_rule_is_registered_once_and_leaves_other_datasets_shaped():
    BlocksAsYielded.register()
    BlocksAsYielded.register()
    assert list(get_physical_ruleset()).count(BlocksAsYielded) == 1

    def many_small(batch: pa.Table):
        for i in range(50):
            yield pa.table({"i": [i]})

    merged = ray.data.range(1).map_batches(many_small, batch_size=None, batch_format="pyarrow", num_cpus=0.5)
    assert merged.materialize().num_blocks() == 1
