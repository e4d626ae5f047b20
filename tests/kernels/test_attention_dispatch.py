"""Dispatch, lowering for TPU/GPU from this host, and use inside jax.shard_map."""

import dataclasses
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from kernels.attention import (
    IMPLS,
    RelativeBias,
    RelativeBuckets,
    _dispatch,
    _platform,
    attention,
    available_impls,
    tpu_interpret_mode,
)
from kernels.attention._dispatch import SHORT_KV_SEQ
from kernels.attention._jax_shipped import tpu_flash_attention, tpu_splash_attention
from kernels.attention._pallas import pallas_attention

REPO = pathlib.Path(__file__).resolve().parents[2]
cpu_only = pytest.mark.skipif(jax.default_backend() != "cpu", reason="asserts what runs on a CPU host")


def spec(batch=2, seq=64, heads=2, head_dim=32, dtype=jnp.float32):
    return jax.ShapeDtypeStruct((batch, seq, heads, head_dim), dtype)


def kv_spec(q: jax.ShapeDtypeStruct, kv_heads: int | None) -> jax.ShapeDtypeStruct:
    """k's and v's shape for q: `kv_heads` heads (grouped-query attention), or q's."""
    return q if kv_heads is None else jax.ShapeDtypeStruct((*q.shape[:2], kv_heads, q.shape[3]), q.dtype)


def trace(impl="auto", segments=False, window=None, relative=False, causal=False, **shape):
    """Traces attention without running it: enough to make every dispatch decision. `relative`: with a
    relative position bias of 32 buckets."""
    q = spec(**shape)
    ids = jax.ShapeDtypeStruct(q.shape[:2], jnp.int32) if segments else None
    table = jax.ShapeDtypeStruct((q.shape[2], 32), jnp.float32) if relative else None

    def run(q, k, v, s, table):
        bias = None if table is None else RelativeBias(table, RelativeBuckets())
        return attention(q, k, v, segment_ids=s, window=window, relative_bias=bias, causal=causal, impl=impl)

    return jax.eval_shape(run, q, q, q, ids, table)


@pytest.fixture
def fresh_log(caplog, monkeypatch):
    monkeypatch.setattr(_dispatch, "_logged", set())
    caplog.set_level(logging.INFO, logger="kernels.attention")
    return caplog


@pytest.fixture
def pretend_gpu(monkeypatch):
    monkeypatch.setattr(_platform, "platform", lambda: "gpu")


@cpu_only
def test_available_on_cpu():
    assert available_impls() == ["reference", "blockwise", "pallas"]
    with tpu_interpret_mode():
        assert available_impls() == ["reference", "blockwise", "pallas", "tpu_flash", "tpu_splash"]
    assert set(IMPLS) == {"reference", "blockwise", "pallas", "tpu_flash", "tpu_splash", "cudnn"}


@cpu_only
@pytest.mark.parametrize("impl", ["cudnn", "tpu_flash", "tpu_splash"])
def test_explicit_impl_that_cannot_run_names_what_can(impl):
    expected = rf"'{impl}' cannot run here: needs (GPU|TPU).*Can run here: reference, blockwise, pallas"
    with pytest.raises(ValueError, match=expected):
        trace(impl)


def test_unknown_impl():
    with pytest.raises(ValueError, match="unknown attention impl 'flash'; known: auto, reference"):
        trace("flash")


def test_explicit_impl_outside_its_limits(pretend_gpu):
    with pytest.raises(ValueError, match="cuDNN flash attention takes bfloat16 or float16, got float32"):
        trace("cudnn", dtype=jnp.float32)
    with pytest.raises(ValueError, match="power-of-two head_dim"):
        trace("pallas", head_dim=48)


@cpu_only
def test_auto_on_cpu_uses_xla_for_short_and_blockwise_for_long(fresh_log):
    short, long_ = SHORT_KV_SEQ["cpu"], SHORT_KV_SEQ["cpu"] * 4
    trace(seq=short)
    trace(seq=long_)
    trace(seq=long_)  # the same choice again is not logged again
    choices = [r.getMessage() for r in fresh_log.records]
    assert len(choices) == 2, choices
    assert choices[0].endswith("using 'reference'") and f"kv_seq {short}," in choices[0]
    assert choices[1].endswith("using 'blockwise'") and f"kv_seq {long_}," in choices[1]
    assert all(r.levelno == logging.INFO for r in fresh_log.records)


def test_auto_falls_back_with_one_warning_each(fresh_log, pretend_gpu):
    """On a 'GPU' without cuDNN (this host), bfloat16 with head_dim 48: cuDNN fails
    when traced, pallas refuses the head_dim, blockwise runs."""
    shape = dict(seq=1024, head_dim=48, dtype=jnp.bfloat16)
    for _ in range(2):
        out = trace(**shape)
    assert out.shape == (2, 1024, 2, 48) and out.dtype == jnp.bfloat16
    warnings = [r.getMessage() for r in fresh_log.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "'cudnn' cannot run" in warnings[0] and "falling back to 'pallas'" in warnings[0]
    assert "'pallas' cannot run (Triton needs a power-of-two head_dim" in warnings[1]
    assert fresh_log.records[-1].getMessage().endswith("using 'blockwise'")


def test_auto_prefers_cudnn_for_bfloat16_on_gpu(pretend_gpu, monkeypatch):
    chosen = []

    def recorder(name):
        return lambda q, k, v, kv_lengths, segment_ids, *, scale, window, causal: chosen.append(name) or q

    fakes = {name: dataclasses.replace(impl, fn=recorder(name)) for name, impl in _dispatch._IMPLS.items()}
    monkeypatch.setattr(_dispatch, "_IMPLS", fakes)
    trace(seq=1024, dtype=jnp.bfloat16)
    trace(seq=1024, dtype=jnp.float32)
    trace(seq=64, dtype=jnp.float32)
    assert chosen == ["cudnn", "pallas", "reference"]


@cpu_only
def test_auto_with_segments_and_window(fresh_log):
    """blockwise and pallas skip blocks; tpu_splash has both; tpu_flash no window."""
    trace(seq=1024, segments=True, window=64)
    choice = fresh_log.records[-1].getMessage()
    assert choice.endswith("kv_seq 1024, head_dim 32, segment ids, window 64: using 'blockwise'"), choice
    with tpu_interpret_mode():
        trace(seq=1024, segments=True, window=64)
        assert fresh_log.records[-1].getMessage().endswith("using 'tpu_splash'")
        with pytest.raises(
            ValueError,
            match="'tpu_flash' cannot run here: JAX's TPU flash_attention has no sliding "
            "window.*Can run here: reference, blockwise, pallas, tpu_splash",
        ):
            trace("tpu_flash", seq=1024, window=64)
    assert all(r.levelno == logging.INFO for r in fresh_log.records)


def test_auto_skips_cudnn_for_segments_and_window(fresh_log, pretend_gpu):
    for masks, reason in [(dict(segments=True), "has no segment ids"), (dict(window=64), "window is causal")]:
        trace(seq=1024, dtype=jnp.bfloat16, **masks)
        warning = next(r.getMessage() for r in fresh_log.records if r.levelno == logging.WARNING)
        assert "'cudnn' cannot run" in warning and reason in warning and "falling back to 'pallas'" in warning
        fresh_log.clear()


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(q=(2, 8, 2, 16), k=(2, 8, 2, 32)), "differ in batch or head_dim"),
        (dict(q=(2, 8, 2, 16), k=(3, 8, 2, 16)), "differ in batch or head_dim"),
        (dict(q=(2, 8, 6, 16), k=(2, 8, 4, 16)), "heads that divides q's .*got 6 query heads and 4 key/value heads"),
        (dict(q=(2, 8, 2, 16), k=(2, 8, 4, 16)), "heads that divides q's .*got 2 query heads and 4 key/value heads"),
        (dict(q=(2, 8, 16), k=(2, 8, 16)), "shaped \\[batch, seq, heads, head_dim\\]"),
        (dict(kv_lengths=jnp.zeros(3, jnp.int32)), "kv_lengths must be integers shaped \\[batch\\]"),
        (dict(segment_ids=jnp.zeros((2, 9), jnp.int32)), "segment_ids must be integers shaped \\[batch, seq\\]"),
        (dict(segment_ids=jnp.zeros((2, 8))), "segment_ids must be integers"),
        (dict(k=(2, 12, 2, 16), segment_ids=jnp.zeros((2, 8), jnp.int32)), "segment_ids need self-attention"),
        (dict(window=-1), "window must be a Python int >= 0"),
        (dict(window=2.0), "window must be a Python int >= 0"),
        (dict(window=True), "window must be a Python int >= 0"),
        (dict(relative_bias=RelativeBias(jnp.zeros((3, 32)), RelativeBuckets())), "table \\[heads, num_buckets\\]"),
        (dict(relative_bias=RelativeBias(jnp.zeros((2, 16)), RelativeBuckets())), "2 heads here"),
        (dict(relative_bias=(jnp.zeros((2, 32)), RelativeBuckets())), "must be a RelativeBias"),
    ],
)
def test_rejects_malformed_inputs(bad, message):
    q, k = jnp.zeros(bad.pop("q", (2, 8, 2, 16))), jnp.zeros(bad.pop("k", (2, 8, 2, 16)))
    with pytest.raises(ValueError, match=message):
        attention(q, k, k, **bad)


# Masks per case; "grouped": 4 query heads on 1 K/V head (multi-query), causal, as a decoder attends.
LOWERING_MASKS = {
    "lengths": {},
    "segments-window": dict(segments=True, window=64),
    "grouped-causal": dict(segments=True, kv_heads=1, causal=True),
}
# The project's kernel adds a relative position bias too; JAX's TPU kernels do not.
PALLAS_LOWERING_MASKS = LOWERING_MASKS | {"segments-relative-bias": dict(segments=True, relative=True)}


@pytest.mark.parametrize("masks", list(PALLAS_LOWERING_MASKS.values()), ids=list(PALLAS_LOWERING_MASKS))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("platform", ["tpu", "gpu"])
def test_pallas_kernel_lowers_for_tpu_and_gpu(platform, dtype, masks):
    """Mosaic (TPU) and Triton (GPU) lowering run in Python, so a CPU host can check
    them; only the final device compilation needs the chip."""
    q = spec(seq=200, heads=4 if "kv_heads" in masks else 2, head_dim=64, dtype=dtype)
    kv, lengths = kv_spec(q, masks.get("kv_heads")), jax.ShapeDtypeStruct((2,), jnp.int32)
    segments = jax.ShapeDtypeStruct((2, 200), jnp.int32) if masks else None
    window, causal = masks.get("window"), masks.get("causal", False)
    table = jnp.zeros((q.shape[2], 32)) if masks.get("relative") else None
    bias = None if table is None else RelativeBias(table, RelativeBuckets())
    fn = jax.jit(
        lambda q, k, v, l, s: pallas_attention(
            q, k, v, l, s, scale=0.125, window=window, causal=causal, platform=platform, bias=bias
        )
    )
    lowered = fn.trace(q, kv, kv, lengths, segments).lower(
        lowering_platforms=({"gpu": "cuda"}.get(platform, platform),)
    )
    assert ("tpu_custom_call" if platform == "tpu" else "triton") in lowered.as_text()


@pytest.mark.parametrize("masks", list(LOWERING_MASKS.values()), ids=list(LOWERING_MASKS))
@pytest.mark.parametrize("kernel", [tpu_flash_attention, tpu_splash_attention], ids=["tpu_flash", "tpu_splash"])
def test_jax_tpu_kernels_lower_for_tpu(kernel, masks):
    if kernel is tpu_flash_attention and "window" in masks:
        masks = dict(segments=True)  # it has no window (see its limits)
    q = spec(seq=200, heads=4 if "kv_heads" in masks else 2, head_dim=64, dtype=jnp.bfloat16)
    kv, lengths = kv_spec(q, masks.get("kv_heads")), jax.ShapeDtypeStruct((2,), jnp.int32)
    segments = jax.ShapeDtypeStruct((2, 200), jnp.int32) if masks else None
    window, causal = masks.get("window"), masks.get("causal", False)
    fn = jax.jit(lambda q, k, v, l, s: kernel(q, k, v, l, s, scale=0.125, window=window, causal=causal))
    assert "tpu_custom_call" in fn.trace(q, kv, kv, lengths, segments).lower(lowering_platforms=("tpu",)).as_text()


SHARD_MAP_SCRIPT = textwrap.dedent(
    """
    import contextlib
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from kernels.attention import attention, tpu_interpret_mode

    mesh = jax.make_mesh((2,), ("heads",))
    heads = P(None, None, "heads", None)
    q, k, v = (jax.random.normal(key, (2, 72, 4, 32)) for key in jax.random.split(jax.random.key(0), 3))
    lengths = jnp.array([0, 50], jnp.int32)
    expected = attention(q, k, v, kv_lengths=lengths, impl="reference")
    q, k, v = (jax.device_put(x, NamedSharding(mesh, heads)) for x in (q, k, v))

    def sharded(impl, check_vma):
        body = lambda q, k, v, l: attention(q, k, v, kv_lengths=l, impl=impl)
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(heads, heads, heads, P()),
                                     out_specs=heads, check_vma=check_vma))

    # (impl, check_vma, emulate a TPU). tpu_flash is left out: under TPU interpret
    # mode on two CPU devices JAX's emulator hangs on it.
    cases = [("auto", True, False), ("reference", True, False), ("blockwise", True, False),
             ("pallas", False, False), ("pallas", True, True), ("tpu_splash", False, True)]
    for impl, check_vma, emulate in cases:
        with tpu_interpret_mode() if emulate else contextlib.nullcontext():
            out = sharded(impl, check_vma)(q, k, v, lengths)
        assert out.sharding.spec == heads, out.sharding
        np.testing.assert_allclose(out, expected, atol=1e-5, rtol=1e-5, err_msg=impl)
        print("ok", impl)
    # Packed rows with a window: segment ids replicated, heads split.
    segments = jnp.asarray(np.repeat([[1, 2, 2, 0], [1, 1, 1, 1]], 18, axis=1), jnp.int32)
    expected = attention(q, k, v, kv_lengths=lengths, segment_ids=segments, window=9, impl="reference")
    for impl, check_vma, emulate in [("blockwise", True, False), ("tpu_splash", False, True)]:
        with tpu_interpret_mode() if emulate else contextlib.nullcontext():
            body = lambda q, k, v, l, s: attention(q, k, v, kv_lengths=l, segment_ids=s, window=9, impl=impl)
            out = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(heads, heads, heads, P(), P()),
                                        out_specs=heads, check_vma=check_vma))(q, k, v, lengths, segments)
        np.testing.assert_allclose(out, expected, atol=1e-5, rtol=1e-5, err_msg=impl)
        print("ok", impl)
    for impl, emulate in [("pallas", False), ("tpu_splash", True)]:
        with tpu_interpret_mode() if emulate else contextlib.nullcontext():
            try:
                sharded(impl, True)(q, k, v, lengths)
            except ValueError as error:
                assert "check_vma=False" in str(error), error
                print("refused", impl)
            else:
                raise AssertionError(impl + " should refuse check_vma=True")
    """
)


@cpu_only
def test_inside_shard_map_with_heads_split():
    """Two CPU devices need a fresh process: the device count is fixed at startup."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", SHARD_MAP_SCRIPT], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.split() == [
        "ok",
        "auto",
        "ok",
        "reference",
        "ok",
        "blockwise",
        "ok",
        "pallas",
        "ok",
        "pallas",
        "ok",
        "tpu_splash",
        "ok",
        "blockwise",
        "ok",
        "tpu_splash",
        "refused",
        "pallas",
        "refused",
        "tpu_splash",
    ]


def test_a_relative_bias_is_refused_by_the_kernels_without_one(pretend_gpu):
    with pytest.raises(
        ValueError,
        match="'cudnn' cannot run here: it adds no relative position bias \\(MPNet's, T5's\\); blockwise and "
        "pallas and reference do. Can run here: reference, blockwise, pallas",
    ):
        trace("cudnn", relative=True, dtype=jnp.bfloat16)


@pytest.mark.parametrize("where, picked", [("cpu", "blockwise"), ("gpu", "pallas"), ("tpu", "pallas")])
def test_auto_with_a_relative_bias_picks_a_kernel_that_adds_it_without_a_warning(fresh_log, monkeypatch, where, picked):
    """The kernels that cannot add the bias (JAX's TPU kernels, cuDNN) are not tried, so nothing falls back; the
    project's Pallas kernel can, on a GPU or TPU; short rows stay on XLA."""
    monkeypatch.setattr(_platform, "platform", lambda: where)
    trace(seq=1024, dtype=jnp.bfloat16, segments=True, relative=True)
    trace(seq=64, dtype=jnp.bfloat16, segments=True, relative=True)
    messages = [r.getMessage() for r in fresh_log.records]
    assert all(r.levelno == logging.INFO for r in fresh_log.records), messages
    assert messages[0].endswith(f"segment ids, relative position bias: using {picked!r}"), messages
    assert messages[1].endswith("using 'reference'"), messages
    assert {"impl": picked, "relative_bias": True}.items() <= _dispatch.ran()[-2].items()
    assert {"impl": "reference", "relative_bias": True}.items() <= _dispatch.ran()[-1].items()


@pytest.mark.parametrize("where, picked", [("cpu", "blockwise"), ("gpu", "pallas"), ("tpu", "tpu_splash")])
def test_auto_picks_the_platforms_kernel_for_causal_attention(fresh_log, monkeypatch, where, picked):
    """Causal attention (a decoder run as an encoder) takes the same kernels as any other: on a GPU, packed
    rows pass cuDNN by (no segment ids) for pallas, as without the mask."""
    monkeypatch.setattr(_platform, "platform", lambda: where)
    trace(seq=1024, dtype=jnp.bfloat16, segments=True, causal=True)
    assert fresh_log.records[-1].getMessage().endswith(f"segment ids, causal: using {picked!r}")
    assert {"impl": picked, "causal": True}.items() <= _dispatch.ran()[-1].items()


def test_causal_must_be_a_bool():
    with pytest.raises(ValueError, match="causal must be a bool; got 1"):
        trace("reference", causal=1)
