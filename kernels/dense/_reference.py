"""The contract in plain XLA: the reference every other implementation is tested against."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from kernels.precision import MATMUL_PRECISION

ACTIVATION_FNS = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
}


def xla_dense(x, w, bias, *, contract: int, activation: str | None, out_dtype):
    """activation(x @ w + bias): operands in w's dtype, accumulated, biased and activated in float32."""
    y = jnp.tensordot(
        x.astype(w.dtype), w, axes=contract, precision=MATMUL_PRECISION, preferred_element_type=jnp.float32
    )
    if bias is not None:
        y = y + bias.astype(jnp.float32)
    if activation is not None:
        y = ACTIVATION_FNS[activation](y)
    return y.astype(out_dtype)
