"""Packs of about one window of tokens: what the chunk stage hands the encoder, over the bundled tokenizer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.encode.packs import RAMP_HALVINGS, Packer, pack, unpack
from pipeline.run.stages import ChunkBlock
from pipeline.schemas import CHUNK_SCHEMA, DOC_SCHEMA, PACK_SCHEMA, error_row
from pipeline.text.chunking import ChunkingConfig

from support import SAMPLES, tiny_notes

WINDOW = 64


def _documents() -> list[dict]:
    """Notes, long texts of many windows, a failed document and one that yields no tokens, mixed."""
    texts = [{"doc_id": p.name, "kind": "text", "pages": [p.read_text()]} for p in sorted((SAMPLES / "text").iterdir())]
    failed = error_row({"doc_id": "broken.pdf", "kind": "pdf", "pages": None}, "extract", "CorruptPDF", "bad xref")
    empty = {"doc_id": "empty.txt", "kind": "text", "pages": [""]}
    return tiny_notes(5) + texts[:2] + [failed] + tiny_notes(7) + [empty] + texts[2:] + tiny_notes(3)


def _chunk(docs: list[dict], in_packs: bool) -> pa.Table:
    """The chunk stage's rows: chunks, or packs past the ramp (a call's worth of packs handed on already)."""
    block = ChunkBlock(None, ChunkingConfig(max_tokens=WINDOW, overlap=8), call_packs=1 if in_packs else None)
    if in_packs:
        block.packer.handed = RAMP_HALVINGS
    return block(pa.Table.from_pylist(docs, schema=DOC_SCHEMA))


def _pack_tokens(packs: pa.Table) -> list[int]:
    return [sum(len(c["token_ids"]) for c in chunks) for chunks in packs.column("chunks").to_pylist()]


def test_packs_unpack_to_the_chunk_stages_rows_in_order_error_rows_included():
    docs = _documents()
    chunks, packs = _chunk(docs, in_packs=False), _chunk(docs, in_packs=True)
    assert packs.schema == PACK_SCHEMA
    assert unpack(packs).equals(chunks)
    assert {"CorruptPDF", "NoTokens"} <= set(unpack(packs).column("error_type").to_pylist())


def test_a_block_of_packs_holds_a_window_of_tokens_each_on_average_none_more_than_two():
    packs = _chunk(_documents(), in_packs=True)
    tokens = _pack_tokens(packs)
    assert len(tokens) > 10
    assert sum(tokens[:-1]) >= WINDOW * (len(tokens) - 1)
    assert max(tokens) <= 2 * WINDOW


def test_tiny_notes_share_a_pack_and_full_windows_take_one_each():
    """A call of N packs is about N windows of tokens: 17-token notes fill a pack by the handful, where each
    full window of a long text is about one pack of its own."""
    notes = _chunk(tiny_notes(16), in_packs=True)
    tokens = sum(_pack_tokens(notes))
    assert notes.num_rows == pytest.approx(tokens / WINDOW, abs=1) and unpack(notes).num_rows == 16
    text = min((SAMPLES / "text").iterdir())
    long_text = [{"doc_id": text.name, "kind": "text", "pages": [text.read_text()]}]
    windows = _chunk(long_text, in_packs=False).num_rows
    assert windows >= 4
    assert _chunk(long_text, in_packs=True).num_rows == pytest.approx(windows, abs=windows // 4 + 1)


def test_packs_from_several_blocks_unpack_as_one_call():
    """Ray Data hands an encoder call the packs of several chunk-stage calls, and may cut a block's packs."""
    first, second = _chunk(tiny_notes(40), in_packs=True), _chunk(_documents(), in_packs=True)
    call = pa.concat_tables([first.slice(1), second.slice(0, 3)])
    expected = pa.concat_tables([unpack(first.slice(1)), unpack(second.slice(0, 3))])
    assert unpack(call).equals(expected)


def test_no_chunks_make_no_packs():
    packs = pack(pa.Table.from_pylist([], schema=CHUNK_SCHEMA), WINDOW)
    assert packs.num_rows == 0 and unpack(packs).equals(pa.Table.from_pylist([], schema=CHUNK_SCHEMA))


def test_an_actors_first_packs_ramp_from_a_sixteenth_of_a_window_so_the_first_calls_are_short():
    """The first call's worth of packs hold 1/16 window each (or one chunk), the next 1/8, and so on to a
    window: a call of N packs grows from about N/16 windows of tokens to N, so the first groups commit after a
    few files. The job's window (256) over 17-token notes, handed on 16 at a time as the chunk stage does."""
    window, call_packs = 256, 20
    notes = ChunkBlock(None, ChunkingConfig(max_tokens=window, overlap=8))(
        pa.Table.from_pylist(tiny_notes(2000), schema=DOC_SCHEMA)
    )
    packer = Packer(window, call_packs)
    packs = pa.concat_tables([packer(notes.slice(i, 16)) for i in range(0, notes.num_rows, 16)])
    assert unpack(packs).equals(notes)
    tokens = _pack_tokens(packs)
    calls = [sum(tokens[i : i + call_packs]) for i in range(0, len(tokens), call_packs)]
    full = call_packs * window
    assert calls[0] <= full / 8 and calls[1] <= full / 4 and calls[2] <= full / 2
    assert calls[0] < calls[1] < calls[2] < calls[3] < calls[4]
    assert all(c >= full * 0.75 for c in calls[5:-1]) and len(calls) > 8
