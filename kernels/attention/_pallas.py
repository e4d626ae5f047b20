"""`pallas`: this project's flash-attention forward kernel, written in Pallas.

Grid (B, N, T / block_q): each program owns one tile of queries of one (batch,
head) and streams that head's keys/values through the online softmax in tiles of
block_k, so scores never exist beyond [block_q, block_k]. It loops only over the
key tiles that can hold a key its queries see (`key_block_ranges`: kv_lengths,
segment ids, window, causality), a dynamic trip count read from scalars per
program, so a packed row costs the sum of its squared sequence lengths, a window
layer T * window, and causal attention skips the tiles above the diagonal. Inside
those tiles padding, segments, window and causality are masked. The same
kernel lowers to Mosaic on TPU and Triton on GPU, and runs on CPU in Pallas
interpret mode: an emulator meant for tests, whose fixed cost per grid step hides
most of what skipping saves there (bench/attention.py --masks).

Grouped-query attention (K key/value heads for N query heads): the program of query
head n reads key/value head n // (N / K); k and v are never repeated.

A relative position bias (MPNet's, T5's) comes as whole tiles, computed once outside
the kernel: with query and key tiles of one size b, the distance of element (r, c)
of tile (i, j) is (j - i) * b + c - r, so a tile's bias depends only on j - i, and
past R tiles off the diagonal every distance is beyond max_distance and shares the
last bucket. Each program reads its head's 2R + 1 tiles [b, b] and picks one per key
tile: no gather inside the kernel, which Mosaic and Triton lower as a plain index.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

from kernels.attention import _online_softmax, _platform
from kernels.attention._buckets import RelativeBias
from kernels.attention._masking import bias_by_distance, key_block_ranges, pad_seq, visible


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


def _flash_kernel(
    scalars_ref,
    q_ref,
    k_ref,
    v_ref,
    *refs,
    scale: float,
    block_k: int,
    window: int | None,
    causal: bool,
    bias_reach: int | None,
):
    """scalars_ref [B, T / block_q, 3] (whole), q_ref and o_ref [block_q, H], k_ref
    and v_ref [S, H] (the whole padded sequence); with segment ids, refs starts
    with this tile's query ids [block_q, 1] and the row's key ids [1, S]; with a
    relative bias (`bias_reach` R), this head's bias tiles [>= 2R + 1, block_q, block_k]
    come next (`_bias_tiles`)."""
    *segment_refs, o_ref = refs
    bias_ref = None if bias_reach is None else segment_refs.pop()
    q = q_ref[...]
    block_q = q.shape[0]
    q_tile = pl.program_id(2)
    first, end, length = (scalars_ref[pl.program_id(0), q_tile, n] for n in range(3))
    q_positions = q_tile * block_q + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
    q_segments = segment_refs[0][...] if segment_refs else None

    def fold_block(j, state):
        start = pl.multiple_of(j * block_k, block_k)
        keys = pl.ds(start, block_k)
        k_positions = start + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
        k_segments = segment_refs[1][:, keys] if segment_refs else None
        valid = visible(q_positions, k_positions, length, q_segments, k_segments, window, causal)
        bias = None
        if bias_ref is not None:  # the tile j - i off the diagonal, the farthest for all beyond
            bias = bias_ref[jnp.clip(j - q_tile, -bias_reach, bias_reach) + bias_reach]
        return _online_softmax.step(state, q, k_ref[keys, :], v_ref[keys, :], valid, scale, bias=bias)

    state = jax.lax.fori_loop(first, end, fold_block, _online_softmax.init(q))
    o_ref[...] = _online_softmax.finish(state).astype(o_ref.dtype)


def _compiler_params(platform: str, head_dim: int):
    if platform == "tpu":
        return pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel"))
    if platform == "gpu":
        return pltriton.CompilerParams(num_warps=4 if head_dim <= 64 else 8, num_stages=2)
    return None


def _bias_tiles(bias: RelativeBias, block: int) -> tuple[jax.Array, int]:
    """float32 [N, P, block, block] and R: tile o holds the bias of query tile i and key tile j for
    j - i = o - R (tiles of one size), for o up to 2R, beyond which every distance is past max_distance; P
    is 2R + 1 rounded up to a power of two, as Triton loads blocks (the tiles past 2R are never read)."""
    by_distance_ND = bias_by_distance(bias)
    max_distance = by_distance_ND.shape[1] // 2
    # |j - i| >= R: the nearest pair of the two tiles, (|j - i| - 1) * block + 1 apart, at least max_distance.
    reach = -(-(max_distance + block - 1) // block)
    offsets = jnp.arange(-reach, pl.next_power_of_2(2 * reach + 1) - reach)
    rows, cols = jnp.arange(block)[:, None], jnp.arange(block)[None, :]
    distances = offsets[:, None, None] * block + cols - rows
    return by_distance_ND[:, jnp.clip(distances, -max_distance, max_distance) + max_distance], reach


def _tile(size: int, block: int) -> int:
    """The block size used: at most the sequence rounded up to a power of two, and
    at least 16, the smallest matmul Triton takes."""
    return min(block, max(16, pl.next_power_of_2(size)))


def pallas_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_lengths: jax.Array,
    segment_ids: jax.Array | None = None,
    *,
    scale: float,
    window: int | None = None,
    causal: bool = False,
    blocks: PallasBlocks | None = None,
    platform: str | None = None,
    bias: RelativeBias | None = None,
) -> jax.Array:
    """q 'BTNH', k and v 'BSKH' (K dividing N), kv_lengths [B], segment_ids [B, T] or None -> 'BTNH' in
    q's dtype. `bias`: a relative position bias added to the scaled scores, per query head.

    `platform` defaults to the one being traced for; pass it to lower for another
    (e.g. to check the Mosaic or Triton lowering on a CPU host). `blocks` defaults
    to `PallasBlocks.for_platform(platform)`.
    """
    platform = platform or _platform.platform()
    blocks = blocks or PallasBlocks.for_platform(platform)
    batch, q_seq, heads, head_dim = q.shape
    block_q, block_k = _tile(q_seq, blocks.block_q), _tile(k.shape[1], blocks.block_k)
    if bias is not None:  # the bias tiles follow the diagonal of square tiles
        block_q = block_k = min(block_q, block_k)
    # Whole tiles only: padded queries are sliced off, padded keys lie beyond every
    # kv_length and are masked.
    q_bnth = pad_seq(q, block_q).transpose(0, 2, 1, 3)
    k_bnsh = pad_seq(k, block_k).transpose(0, 2, 1, 3)
    v_bnsh = pad_seq(v, block_k).transpose(0, 2, 1, 3)
    q_blocks, kv_seq = q_bnth.shape[2] // block_q, k_bnsh.shape[2]
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
    lengths = jnp.broadcast_to(kv_lengths.astype(jnp.int32)[:, None, None], (batch, q_blocks, 1))
    # Per (row, query tile): first and end key tile, kv_length.
    scalars = jnp.concatenate([ranges, lengths], axis=-1)  # [B, T / block_q, 3]

    # Scalars drive the loop bounds: on TPU they must sit in SMEM (whole: Mosaic
    # blocks SMEM only along its last two dims).
    smem = dict(memory_space=pltpu.SMEM) if platform == "tpu" else {}
    q_tile = pl.BlockSpec((None, None, block_q, head_dim), lambda b, n, i: (b, n, i, 0))
    # Query head n reads key/value head n // G: lax.div, C's division, is that for n >= 0 without Python's
    # floor corrections (which Mosaic cannot lower off a TPU); K == N reads head n itself.
    groups = heads // k.shape[2]
    kv_head = (lambda n: n) if groups == 1 else (lambda n: jax.lax.div(n, groups))
    kv_whole = pl.BlockSpec((None, None, kv_seq, head_dim), lambda b, n, i: (b, kv_head(n), 0, 0))
    in_specs = [pl.BlockSpec(**smem), q_tile, kv_whole, kv_whole]
    operands = [scalars, q_bnth, k_bnsh, v_bnsh]
    if segment_ids is not None:
        in_specs += [
            pl.BlockSpec((None, block_q, 1), lambda b, n, i: (b, i, 0)),
            pl.BlockSpec((None, 1, kv_seq), lambda b, n, i: (b, 0, 0)),
        ]
        operands += [pad_seq(segment_ids, block_q)[:, :, None], pad_seq(segment_ids, block_k)[:, None, :]]
    reach = None
    if bias is not None:
        tiles, reach = _bias_tiles(bias, block_q)
        in_specs.append(pl.BlockSpec((None, *tiles.shape[1:]), lambda b, n, i: (n, 0, 0, 0)))
        operands.append(tiles)
    kernel = functools.partial(
        _flash_kernel, scale=scale, block_k=block_k, window=window, causal=causal, bias_reach=reach
    )
    out = pl.pallas_call(
        kernel,
        # Varying over the same mesh axes as q when called inside jax.shard_map.
        out_shape=jax.ShapeDtypeStruct(q_bnth.shape, q.dtype, manual_axis_type=jax.typeof(q_bnth).manual_axis_type),
        grid=(batch, heads, q_blocks),
        in_specs=in_specs,
        out_specs=q_tile,
        compiler_params=_compiler_params(platform, head_dim),
        interpret=platform == "cpu",
        name="docembed_flash_attention",
    )(*operands)
    return out.transpose(0, 2, 1, 3)[:, :q_seq]
