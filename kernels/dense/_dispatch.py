"""The one place a dense implementation is chosen.

A named implementation runs or raises an error that says why it cannot.
`auto` runs onednn for bfloat16 weights on CPU where the kernel can run, xla
everywhere else, and logs once what it chose for bfloat16 weights on CPU and why.
"""

from __future__ import annotations

import logging

import jax.numpy as jnp

from kernels.attention import _platform
from kernels.dense import ACTIVATIONS
from kernels.dense._library import unavailable
from kernels.dense._onednn import onednn_dense
from kernels.dense._reference import xla_dense

log = logging.getLogger("kernels.dense")

_FNS = {"xla": xla_dense, "onednn": onednn_dense}
_logged: set[str] = set()
_ran: dict[tuple[str, str], str] = {}  # (weights' dtype, output's) traced in this process -> the implementation


def ran() -> list[dict]:
    """What dense ran in this process: per weight and output dtype traced, the implementation chosen."""
    return [{"impl": impl, "weights": w, "out": out} for (w, out), impl in _ran.items()]


def _why_not_onednn(w_dtype, out_dtype) -> str | None:
    if _platform.platform() != "cpu":
        return f"needs CPU, platform is {_platform.platform()!r}"
    if w_dtype != jnp.bfloat16:
        return f"takes bfloat16 weights, got {jnp.dtype(w_dtype).name} (XLA's dot is the float32 path)"
    if out_dtype not in (jnp.float32, jnp.bfloat16):
        return f"returns float32 or bfloat16, asked {jnp.dtype(out_dtype).name}"
    return unavailable("onednn")


def _log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        log.info(message)


def choose(w_dtype, out_dtype, impl: str = "auto") -> str:
    """The implementation `dense` runs for these dtypes on this platform."""
    if impl not in ("auto", *_FNS):
        raise ValueError(f"unknown dense implementation {impl!r}; known: auto, {', '.join(_FNS)}")
    if impl == "xla":
        return impl
    why = _why_not_onednn(jnp.dtype(w_dtype), jnp.dtype(out_dtype))
    if impl == "onednn":
        if why is not None:
            raise ValueError(f"dense implementation onednn cannot run: {why}")
        return impl
    on_cpu_bf16 = _platform.platform() == "cpu" and jnp.dtype(w_dtype) == jnp.bfloat16
    if why is None:
        _log_once("dense: onednn, bfloat16 matmuls on oneDNN")
        return "onednn"
    if on_cpu_bf16:
        _log_once(f"dense: xla, onednn cannot run: {why}")
    return "xla"


def dense(x, w, bias=None, *, contract: int = 1, activation: str | None = None, out_dtype=None, impl: str = "auto"):
    """activation(x[..., K...] @ w[K..., N...] + bias[N...]) -> [..., N...] in `out_dtype` (default x's):
    see `kernels.dense`."""
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)}")
    if x.shape[x.ndim - contract :] != w.shape[:contract]:
        raise ValueError(f"x {x.shape} and w {w.shape} do not share their {contract} contracted axes")
    out_dtype = jnp.dtype(x.dtype if out_dtype is None else out_dtype)
    chosen = choose(w.dtype, out_dtype, impl)
    _ran[jnp.dtype(w.dtype).name, jnp.dtype(out_dtype).name] = chosen
    fn = _FNS[chosen]
    return fn(x, w, bias, contract=contract, activation=activation, out_dtype=out_dtype)
