"""bfloat16 moved as its bits: uint16 arrays that slice, transpose and stack as they are.

    as_bits(x)    # bfloat16 -> uint16 bits; any other dtype unchanged
    from_bits(x)  # uint16 bits -> bfloat16; any other dtype unchanged
    truncate(x)   # float32 -> bfloat16, rounded toward zero

XLA:CPU moves bfloat16 data by way of float32: a concatenate, transpose,
slice or dynamic-update-slice of bfloat16 compiles to converts to float32 and
back around a float32 copy. Integers move natively, and a bitcast back to
bfloat16 costs nothing. The encoder scans its bfloat16 weights as bits
(`encoders.bfloat16_as_bits`), and `blockwise` attention carries its bfloat16
key and value blocks so (BENCHMARKS.md). No array these carry is uint16 for
any other reason.

`truncate` keeps a float32's top 16 bits: a shift. XLA:CPU's convert rounds
to nearest in code of its own: fused with the online softmax's exp it took
twice as long as the exp and the shift do (466 against 221 ms, BENCHMARKS.md).
Its error is one-sided, so it suits only values whose common scale cancels,
as softmax weights normalised by their own truncated sum do.
"""

import jax
import jax.numpy as jnp


def as_bits(x: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(x, jnp.uint16) if x.dtype == jnp.bfloat16 else x


def from_bits(x: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(x, jnp.bfloat16) if x.dtype == jnp.uint16 else x


def truncate(x: jax.Array) -> jax.Array:
    """float32 -> bfloat16 toward zero: smaller in magnitude by under one bfloat16 ulp (2**-7 relative)."""
    top = jax.lax.bitcast_convert_type(x, jnp.uint32) >> 16
    return jax.lax.bitcast_convert_type(top.astype(jnp.uint16), jnp.bfloat16)
