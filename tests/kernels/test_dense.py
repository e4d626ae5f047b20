"""The dense contract: the xla reference against a float64 oracle, oneDNN's kernel against the
reference, and the dispatch between them.

The oneDNN kernel runs only on an x86-64 Linux CPU with AVX-512 (`kernels.dense.unavailable`);
its tests skip elsewhere and say why."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.attention import _platform
from kernels.dense import ACTIVATIONS, _dispatch, dense, unavailable
from kernels.dense._reference import ACTIVATION_FNS

why_no_onednn = unavailable("onednn")
needs_onednn = pytest.mark.skipif(why_no_onednn is not None, reason=f"oneDNN kernel: {why_no_onednn}")


def oracle(x, w, bias, contract, activation):
    """float64 numpy from the operands as rounded to w's dtype."""
    x64 = np.asarray(jnp.asarray(x).astype(w.dtype), np.float64)
    y = np.tensordot(x64, np.asarray(w, np.float64), axes=contract)
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    if activation is not None:
        y = np.asarray(ACTIVATION_FNS[activation](jnp.asarray(y, jnp.float32)), np.float64)
    return y


def operands(rng, lead, k_shape, n_shape, w_dtype, bias=True):
    x = jnp.asarray(rng.standard_normal((*lead, *k_shape), np.float32))
    w = jnp.asarray(rng.standard_normal((*k_shape, *n_shape), np.float32) / np.sqrt(np.prod(k_shape)), w_dtype)
    b = jnp.asarray(rng.standard_normal(n_shape, np.float32)) if bias else None
    return x, w, b


@pytest.mark.parametrize("w_dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
def test_xla_reference_matches_the_float64_oracle(seeded_rng, w_dtype, activation):
    x, w, b = operands(seeded_rng, (3, 17), (40,), (6, 8), w_dtype)
    y = dense(x, w, b, activation=activation, impl="xla")
    assert y.shape == (3, 17, 6, 8) and y.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(y), oracle(x, w, b, 1, activation), rtol=1e-5, atol=1e-5)


def test_operands_are_rounded_to_the_weights_dtype_and_the_result_to_out_dtype(seeded_rng):
    x, w, _ = operands(seeded_rng, (4,), (64,), (16,), jnp.bfloat16, bias=False)
    y = dense(x, w, out_dtype=jnp.bfloat16, impl="xla")
    assert y.dtype == jnp.bfloat16
    expected = jnp.asarray(oracle(x, w, None, 1, None), jnp.float32).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(expected, np.float32))


@needs_onednn
@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
@pytest.mark.parametrize("out_dtype", [jnp.float32, jnp.bfloat16])
def test_onednn_matches_the_reference(seeded_rng, activation, out_dtype):
    x, w, b = operands(seeded_rng, (5, 33), (48,), (7,), jnp.bfloat16)
    run = jax.jit(
        lambda x, w, b, impl: dense(x, w, b, activation=activation, out_dtype=out_dtype, impl=impl), static_argnums=3
    )
    got, want = run(x, w, b, "onednn"), run(x, w, b, "xla")
    assert got.shape == want.shape == (5, 33, 7) and got.dtype == want.dtype == out_dtype
    # The same bfloat16 products summed in float32 in another order; the activations' own float32
    # formulas; then, for bfloat16 out, one rounding that may fall either side (2^-8 relative).
    tolerance = 1e-5 if out_dtype == jnp.float32 else 2**-7
    np.testing.assert_allclose(
        np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tolerance, atol=tolerance
    )


@needs_onednn
def test_onednn_contracts_several_axes_without_bias(seeded_rng):
    """The attention out-projection's shape: [B, T, N, H] x [N, H, D]."""
    x, w, _ = operands(seeded_rng, (2, 9), (4, 16), (24,), jnp.bfloat16, bias=False)
    got = jax.jit(lambda x, w: dense(x, w, contract=2, impl="onednn"))(x, w)
    np.testing.assert_allclose(np.asarray(got), oracle(x, w, None, 2, None), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_onednn_takes_no_rows(seeded_rng):
    x, w, b = operands(seeded_rng, (0,), (32,), (8,), jnp.bfloat16)
    assert jax.jit(lambda x, w, b: dense(x, w, b, impl="onednn"))(x, w, b).shape == (0, 8)


@needs_onednn
def test_onednn_under_shard_map_on_each_devices_rows(seeded_rng):
    """One call per device on its own rows, as the encoder's data axis runs it."""
    devices = jax.local_devices()
    mesh = jax.make_mesh((len(devices),), ("data",), devices=devices)
    x, w, b = operands(seeded_rng, (2 * len(devices), 11), (32,), (16,), jnp.bfloat16)
    rows, whole = jax.sharding.PartitionSpec("data"), jax.sharding.PartitionSpec()
    fn = jax.shard_map(
        lambda x, w, b: dense(x, w, b, activation="gelu", impl="onednn"),
        mesh=mesh,
        in_specs=(rows, whole, whole),
        out_specs=rows,
        check_vma=False,
    )
    placed = [jax.device_put(a, jax.sharding.NamedSharding(mesh, p)) for a, p in ((x, rows), (w, whole), (b, whole))]
    want = dense(x, w, b, activation="gelu", impl="xla")
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(*placed)), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.fixture
def fresh_log(caplog, monkeypatch):
    monkeypatch.setattr(_dispatch, "_logged", set())
    caplog.set_level(logging.INFO, logger="kernels.dense")
    return caplog


@needs_onednn
def test_auto_runs_onednn_for_bfloat16_weights_on_cpu_and_logs_it_once(fresh_log):
    assert _dispatch.choose(jnp.bfloat16, jnp.float32) == "onednn"
    assert _dispatch.choose(jnp.bfloat16, jnp.bfloat16) == "onednn"
    assert [r.message for r in fresh_log.records] == ["dense: onednn, bfloat16 matmuls on oneDNN"]


def test_auto_runs_xla_for_float32_weights_silently(fresh_log):
    assert _dispatch.choose(jnp.float32, jnp.float32) == "xla"
    assert not fresh_log.records


def test_auto_runs_xla_off_cpu(monkeypatch, fresh_log):
    monkeypatch.setattr(_platform, "platform", lambda: "tpu")
    assert _dispatch.choose(jnp.bfloat16, jnp.bfloat16) == "xla"
    assert not fresh_log.records


def test_auto_without_the_kernel_runs_xla_and_says_why_once(monkeypatch, fresh_log):
    monkeypatch.setattr(_dispatch, "unavailable", lambda impl: "the oneDNN kernel is not built")
    assert _dispatch.choose(jnp.bfloat16, jnp.float32) == "xla"
    assert _dispatch.choose(jnp.bfloat16, jnp.float32) == "xla"
    assert [r.message for r in fresh_log.records] == ["dense: xla, onednn cannot run: the oneDNN kernel is not built"]


@pytest.mark.parametrize(
    ("w_dtype", "out_dtype", "platform", "why"),
    [
        (jnp.float32, jnp.float32, "cpu", "takes bfloat16 weights, got float32"),
        (jnp.bfloat16, jnp.float16, "cpu", "returns float32 or bfloat16, asked float16"),
        (jnp.bfloat16, jnp.float32, "gpu", "needs CPU, platform is 'gpu'"),
    ],
)
def test_onednn_named_where_it_cannot_run_says_why(monkeypatch, w_dtype, out_dtype, platform, why):
    monkeypatch.setattr(_platform, "platform", lambda: platform)
    with pytest.raises(ValueError, match=f"dense implementation onednn cannot run: {why}"):
        _dispatch.choose(w_dtype, out_dtype, "onednn")


def test_bad_arguments_are_refused():
    x, w = jnp.zeros((2, 8)), jnp.zeros((8, 4))
    with pytest.raises(ValueError, match="unknown dense implementation 'mkl'; known: auto, xla, onednn"):
        dense(x, w, impl="mkl")
    with pytest.raises(ValueError, match="unknown activation 'tanh'; known: gelu, gelu_tanh, relu, silu"):
        dense(x, w, activation="tanh")
    with pytest.raises(ValueError, match=r"x \(2, 8\) and w \(4, 8\) do not share their 1 contracted axes"):
        dense(x, w.T)
