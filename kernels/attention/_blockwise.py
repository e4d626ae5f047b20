"""`blockwise`: flash attention in plain JAX, for every platform.

The FlashAttention-2 loop order written with XLA loops: `lax.map` over blocks of
queries, and for each a `lax.scan` over blocks of keys/values feeding the online
softmax, with batch and heads vectorised. Scores exist only as
[B, N, block_q, block_k] tiles, so memory is linear in sequence length.
Forward only: no `jax.checkpoint`, nothing saved per step.
"""

import dataclasses

import jax
import jax.numpy as jnp

from kernels.attention import _online_softmax
from kernels.attention._masking import pad_seq


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
    *,
    scale: float,
    blocks: BlockwiseBlocks = BlockwiseBlocks(),
) -> jax.Array:
    """q 'BTNH', k and v 'BSNH', kv_lengths [B] -> 'BTNH' in q's dtype."""
    batch, q_seq, heads, head_dim = q.shape
    block_q, block_k = min(blocks.block_q, q_seq), min(blocks.block_k, k.shape[1])
    # Whole blocks only: padded queries are sliced off at the end, padded keys lie
    # beyond every kv_length and are masked.
    q, k, v = pad_seq(q, block_q), pad_seq(k, block_k), pad_seq(v, block_k)

    def split(x, block):  # 'BTNH' -> [T / block, B, N, block, H]
        return x.reshape(batch, -1, block, heads, head_dim).transpose(1, 0, 3, 2, 4)

    k_blocks, v_blocks = split(k, block_k), split(v, block_k)
    key_positions = jnp.arange(k.shape[1]).reshape(-1, 1, 1, 1, block_k)
    lengths = kv_lengths.reshape(batch, 1, 1, 1)

    def attend(q_block):  # [B, N, block_q, H] against every key block
        def fold(state, kv_block):
            k_block, v_block, positions = kv_block
            return _online_softmax.step(state, q_block, k_block, v_block, positions < lengths, scale), None

        state, _ = jax.lax.scan(fold, _online_softmax.init(q_block), (k_blocks, v_blocks, key_positions))
        return _online_softmax.finish(state).astype(q.dtype)

    out = jax.lax.map(attend, split(q, block_q))  # [T / block_q, B, N, block_q, H]
    return out.transpose(1, 0, 3, 2, 4).reshape(batch, -1, heads, head_dim)[:, :q_seq]
