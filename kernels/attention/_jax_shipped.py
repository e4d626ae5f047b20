"""Wrappers for the attention kernels that JAX itself ships.

- `tpu_flash`: `jax.experimental.pallas.ops.tpu.flash_attention`: layout 'BNTH',
  scale applied in-kernel (`sm_scale`, whose default is 1.0), padding and packed
  rows through segment ids [B, T] and [B, S], its `causal` flag (row positions,
  tiles above the diagonal skipped). It has no sliding window: the dispatch
  refuses windows for it.
- `tpu_splash`: `jax.experimental.pallas.ops.tpu.splash_attention`: one batch
  row at a time in layout 'NTH', no scale argument (queries are pre-scaled),
  padding and packed rows through segment ids [T] and [S], the window and
  causality as its static masks (`LocalMask`, `CausalMask`: blocks they hide are
  skipped).
- `cudnn`: `jax.nn.dot_product_attention(implementation="cudnn")`: layout
  'BTNH' like ours, padding through `key_value_seq_lengths`, its `is_causal`
  (row positions, as its XLA path's lower-triangular mask). Its public API has
  neither segment ids nor a two-sided window (cuDNN's window is causal, left
  only): the dispatch refuses both for it.

Grouped-query attention: JAX's TPU `flash_attention` takes one head count for q,
k and v, so its wrapper repeats k and v to q's heads (`_repeat_kv`); splash's
multi-head kernel and cuDNN's take K < N key/value heads dividing N natively, in
the same order (splash reads K/V head n // G for query head n), and get them as
they are.

Every causal mask here starts at the top left: query t sees key s <= t whatever
the lengths, as `attention` defines it.

Segment ids and kv_lengths become one pair of segment ids
(`canonical_segment_ids`). What these kernels do for a query that sees no key is
unspecified (splash calls it invalid: a zero softmax denominator), so such
queries are zeroed afterwards (`sees_a_key`). The TPU kernels take sequences in
whole blocks: we pad, then slice.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash_lib
from jax.experimental.pallas.ops.tpu import splash_attention as splash_lib

from kernels.attention import _platform
from kernels.attention._masking import canonical_segment_ids, pad_seq, sees_a_key

TPU_MIN_BLOCK = 128


def _splash_block(padded_seq: int) -> int:
    """Largest of 512/256/128 dividing the sequence (MaxText runs splash at 512)."""
    return next(b for b in (512, 256, TPU_MIN_BLOCK) if padded_seq % b == 0)


def _repeat_kv(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """k and v 'BSKH' repeated to q's N heads, head n from K/V head n // (N / K)."""
    # JAX's TPU flash_attention takes one head count for q, k and v: no grouped-query attention without the copy.
    groups = q.shape[2] // k.shape[2]
    if groups == 1:
        return k, v
    return jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)


def _zero_where_no_key(out, kv_lengths, segment_ids, window, causal):
    """'BTNH' out with the queries that see no key set to zeros."""
    return jnp.where(sees_a_key(kv_lengths, segment_ids, window, causal, out.shape[1])[:, :, None, None], out, 0)


def tpu_flash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_lengths: jax.Array,
    segment_ids: jax.Array | None,
    *,
    scale: float,
    window: None,
    causal: bool = False,
) -> jax.Array:
    """q 'BTNH', k and v 'BSKH' (K dividing N), kv_lengths [B], segment_ids [B, T] or None -> 'BTNH'."""
    q_seq = q.shape[1]
    k, v = _repeat_kv(q, k, v)
    q_bnth, k_bnsh, v_bnsh = (pad_seq(x, TPU_MIN_BLOCK).transpose(0, 2, 1, 3) for x in (q, k, v))
    q_ids, kv_ids = canonical_segment_ids(kv_lengths, segment_ids, q_bnth.shape[2], k_bnsh.shape[2])
    # Its default tiles are 128, which is why sequences are padded to 128.
    out = tpu_flash_lib.flash_attention(
        q_bnth, k_bnsh, v_bnsh, segment_ids=tpu_flash_lib.SegmentIds(q_ids, kv_ids), causal=causal, sm_scale=scale
    )
    return _zero_where_no_key(out.transpose(0, 2, 1, 3)[:, :q_seq], kv_lengths, segment_ids, window, causal)


@functools.lru_cache(maxsize=64)
def _splash_kernel(heads: int, q_seq: int, kv_seq: int, window: int | None, causal: bool):
    """Built once per shape and masks: the mask's block structure is computed on the host."""
    shape = (q_seq, kv_seq)
    if window is not None:  # keys window before the query to window after it, or to the query itself
        head_mask = splash_lib.LocalMask(shape, (window, 0 if causal else window), 0)
    else:
        head_mask = splash_lib.CausalMask(shape) if causal else splash_lib.FullMask(shape)
    block_q, block_kv = _splash_block(q_seq), _splash_block(kv_seq)
    blocks = splash_lib.BlockSizes(block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv)
    # Concrete arrays even when first called under jit: the cache outlives the trace.
    with jax.ensure_compile_time_eval():
        return splash_lib.make_splash_mha_single_device(
            splash_lib.MultiHeadMask([head_mask] * heads), block_sizes=blocks
        )


def tpu_splash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_lengths: jax.Array,
    segment_ids: jax.Array | None,
    *,
    scale: float,
    window: int | None,
    causal: bool = False,
) -> jax.Array:
    """q 'BTNH', k and v 'BSKH' (K dividing N), kv_lengths [B], segment_ids [B, T] or None -> 'BTNH'."""
    q_seq = q.shape[1]
    scaled_q = (q.astype(jnp.float32) * scale).astype(q.dtype)
    q_bnth, k_bnsh, v_bnsh = (pad_seq(x, TPU_MIN_BLOCK).transpose(0, 2, 1, 3) for x in (scaled_q, k, v))
    kernel = _splash_kernel(q_bnth.shape[1], q_bnth.shape[2], k_bnsh.shape[2], window, causal)
    ids = canonical_segment_ids(kv_lengths, segment_ids, q_bnth.shape[2], k_bnsh.shape[2])

    def one_row(row):
        q_nth, k_nsh, v_nsh, q_ids, kv_ids = row
        return kernel(q_nth, k_nsh, v_nsh, segment_ids=splash_lib.SegmentIds(q=q_ids, kv=kv_ids))

    # vmap is how splash is meant to be batched, but JAX's TPU interpreter does not
    # count the grid axis that vmap adds to a pallas_call (its dimension_semantics
    # stay one short and it fails), so under emulation rows go one at a time.
    rows = (q_bnth, k_bnsh, v_bnsh, *ids)
    out = jax.lax.map(one_row, rows) if _platform.emulating_tpu() else jax.vmap(one_row)(rows)
    return _zero_where_no_key(out.transpose(0, 2, 1, 3)[:, :q_seq], kv_lengths, segment_ids, window, causal)


def cudnn_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_lengths: jax.Array,
    segment_ids: None,
    *,
    scale: float,
    window: None,
    causal: bool = False,
) -> jax.Array:
    """q 'BTNH', k and v 'BSKH' (K dividing N: grouped-query attention natively), kv_lengths [B] -> 'BTNH'."""
    # At least one key: what cuDNN does with none is unspecified; zeroed below.
    lengths = jnp.maximum(kv_lengths, 1)
    out = jax.nn.dot_product_attention(
        q, k, v, scale=scale, is_causal=causal, key_value_seq_lengths=lengths, implementation="cudnn"
    )
    return _zero_where_no_key(out, kv_lengths, segment_ids, window, causal)
