"""`reference`: plain XLA softmax attention in float32. The oracle for the others.

It materialises the [B, N, T, S] score matrix, so memory is quadratic in sequence
length; for short sequences that is also often the fastest thing on any chip.
Grouped-query attention without repeating k and v: each K/V head's matmul takes its
G query heads at once as G * T rows, scores [B, K, G * T, S], which are [B, N, T, S]
in q's head order (n = k * G + g).
Segment ids, the window and causality are one more term of the mask each; a relative position bias is
added to the whole score matrix.
"""

import jax
import jax.numpy as jnp

from kernels.attention._buckets import RelativeBias
from kernels.attention._masking import MASK_VALUE, bias_by_distance, relative_bias, visible
from kernels.precision import MATMUL_PRECISION


def reference_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_lengths: jax.Array,
    segment_ids: jax.Array | None,
    *,
    scale: float,
    window: int | None,
    bias: RelativeBias | None = None,
    causal: bool = False,
) -> jax.Array:
    """q 'BTNH', k and v 'BSKH' (K dividing N), kv_lengths [B], segment_ids [B, T] or None -> 'BTNH' in q's
    dtype."""
    batch, q_seq, heads, head_dim = q.shape
    kv_seq, kv_heads = k.shape[1], k.shape[2]
    groups = heads // kv_heads
    if groups == 1:
        scores = jnp.einsum("btnh,bsnh->bnts", q, k, precision=MATMUL_PRECISION, preferred_element_type=jnp.float32)
    else:
        # Each K/V head's G query heads as one matrix of G * T rows, [B, K, G * T, H], against its keys: the
        # scores come out as [B, N, T, S]. 1.7-1.9x faster on XLA:CPU than einsums with a group axis, whose
        # scores are transposed, and faster than repeating k and v to N heads.
        q_rows = q.reshape(batch, q_seq, kv_heads, groups, head_dim).transpose(0, 2, 3, 1, 4)
        q_rows = q_rows.reshape(batch, kv_heads, groups * q_seq, head_dim)
        scores = jnp.einsum(
            "bkrh,bskh->bkrs", q_rows, k, precision=MATMUL_PRECISION, preferred_element_type=jnp.float32
        )
    scores = scores.reshape(batch, heads, q_seq, kv_seq) * scale
    positions = jnp.arange(q.shape[1])[:, None], jnp.arange(k.shape[1])
    if bias is not None:
        scores = scores + relative_bias(bias_by_distance(bias), *positions)
    if segment_ids is not None:
        segments = segment_ids[:, None, :, None], segment_ids[:, None, None, :]
    else:
        segments = None, None
    valid = visible(*positions, kv_lengths[:, None, None, None], *segments, window, causal)
    scores = jnp.where(valid, scores, MASK_VALUE)
    weights = jnp.where(valid, jnp.exp(scores - scores.max(axis=-1, keepdims=True)), 0.0)
    total = weights.sum(axis=-1)
    if groups == 1:
        out = jnp.einsum("bnts,bsnh->btnh", weights, v.astype(jnp.float32), precision=MATMUL_PRECISION)
    else:
        weights = weights.reshape(batch, kv_heads, groups * q_seq, kv_seq)
        out = jnp.einsum("bkrs,bskh->bkrh", weights, v.astype(jnp.float32), precision=MATMUL_PRECISION)
        out = out.reshape(batch, heads, q_seq, head_dim).transpose(0, 2, 1, 3)
    # Queries that see no key have total 0 and weights 0: they come out as zeros.
    out = out / jnp.where(total == 0, 1.0, total).transpose(0, 2, 1)[..., None]
    return out.astype(q.dtype)
