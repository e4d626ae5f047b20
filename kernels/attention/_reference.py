"""`reference`: plain XLA softmax attention in float32. The oracle for the others.

It materialises the [B, N, T, S] score matrix, so memory is quadratic in sequence
length; for short sequences that is also often the fastest thing on any chip.
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
    """q 'BTNH', k and v 'BSNH', kv_lengths [B], segment_ids [B, T] or None -> 'BTNH' in q's dtype."""
    scores = jnp.einsum("btnh,bsnh->bnts", q, k, precision=MATMUL_PRECISION, preferred_element_type=jnp.float32)
    scores = scores * scale
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
    out = jnp.einsum("bnts,bsnh->btnh", weights, v.astype(jnp.float32), precision=MATMUL_PRECISION)
    # Queries that see no key have total 0 and weights 0: they come out as zeros.
    out = out / jnp.where(total == 0, 1.0, total).transpose(0, 2, 1)[..., None]
    return out.astype(q.dtype)
