import jax.numpy as jnp
import numpy as np

from kernels.bfloat16_bits import as_bits, from_bits, truncate


def test_bits_round_trip_bfloat16_and_pass_other_dtypes():
    x = jnp.asarray([1.5, -2.25, 3e-5, jnp.inf], jnp.bfloat16)
    bits = as_bits(x)
    assert bits.dtype == jnp.uint16
    np.testing.assert_array_equal(from_bits(bits), x)
    y = jnp.arange(3.0)
    assert as_bits(y) is y and from_bits(y) is y


def test_truncate_rounds_toward_zero_by_under_one_bfloat16_ulp():
    magnitudes = 10.0 ** np.arange(-4, 6).repeat(1_000)
    x = (np.random.default_rng(0).standard_normal(magnitudes.size) * magnitudes).astype(np.float32)
    got = truncate(jnp.asarray(x))
    assert got.dtype == jnp.bfloat16
    got = np.asarray(got, np.float32)
    assert (np.sign(got) == np.sign(x)).all() and (np.abs(got) <= np.abs(x)).all()
    assert (np.abs(x - got) < np.abs(x) * 2.0**-7).all()
    # Round-to-nearest's result, or the bfloat16 value next to it toward zero; exact on bfloat16 values.
    nearest = np.asarray(jnp.asarray(x, jnp.bfloat16), np.float32)
    rounded_down = np.abs(nearest) <= np.abs(x)
    assert 0 < rounded_down.mean() < 1
    np.testing.assert_array_equal(got[rounded_down], nearest[rounded_down])
    np.testing.assert_array_equal(np.asarray(truncate(jnp.asarray(nearest)), np.float32), nearest)
