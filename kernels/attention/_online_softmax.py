"""The online softmax of flash attention, shared by `blockwise` and `pallas`.

Shapes: q [..., Q, H] and k, v [..., K, H], where the leading dims batch the
matmuls ((B, N) in `blockwise`, none inside the Pallas kernel); `valid` is a bool
mask broadcastable to the scores [..., Q, K]. The state is the running max
m [..., Q, 1], the running sum l [..., Q, 1] and the unnormalised output
acc [..., Q, H], all float32 whatever the input dtype.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from kernels import bfloat16_bits
from kernels.attention._masking import MASK_VALUE
from kernels.precision import MATMUL_PRECISION


class State(NamedTuple):
    m: jax.Array
    l: jax.Array
    acc: jax.Array


def init(q: jax.Array) -> State:
    """Empty state for queries q [..., Q, H]."""
    # Built from q, not from its shape, so that under shard_map the loop carry is
    # device-varying like the values folded into it.
    zeros = jnp.zeros_like(q[..., :1], jnp.float32)
    # MASK_VALUE rather than -inf keeps exp(m_old - m_new) finite on rows that
    # have seen only padding so far.
    return State(zeros + MASK_VALUE, zeros, jnp.zeros_like(q, jnp.float32))


def _batched_dot(a: jax.Array, b: jax.Array, a_axis: int, b_axis: int) -> jax.Array:
    batch = tuple(range(a.ndim - 2))
    dims = (((a_axis % a.ndim,), (b_axis % b.ndim,)), (batch, batch))
    return jax.lax.dot_general(a, b, dims, precision=MATMUL_PRECISION, preferred_element_type=jnp.float32)


def step(
    state: State,
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    valid: jax.Array,
    scale: float,
    *,
    bias: jax.Array | None = None,
    truncate: bool = False,
) -> State:
    """Folds one block of keys/values into the state. `bias`: float32, broadcastable to the scores, added
    after the scale (a relative position bias). `truncate`: bfloat16 weights rounded toward zero
    (`kernels.bfloat16_bits.truncate`), for XLA:CPU, where rounding to nearest costs a pass."""
    s = _batched_dot(q, k, -1, -1) * scale
    s = jnp.where(valid, s if bias is None else s + bias, MASK_VALUE)
    m = jnp.maximum(state.m, s.max(axis=-1, keepdims=True))
    correction = jnp.exp(state.m - m)
    # A masked score weighs exp(MASK_VALUE - m) = 0 once the row has seen a valid key. Until then
    # m is MASK_VALUE and every masked key weighs 1, but the first valid key's correction,
    # exp(MASK_VALUE - m) = 0, wipes that out; a row that never sees one is zeroed by `finish`.
    # No second where: that pass over the scores was 4% of the bfloat16 encoder on a CPU.
    # p in the value dtype: bfloat16 matmuls at full speed, accumulated in float32. l sums the rounded
    # weights, so truncation's one-sided error (under one ulp, half an ulp on average) cancels in
    # acc / l but for its spread about that mean, which is round-to-nearest's: uniform over one ulp.
    p = jnp.exp(s - m)
    p = bfloat16_bits.truncate(p) if truncate and v.dtype == jnp.bfloat16 else p.astype(v.dtype)
    l = correction * state.l + p.sum(axis=-1, keepdims=True, dtype=jnp.float32)
    acc = correction * state.acc + _batched_dot(p, v, -1, -2)
    return State(m, l, acc)


def finish(state: State) -> jax.Array:
    """float32 output [..., Q, H]; zeros on rows that saw no valid key."""
    return jnp.where(state.m == MASK_VALUE, 0.0, state.acc / state.l)
