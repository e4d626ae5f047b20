"""Attention kernels behind one contract.

    attention(q, k, v, *, kv_lengths=None, segment_ids=None, window=None, relative_bias=None, causal=False,
              impl="auto", scale=None)
    available_impls()  # names that can run on this platform
    ran()  # what ran in this process: per problem traced, the implementation chosen
    runs_on(impl, platform)  # whether impl can run on a platform ("cpu", "gpu", "tpu")

q is [batch, q_seq, N heads, head_dim], k and v [batch, kv_seq, K heads, head_dim] with K dividing N:
grouped-query attention (Qwen3's, Llama's, Mistral's, Gemma3's; multi-query with K = 1), query head n
attending with K/V head n // (N // K), as transformers' `repeat_kv` lays them out; K = N is multi-head
attention. Every implementation takes K < N.

Implementations (`IMPLS`): reference (plain XLA, the oracle), blockwise (flash
attention in plain JAX), pallas (our Pallas kernel: Mosaic on TPU, Triton on GPU,
interpret mode on CPU), tpu_flash and tpu_splash (JAX's TPU kernels), cudnn
(JAX's cuDNN flash attention on GPU). `tpu_interpret_mode()` emulates a TPU on CPU
for tests. `RelativeBias` and `RelativeBuckets` describe a T5-style relative position
bias (MPNet's, T5's), which reference and blockwise add; `causal` (Qwen3's) masks keys after the query,
which every implementation does.
"""

import importlib

from kernels.attention._buckets import RelativeBias, RelativeBuckets
from kernels.attention._impls import IMPLS, RELATIVE_BIAS_IMPLS, runs_on

# Imported on first use (PEP 562): the names and platforms above are all a job's driver needs, and JAX
# would cost it seconds of start-up and a hundred MB.
_LAZY = {
    "attention": "kernels.attention._dispatch",
    "available_impls": "kernels.attention._dispatch",
    "ran": "kernels.attention._dispatch",
    "tpu_interpret_mode": "kernels.attention._platform",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "IMPLS",
    "RELATIVE_BIAS_IMPLS",
    "RelativeBias",
    "RelativeBuckets",
    "attention",
    "available_impls",
    "ran",
    "runs_on",
    "tpu_interpret_mode",
]
