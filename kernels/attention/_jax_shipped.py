"""Wrappers for the attention kernels that JAX itself ships.

- `tpu_flash`: `jax.experimental.pallas.ops.tpu.flash_attention`: layout 'BNTH',
  scale applied in-kernel (`sm_scale`), padding through segment ids [B, S].
- `tpu_splash`: `jax.experimental.pallas.ops.tpu.splash_attention`: one batch
  row at a time in layout 'NTH', no scale argument (queries are pre-scaled),
  padding through segment ids [S].
- `cudnn`: `jax.nn.dot_product_attention(implementation="cudnn")`: layout
  'BTNH' like ours, padding through `key_value_seq_lengths`.

What they do with a row that has no valid key is unspecified (splash calls it
invalid: a zero softmax denominator), so each is given at least one key and rows
with kv_length 0 are zeroed afterwards. The TPU kernels take sequences in whole
blocks: we pad, then slice.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash_lib
from jax.experimental.pallas.ops.tpu import splash_attention as splash_lib

from kernels.attention import _platform
from kernels.attention._masking import at_least_one_key, pad_seq, zero_rows_without_keys

TPU_MIN_BLOCK = 128


def _splash_block(padded_seq: int) -> int:
    """Largest of 512/256/128 dividing the sequence (MaxText runs splash at 512)."""
    return next(b for b in (512, 256, TPU_MIN_BLOCK) if padded_seq % b == 0)


def _valid_key_ids(kv_lengths: jax.Array, kv_seq: int) -> jax.Array:
    """[B, S] int32 segment ids: 1 for a valid key, 0 for padding (queries are all 1)."""
    return (jnp.arange(kv_seq) < at_least_one_key(kv_lengths)[:, None]).astype(jnp.int32)


def tpu_flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, kv_lengths: jax.Array, segment_ids, *, scale: float, window) -> jax.Array:
    """q 'BTNH', k and v 'BSNH', kv_lengths [B] -> 'BTNH'."""
    batch, q_seq = q.shape[:2]
    q_bnth, k_bnsh, v_bnsh = (pad_seq(x, TPU_MIN_BLOCK).transpose(0, 2, 1, 3) for x in (q, k, v))
    segment_ids = tpu_flash_lib.SegmentIds(
        q=jnp.ones((batch, q_bnth.shape[2]), jnp.int32),
        kv=_valid_key_ids(kv_lengths, k_bnsh.shape[2]),
    )
    # Its default tiles are 128, which is why sequences are padded to 128.
    out = tpu_flash_lib.flash_attention(q_bnth, k_bnsh, v_bnsh, segment_ids=segment_ids, sm_scale=scale)
    return zero_rows_without_keys(out.transpose(0, 2, 1, 3)[:, :q_seq], kv_lengths)


@functools.lru_cache(maxsize=64)
def _splash_kernel(heads: int, q_seq: int, kv_seq: int):
    """Built once per shape: the mask's block structure is computed on the host."""
    mask = splash_lib.MultiHeadMask([splash_lib.FullMask((q_seq, kv_seq))] * heads)
    block_q, block_kv = _splash_block(q_seq), _splash_block(kv_seq)
    blocks = splash_lib.BlockSizes(block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv)
    # Concrete arrays even when first called under jit: the cache outlives the trace.
    with jax.ensure_compile_time_eval():
        return splash_lib.make_splash_mha_single_device(mask, block_sizes=blocks)


def tpu_splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, kv_lengths: jax.Array, segment_ids, *, scale: float, window) -> jax.Array:
    """q 'BTNH', k and v 'BSNH', kv_lengths [B] -> 'BTNH'."""
    q_seq = q.shape[1]
    q = (q.astype(jnp.float32) * scale).astype(q.dtype)
    q_bnth, k_bnsh, v_bnsh = (pad_seq(x, TPU_MIN_BLOCK).transpose(0, 2, 1, 3) for x in (q, k, v))
    kernel = _splash_kernel(q_bnth.shape[1], q_bnth.shape[2], k_bnsh.shape[2])
    q_ids = jnp.ones((q_bnth.shape[2],), jnp.int32)
    kv_ids = _valid_key_ids(kv_lengths, k_bnsh.shape[2])

    def one_row(row):
        q_nth, k_nsh, v_nsh, row_kv_ids = row
        return kernel(q_nth, k_nsh, v_nsh, segment_ids=splash_lib.SegmentIds(q=q_ids, kv=row_kv_ids))

    # vmap is how splash is meant to be batched, but JAX's TPU interpreter does not
    # count the grid axis that vmap adds to a pallas_call (its dimension_semantics
    # stay one short and it fails), so under emulation rows go one at a time.
    rows = (q_bnth, k_bnsh, v_bnsh, kv_ids)
    out = jax.lax.map(one_row, rows) if _platform.emulating_tpu() else jax.vmap(one_row)(rows)
    return zero_rows_without_keys(out.transpose(0, 2, 1, 3)[:, :q_seq], kv_lengths)


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, kv_lengths: jax.Array, segment_ids, *, scale: float, window) -> jax.Array:
    """q 'BTNH', k and v 'BSNH', kv_lengths [B] -> 'BTNH'."""
    out = jax.nn.dot_product_attention(
        q, k, v, scale=scale, key_value_seq_lengths=at_least_one_key(kv_lengths), implementation="cudnn"
    )
    return zero_rows_without_keys(out, kv_lengths)
