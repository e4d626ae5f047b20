"""`reference`: plain XLA softmax attention in float32. The oracle for the others.

It materialises the [B, N, T, S] score matrix, so memory is quadratic in sequence
length; for short sequences that is also often the fastest thing on any chip.
"""

import jax
import jax.numpy as jnp

from kernels.attention._masking import MASK_VALUE


def reference_attention(q: jax.Array, k: jax.Array, v: jax.Array, kv_lengths: jax.Array, *, scale: float) -> jax.Array:
    """q 'BTNH', k and v 'BSNH', kv_lengths [B] -> 'BTNH' in q's dtype."""
    scores = jnp.einsum("btnh,bsnh->bnts", q, k, preferred_element_type=jnp.float32) * scale
    valid = (jnp.arange(k.shape[1]) < kv_lengths[:, None])[:, None, None, :]
    scores = jnp.where(valid, scores, MASK_VALUE)
    weights = jnp.where(valid, jnp.exp(scores - scores.max(axis=-1, keepdims=True)), 0.0)
    total = weights.sum(axis=-1)
    out = jnp.einsum("bnts,bsnh->btnh", weights, v.astype(jnp.float32))
    # Rows with no valid key have total 0 and weights 0: they come out as zeros.
    out = out / jnp.where(total == 0, 1.0, total).transpose(0, 2, 1)[..., None]
    return out.astype(q.dtype)
