"""The stages as plain calls without Ray."""

from __future__ import annotations

import json

import pyarrow as pa

from pipeline.output.groups import record_groups, work_blocks
from pipeline.run.stages import extract_block

from support import listing, loaded_modules


def test_extract_stage_streams_a_shard_in_blocks_and_counts_it_at_the_end(tmp_path, monkeypatch):
    import pipeline.run.stages as stages

    monkeypatch.setattr(stages, "SHARD_BLOCK", 4)
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps({"id": i, "text": f"t{i}"}) for i in range(10)))
    (block,) = work_blocks(record_groups(listing([str(tmp_path / "s.jsonl")]), 64))
    out = list(extract_block(block))
    assert [b.num_rows for b in out] == [4, 4, 2]
    table = pa.concat_tables(out)
    assert table.column("group_docs").to_pylist() == [None] * 9 + [10]
    assert set(table.column("group").to_pylist()) == {block.column("group")[0].as_py()}


def test_the_cpu_stages_the_writer_and_the_tally_never_load_jax():
    """Their processes (Ray Data's CPU-stage actors, the writers, the run's tally) run beside the encoder on
    the same cores: importing JAX would cost each a second of CPU and a hundred MB for nothing. Each of them
    also unpickles the stages' `record`, and so imports the module that defines it."""
    assert loaded_modules("pipeline.run.stages, pipeline.output.sink, pipeline.run.tally", "'jax' in m") == "[]"


def test_the_run_coordinator_loads_neither_ray_data_nor_jax():
    """The coordinator's process starts with every job beside the stages' own: Ray Data's import would triple
    what it takes to start (`pipeline.run.listing_feed`'s docstring has the figures)."""
    assert loaded_modules("pipeline.run.tally", "m in ('ray.data', 'jax')") == "[]"
