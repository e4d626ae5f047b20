"""`_blocks.attention_operands`: attention's dots in the matmul dtype, keys centred first; and the two norms.

Against float32 attention on the keys as the model made them (`reference`, the
attention oracle): the centring is a shift every query's softmax ignores, so
it must give the same attention while rounding to bfloat16 costs less.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from kernels.attention import attention
from kernels.encoders._blocks import attention_operands, layer_norm

B, T, N, H = 2, 24, 3, 16
# Two sequences packed in row 0 and one in row 1, then padding (0).
SEGMENTS_BT = np.array([[1] * 10 + [2] * 8 + [0] * 6, [1] * 20 + [0] * 4], np.int32)


def qkv(rng, key_offset: float):
    """q, k, v 'BTNH' float32; k shares one offset per head, large against how its keys differ."""
    q, k, v = (rng.standard_normal((B, T, N, H)).astype(np.float32) for _ in range(3))
    return q, k + np.float32(key_offset) * rng.standard_normal((1, 1, N, H)).astype(np.float32), v


def attend(q, k, v):
    return np.asarray(attention(q, k, v, segment_ids=SEGMENTS_BT, impl="reference"), np.float32)


def valid_rows(x_BTNH):
    return x_BTNH[SEGMENTS_BT != 0]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_operands_in_their_own_dtype_are_unchanged(seeded_rng, dtype):
    q, k, v = (jnp.asarray(a, dtype) for a in qkv(seeded_rng, 32.0))
    for got, want in zip(attention_operands(q, k, v, dtype, SEGMENTS_BT != 0), (q, k, v)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_bfloat16_operands_give_float32_attention_with_the_keys_offset(seeded_rng):
    q, k, v = qkv(seeded_rng, 32.0)
    exact = attend(q, k, v)
    centred = attention_operands(q, k, v, jnp.bfloat16, SEGMENTS_BT != 0)
    assert [a.dtype for a in centred] == [jnp.bfloat16] * 3
    rounded = (jnp.asarray(a, jnp.bfloat16) for a in (q, k, v))
    error = {
        "centred": np.abs(valid_rows(attend(*centred) - exact)).max(),
        "only rounded": np.abs(valid_rows(attend(*rounded) - exact)).max(),
    }
    # bfloat16's own rounding of v and of the probabilities (at most 0.011 in 40 seeds), whatever the
    # keys' offset; rounding alone was at least 6x further off.
    assert error["centred"] < 0.03, error
    assert error["only rounded"] > 3 * error["centred"], error


def test_padding_does_not_move_the_centre(seeded_rng):
    q, k, v = qkv(seeded_rng, 32.0)
    garbage = k.copy()
    garbage[SEGMENTS_BT == 0] = 1e4
    tokens_BT = SEGMENTS_BT != 0
    centred = [
        np.asarray(attention_operands(q, keys, v, jnp.bfloat16, tokens_BT)[1], np.float32) for keys in (k, garbage)
    ]
    np.testing.assert_array_equal(valid_rows(centred[0]), valid_rows(centred[1]))


def test_a_row_of_padding_only_stays_finite(seeded_rng):
    q, k, v = qkv(seeded_rng, 32.0)
    _, centred_k, _ = attention_operands(q, k, v, jnp.bfloat16, np.zeros((B, T), bool))
    assert np.isfinite(np.asarray(centred_k, np.float32)).all()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_norms_are_layernorm_and_t5s_rmsnorm_in_float32(seeded_rng, dtype):
    """LayerNorm centres and shifts; RMSNorm (T5LayerNorm) only scales by the root mean square. Both
    compute in float32 and return the input's dtype."""
    x_BTD = (3 + seeded_rng.standard_normal((2, 5, 16))).astype(np.float32)
    scale_D, bias_D = seeded_rng.standard_normal(16).astype(np.float32), np.full(16, 0.5, np.float32)
    x = np.asarray(jnp.asarray(x_BTD, dtype), np.float64)
    centred = x - x.mean(-1, keepdims=True)
    want = {
        "layer": centred / np.sqrt(np.square(centred).mean(-1, keepdims=True) + 1e-6) * scale_D + bias_D,
        "rms": x / np.sqrt(np.square(x).mean(-1, keepdims=True) + 1e-6) * scale_D,
    }
    for kind, bias in (("layer", bias_D), ("rms", None)):
        got = layer_norm(jnp.asarray(x_BTD, dtype), scale_D, bias, 1e-6, kind)
        assert got.dtype == dtype
        tolerance = 1e-5 if dtype == jnp.float32 else 2e-2
        np.testing.assert_allclose(np.asarray(got, np.float64), want[kind], rtol=tolerance, atol=tolerance)
