"""Dense projections behind one contract: the encoder's matmuls with their bias and activation.

    dense(x, w, bias=None, *, contract=1, activation=None, out_dtype=None, impl="auto")
    choose(w_dtype, out_dtype, impl="auto") -> the implementation `dense` runs (ValueError: one that cannot)
    unavailable(impl) -> why `impl` cannot run in this process, or None
    ran() -> what ran in this process: per weight and output dtype traced, the implementation chosen

    y[..., N...] = activation(x[..., K...] @ w[K..., N...] + bias[N...])

x's trailing `contract` axes are contracted with w's leading ones. The operands
are rounded to w's dtype (the dtype the weights were cast to), products are
accumulated in float32, and bias and activation apply to the float32 result,
which is returned in `out_dtype` (default x's). So bfloat16 weights under
float32 activations mean bfloat16 multiplies and float32 everything else.

Implementations (`IMPLS`): xla (`jnp.tensordot`, the reference: XLA's dot on
every platform) and onednn (oneDNN's matmul through `jax.ffi`, CPU only,
bfloat16 weights, on the CPU's bfloat16 dot instructions, with the bias and
activation fused: 4-9% ahead of XLA's own bfloat16 dots in the encoder on an
AMD EPYC Zen 4, BENCHMARKS.md). `auto` picks onednn where it can run and
xla elsewhere, and logs its choice once.

Activations, by the names `kernels.encoders` gives config.json's: gelu
(exact, erf), gelu_tanh, relu, silu, quick_gelu (x sigmoid(1.702 x); the
oneDNN kernel applies it after its call, which fuses the others).
"""

import importlib

from kernels.dense._library import IMPLS, unavailable

ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu", "quick_gelu")

# Imported on first use (PEP 562): `unavailable` is all a job's driver needs, and JAX would cost it
# seconds of start-up and a hundred MB.
_LAZY = dict.fromkeys(("choose", "dense", "ran"), "kernels.dense._dispatch")


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ACTIVATIONS", "IMPLS", "choose", "dense", "ran", "unavailable"]
