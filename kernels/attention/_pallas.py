"""`pallas`: this project's flash-attention forward kernel, written in Pallas.

Grid (B, N, T / block_q): each program owns one tile of queries of one (batch,
head) and streams that head's keys/values through the online softmax in tiles of
block_k, so scores never exist beyond [block_q, block_k]. Padding is masked inside
the kernel from kv_lengths. The same kernel lowers to Mosaic on TPU and Triton on
GPU, and runs on CPU in Pallas interpret mode: an emulator meant for tests, which
on CPU happens to run about as fast as `blockwise`.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

from kernels.attention import _online_softmax, _platform
from kernels.attention._masking import pad_seq


@dataclasses.dataclass(frozen=True)
class PallasBlocks:
    """Tile sizes, powers of two (Triton requires it)."""

    block_q: int = 128
    block_k: int = 128

    @classmethod
    def for_platform(cls, platform: str) -> "PallasBlocks":
        # 128x128, the usual flash-attention tile, keeps the float32 scores
        # (64 KiB) on-chip on TPU and GPU. Interpret mode on CPU pays per grid
        # step and per loop step instead: 512x512 there runs 1.5-2x faster.
        return cls(512, 512) if platform == "cpu" else cls()


def _flash_kernel(lengths_ref, q_ref, k_ref, v_ref, o_ref, *, scale: float, block_k: int):
    """lengths_ref [1, block_k] (this batch row's kv_length, repeated), q_ref and
    o_ref [block_q, H], k_ref and v_ref [S, H] (the whole padded sequence)."""
    q = q_ref[...]
    block_q = q.shape[0]
    # Lengths arrive as a vector, not a scalar: TPU vector code cannot read a
    # scalar from VMEM, and a broadcast compare works the same under Triton.
    length = jnp.broadcast_to(lengths_ref[...], (block_q, block_k))

    def fold_block(j, state):
        start = pl.multiple_of(j * block_k, block_k)
        keys = pl.ds(start, block_k)
        positions = start + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
        return _online_softmax.step(state, q, k_ref[keys, :], v_ref[keys, :], positions < length, scale)

    init = _online_softmax.init(q)
    state = jax.lax.fori_loop(0, k_ref.shape[0] // block_k, fold_block, init)
    o_ref[...] = _online_softmax.finish(state).astype(o_ref.dtype)


def _compiler_params(platform: str, head_dim: int):
    if platform == "tpu":
        return pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel"))
    if platform == "gpu":
        return pltriton.CompilerParams(num_warps=4 if head_dim <= 64 else 8, num_stages=2)
    return None


def _tile(size: int, block: int) -> int:
    """The block size used: at most the sequence rounded up to a power of two, and
    at least 16, the smallest matmul Triton takes."""
    return min(block, max(16, pl.next_power_of_2(size)))


def pallas_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_lengths: jax.Array,
    segment_ids=None,
    *,
    scale: float,
    window=None,
    blocks: PallasBlocks | None = None,
    platform: str | None = None,
) -> jax.Array:
    """q 'BTNH', k and v 'BSNH', kv_lengths [B] -> 'BTNH' in q's dtype.

    `platform` defaults to the one being traced for; pass it to lower for another
    (e.g. to check the Mosaic or Triton lowering on a CPU host). `blocks` defaults
    to `PallasBlocks.for_platform(platform)`.
    """
    platform = platform or _platform.platform()
    blocks = blocks or PallasBlocks.for_platform(platform)
    batch, q_seq, heads, head_dim = q.shape
    block_q, block_k = _tile(q_seq, blocks.block_q), _tile(k.shape[1], blocks.block_k)
    # Whole tiles only: padded queries are sliced off, padded keys lie beyond every
    # kv_length and are masked.
    q_bnth = pad_seq(q, block_q).transpose(0, 2, 1, 3)
    k_bnsh = pad_seq(k, block_k).transpose(0, 2, 1, 3)
    v_bnsh = pad_seq(v, block_k).transpose(0, 2, 1, 3)
    kv_seq = k_bnsh.shape[2]
    lengths = jnp.broadcast_to(kv_lengths.astype(jnp.int32)[:, None, None], (batch, 1, block_k))

    q_tile = pl.BlockSpec((None, None, block_q, head_dim), lambda b, n, i: (b, n, i, 0))
    kv_whole = pl.BlockSpec((None, None, kv_seq, head_dim), lambda b, n, i: (b, n, 0, 0))
    out = pl.pallas_call(
        lambda *refs: _flash_kernel(*refs, scale=scale, block_k=block_k),
        # Varying over the same mesh axes as q when called inside jax.shard_map.
        out_shape=jax.ShapeDtypeStruct(q_bnth.shape, q.dtype, manual_axis_type=jax.typeof(q_bnth).manual_axis_type),
        grid=(batch, heads, q_bnth.shape[2] // block_q),
        in_specs=[
            pl.BlockSpec((None, 1, block_k), lambda b, n, i: (b, 0, 0)),
            q_tile,
            kv_whole,
            kv_whole,
        ],
        out_specs=q_tile,
        compiler_params=_compiler_params(platform, head_dim),
        interpret=platform == "cpu",
        name="docembed_flash_attention",
    )(lengths, q_bnth, k_bnsh, v_bnsh)
    return out.transpose(0, 2, 1, 3)[:, :q_seq]
