"""The stages as plain calls without Ray."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest

from pipeline.encode import model_dir
from pipeline.errors import ModelError
from pipeline.output.groups import record_groups, work_blocks
from pipeline.run.stages import ChunkBlock, extract_block
from pipeline.text.chunking import ChunkingConfig

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


def test_a_file_named_like_a_shard_row_or_like_another_files_doc_id_has_a_doc_id_of_its_own(tmp_path):
    """A row's doc_id is `<shard>#<id>`; a file's is its path with "%" and "#" percent-encoded, so that neither
    `col.jsonl#x.txt` (a file) and row `x.txt` of `col.jsonl`, nor files `a#b.txt` and `a%23b.txt`, share one."""
    (tmp_path / "col.jsonl").write_text(json.dumps({"id": "x.txt", "text": "the row x.txt"}) + "\n")
    for name in ("col.jsonl#x.txt", "a#b.txt", "a%23b.txt"):
        (tmp_path / name).write_text(f"the file {name}")
    uris = sorted(str(p) for p in tmp_path.iterdir())
    docs = pa.concat_tables(b for block in work_blocks(record_groups(listing(uris), 64)) for b in extract_block(block))
    got = {d: pages[0] for d, pages in zip(docs.column("doc_id").to_pylist(), docs.column("pages").to_pylist())}
    assert len(got) == docs.num_rows == 4
    assert got == {
        f"{tmp_path}/col.jsonl#x.txt": "the row x.txt",
        f"{tmp_path}/col.jsonl%23x.txt": "the file col.jsonl#x.txt",
        f"{tmp_path}/a%23b.txt": "the file a#b.txt",
        f"{tmp_path}/a%2523b.txt": "the file a%23b.txt",
    }
    # A doc_id without a row's "#", unquoted, is the path of the file whose text it holds.
    assert all(Path(unquote(d)).read_text() == text for d, text in got.items() if "#" not in d)


def test_the_cpu_stages_the_writer_and_the_tally_never_load_jax():
    """Their processes (Ray Data's CPU-stage actors, the writers, the run's tally) run beside the encoder on
    the same cores: importing JAX would cost each a second of CPU and a hundred MB for nothing. Each of them
    also unpickles the stages' `record`, and so imports the module that defines it."""
    assert loaded_modules("pipeline.run.stages, pipeline.output.sink, pipeline.run.tally", "'jax' in m") == "[]"


def test_the_run_coordinator_loads_neither_ray_data_nor_jax():
    """The coordinator's process starts with every job beside the stages' own: Ray Data's import would triple
    what it takes to start (`pipeline.run.listing_feed`'s docstring has the figures)."""
    assert loaded_modules("pipeline.run.tally", "m in ('ray.data', 'jax')") == "[]"


def test_a_chunk_stage_whose_node_holds_another_tokenizer_than_the_drivers_refuses_at_its_first_call():
    """Its ids would be written under the output's fingerprint. Refused at a call, which reaches the user as one
    line, not in the constructor, whose traceback Ray prints whole."""
    chunking = ChunkingConfig(max_tokens=256, overlap=32)
    refusing = ChunkBlock(None, chunking, tokenizer_identity="0123456789abcdef")
    with pytest.raises(ModelError, match="this node's tokenizer is not the job's driver's"):
        refusing(pa.table({}))
    same = ChunkBlock(None, chunking, tokenizer_identity=model_dir.resolve(None).tokenizer_identity)
    assert same.refusal is None
