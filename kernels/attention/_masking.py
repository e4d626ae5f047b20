"""Key padding: which keys count, and padding sequences to whole blocks.

A key at position >= kv_lengths[b] is padding and gets no weight. Masked scores are
set to a large finite negative, not -inf, so that "score - running max" is never
inf - inf = NaN; a row whose keys are all padding produces zeros.
"""

import jax
import jax.numpy as jnp
import numpy as np

MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def pad_seq(x: jax.Array, multiple: int) -> jax.Array:
    """Zero-pads axis 1 (the sequence of 'BTNH') up to a multiple of `multiple`."""
    extra = -x.shape[1] % multiple
    if not extra:
        return x
    widths = [(0, 0)] * x.ndim
    widths[1] = (0, extra)
    return jnp.pad(x, widths)


def zero_rows_without_keys(out: jax.Array, kv_lengths: jax.Array) -> jax.Array:
    """'BTNH' output with batch rows whose kv_length is 0 set to zeros.

    For kernels whose result on a row without keys is unspecified: they are given
    at least one key (`at_least_one_key`) and their output for such rows dropped.
    """
    return jnp.where((kv_lengths > 0)[:, None, None, None], out, 0)


def at_least_one_key(kv_lengths: jax.Array) -> jax.Array:
    return jnp.maximum(kv_lengths, 1)
