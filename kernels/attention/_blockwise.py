"""`blockwise`: flash attention in plain JAX, for every platform.

The FlashAttention-2 loop order written with XLA loops: a `lax.map` over
(batch row, block of queries), and for each a loop over the blocks of keys/values
that can matter to it feeding the online softmax, with heads vectorised. Scores
exist only as [N, block_q, block_k] tiles, so memory is linear in sequence length.

Skipping: each query block loops only over the key blocks that can hold a key it
sees (kv_lengths, segment ids, window, causality; `key_block_ranges`): causal, a query
block never visits the key blocks wholly past its last query. The bounds differ per
row and query block, so the loops are sequential with dynamic trip counts: a
`lax.cond` or a batched loop would run under `vmap` as a select over every block
and save nothing. A packed row then costs the sum of its squared sequence
lengths, a window layer T * window. Forward only: nothing saved per step.

A relative position bias is gathered per tile from its distances, never as the
whole [T, S] matrix.

Grouped-query attention (K key/value heads, G = N / K query heads each): a query
tile folds each K/V head's G query heads into its rows, [K, G * block_q, H]
against the key tile [K, block_k, H], so k and v are never repeated and each key
tile feeds one matmul G times as tall; row g * block_q + t is query t of head
n = k * G + g. With K = N (G = 1) that is the multi-head tile [N, block_q, H].
"""

import dataclasses

import jax
import jax.numpy as jnp

from kernels.attention import _online_softmax
from kernels.attention._buckets import RelativeBias
from kernels.attention._masking import bias_by_distance, key_block_ranges, pad_seq, relative_bias, visible
from kernels.bfloat16_bits import as_bits, from_bits


@dataclasses.dataclass(frozen=True)
class BlockwiseBlocks:
    # Measured on CPU (bench/attention.py): a [N, 256, 128] float32 score tile
    # stays in cache. Vectorising all queries instead streams [N, T, block_k]
    # through memory each step and runs ~1.3x slower at 2048-4096 tokens.
    block_q: int = 256
    block_k: int = 128


def blockwise_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_lengths: jax.Array,
    segment_ids: jax.Array | None = None,
    *,
    scale: float,
    window: int | None = None,
    bias: RelativeBias | None = None,
    causal: bool = False,
    blocks: BlockwiseBlocks = BlockwiseBlocks(),
) -> jax.Array:
    """q 'BTNH', k and v 'BSKH' (K dividing N), kv_lengths [B], segment_ids [B, T] or None -> 'BTNH' in q's
    dtype."""
    batch, q_seq, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    groups = heads // kv_heads
    block_q, block_k = min(blocks.block_q, q_seq), min(blocks.block_k, k.shape[1])
    # Whole blocks only: padded queries are sliced off at the end, padded keys lie
    # beyond every kv_length and are masked.
    q, k, v = pad_seq(q, block_q), pad_seq(k, block_k), pad_seq(v, block_k)
    q_blocks, kv_seq = q.shape[1] // block_q, k.shape[1]
    ranges = key_block_ranges(
        kv_lengths,
        segment_ids,
        window,
        q_blocks=q_blocks,
        block_q=block_q,
        kv_seq=kv_seq,
        block_k=block_k,
        causal=causal,
    )

    # bfloat16 blocks as their bits: as bfloat16, XLA:CPU transposed them into float32 blocks and
    # converted each back in the loop, 11% of the bfloat16 encoder on a Xeon (kernels.bfloat16_bits).
    def split(x, block):  # 'BTNH' -> [B, T / block, N, block, H]
        return as_bits(x).reshape(batch, -1, block, x.shape[2], head_dim).transpose(0, 1, 3, 2, 4)

    k_blocks, v_blocks = split(k, block_k), split(v, block_k)
    if segment_ids is not None:
        q_segments = pad_seq(segment_ids, block_q).reshape(batch, q_blocks, block_q, 1)
        k_segments = pad_seq(segment_ids, block_k).reshape(batch, -1, 1, block_k)
    by_distance_ND = None if bias is None else bias_by_distance(bias)  # once, not per tile

    def attend(item):  # one batch row's block of queries [K, G * block_q, H] against its key blocks
        row, i, q_block, (first, end) = item
        q_block = from_bits(q_block)
        q_positions = i * block_q + jnp.arange(block_q)[:, None]
        # The mask's query rows: a block's positions and segment ids once per query head of a group.
        q_rows = jnp.tile(q_positions, (groups, 1))
        q_segment = None if segment_ids is None else jnp.tile(q_segments[row, i], (groups, 1))

        def fold(j, state):
            k_positions = j * block_k + jnp.arange(block_k)
            k_segment = None if segment_ids is None else k_segments[row, j]
            valid = visible(q_rows, k_positions, kv_lengths[row], q_segment, k_segment, window, causal)
            k_block, v_block = from_bits(k_blocks[row, j]), from_bits(v_blocks[row, j])
            tile_bias = None
            if bias is not None:  # [N, block_q, block_k] as the rows of the query tile: [K, G * block_q, block_k]
                tile_bias = relative_bias(by_distance_ND, q_positions, k_positions).reshape(kv_heads, -1, block_k)
            return _online_softmax.step(state, q_block, k_block, v_block, valid, scale, bias=tile_bias, truncate=True)

        state = jax.lax.fori_loop(first, end, fold, _online_softmax.init(q_block))
        return _online_softmax.finish(state)

    rows, indices = (x.reshape(-1) for x in jnp.meshgrid(jnp.arange(batch), jnp.arange(q_blocks), indexing="ij"))
    # A query block [N, block_q, H] is [K, G * block_q, H] as it lies: the G heads of a group are adjacent.
    q_items = split(q, block_q).reshape(-1, kv_heads, groups * block_q, head_dim)
    items = (rows, indices, q_items, ranges.reshape(-1, 2))
    # float32 until the map is done: XLA:CPU writes each block into a bfloat16 result by converting the
    # whole stacked buffer to float32 and back, once per block (3.8% of the bfloat16 encoder on a Xeon).
    out = jax.lax.map(attend, items)  # [B * T / block_q, K, G * block_q, H] float32
    out = out.reshape(batch, q_blocks, heads, block_q, head_dim).transpose(0, 1, 3, 2, 4)
    return out.reshape(batch, -1, heads, head_dim)[:, :q_seq].astype(q.dtype)
