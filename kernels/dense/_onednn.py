"""The contract on oneDNN's matmul through `jax.ffi`, for CPUs with bfloat16 dot instructions.

The kernel (onednn_dense.cc) takes x and w as [M, K] and [K, N] bfloat16 and
a float32 bias [N], and returns [M, N] float32 or bfloat16: this flattens
the contracted and the kept axes around it. It is registered with XLA once per
process, on first use.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from kernels.dense._library import LIBRARY
from kernels.dense._reference import ACTIVATION_FNS

TARGET = "docembed_onednn_dense"
# The activations onednn_dense.cc fuses into its call. Another (quick_gelu: oneDNN's swish would need its beta,
# 1.702, passed in) is applied to the kernel's float32 result, as the contract orders, then rounded.
FUSED = ("gelu", "gelu_tanh", "relu", "silu")


@functools.cache
def _register() -> None:
    library = ctypes.cdll.LoadLibrary(str(LIBRARY))
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.DocembedDense), platform="cpu")


def threads_per_device() -> int:
    """The cores each CPU device's calls may use. The kernel runs on its caller's thread with an OpenMP
    team of this size, so the devices' calls side by side take the cores the process has (OMP_NUM_THREADS
    where set, as Ray sets it for an actor, else its affinity mask), and no more."""
    cores = int(os.environ.get("OMP_NUM_THREADS", 0)) or len(os.sched_getaffinity(0))
    return max(1, cores // jax.local_device_count())


def onednn_dense(x, w, bias, *, contract: int, activation: str | None, out_dtype):
    """activation(x @ w + bias) on the oneDNN kernel; w bfloat16, out_dtype float32 or bfloat16."""
    _register()
    lead, n_shape = x.shape[: x.ndim - contract], w.shape[contract:]
    k, n = math.prod(w.shape[:contract]), math.prod(n_shape)
    x_MK = x.astype(jnp.bfloat16).reshape(-1, k)
    bias_N = jnp.zeros((n,), jnp.float32) if bias is None else bias.astype(jnp.float32).reshape(n)
    fused = activation if activation in FUSED else None
    out = jax.ShapeDtypeStruct((x_MK.shape[0], n), out_dtype if fused == activation else jnp.float32)
    y_MN = jax.ffi.ffi_call(TARGET, out)(
        x_MK, w.reshape(k, n), bias_N, activation=fused or "none", threads=np.int64(threads_per_device())
    )
    if fused != activation:
        y_MN = ACTIVATION_FNS[activation](y_MN).astype(out_dtype)
    return y_MN.reshape(*lead, *n_shape)
