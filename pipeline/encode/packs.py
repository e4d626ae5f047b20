"""Chunk rows handed to the encoder in packs of about one window of tokens, so that a count of rows counts tokens.

    chunks [n rows, CHUNK_SCHEMA] -> pack -> packs [p rows, PACK_SCHEMA] -> unpack -> the same chunks, in order

Ray Data sizes a stage's calls in rows (`map_batches`' batch_size), while what an
encoder call costs, and how much of it is padding, goes by tokens: a call of 128
chunk rows is 128 windows of a PDF's full chunks, but of 17-token notes it is 9
packed rows, one full batch and a padded tail. So the chunk stage hands on
packs: pack k of a block holds the consecutive chunk rows whose first token lies
in [k * window, (k + 1) * window) of the block's tokens. A block's packs hold a
window of tokens each on average, its last one the rest; none holds more than
two windows (a chunk is at most one), and error rows (no tokens) ride in the
pack where they stand. An encoder call of N packs is then about N windows of
tokens, whatever the documents' lengths, and the encoder packs them into rows
itself (`pipeline.encode.batching`).

A pack holds rows of one chunk-stage call only, so at most that call's documents.
Plain Arrow, no JAX: the chunk stage's processes pack.

`Packer` is what a chunk-stage actor packs with: its first packs are smaller (see
there), so that a job's first encoder calls are short and its first groups
commit early.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.schemas import PACK_SCHEMA

# A chunk-stage actor's first packs hold 1/2**RAMP_HALVINGS of a window of tokens (see Packer).
RAMP_HALVINGS = 4


class Packer:
    """Chunk rows [n] -> packs [p], for an encoder that takes `call_packs` packs a call; one per chunk actor.

    A call waits until its packs have arrived, and a group commits only when its
    last chunk is encoded, so full-size calls would hold the first commit back
    until a whole call's files were read (2,048 tiny files, 128 windows of
    tokens, on a 2-core CPU encoder). So the packs start at a sixteenth of the
    window and double each time this actor has handed on a call's worth: the
    encoder's first calls hold about 1/16, 1/8, 1/4 and 1/2 of a full call's
    tokens, four calls more in all, and then every pack is a window.
    """

    def __init__(self, window: int, call_packs: int):
        self.window = window
        self.call_packs = call_packs
        self.handed = 0  # packs this actor has handed on

    def __call__(self, chunks: pa.Table) -> pa.Table:
        halvings = max(0, RAMP_HALVINGS - self.handed // self.call_packs)
        packs = pack(chunks, max(1, self.window >> halvings))
        self.handed += packs.num_rows
        return packs


def pack(chunks: pa.Table, window: int) -> pa.Table:
    """Chunk rows [n] -> packs [p] of about `window` tokens each (p = 0 when n = 0)."""
    lengths_N = pc.list_value_length(chunks.column("token_ids")).fill_null(0).to_numpy()
    starts_N = np.cumsum(lengths_N) - lengths_N
    pack_of_N = starts_N // window
    firsts = np.flatnonzero(np.diff(pack_of_N, prepend=-1))
    offsets = np.append(firsts, len(chunks)).astype(np.int32)
    members = chunks.combine_chunks().to_struct_array().combine_chunks()
    return pa.Table.from_arrays([pa.ListArray.from_arrays(offsets, members)], schema=PACK_SCHEMA)


def unpack(packs: pa.Table) -> pa.Table:
    """Packs [p] -> their chunk rows [n], in the order they were packed."""
    return pa.Table.from_struct_array(packs.column("chunks").combine_chunks().flatten())
