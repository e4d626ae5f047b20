"""Attention kernels behind one contract.

    attention(q, k, v, *, kv_lengths=None, segment_ids=None, window=None, impl="auto", scale=None)
    available_impls()  # names that can run on this platform
    runs_on(impl, platform)  # whether impl can run on a platform ("cpu", "gpu", "tpu")

Implementations (`IMPLS`): reference (plain XLA, the oracle), blockwise (flash
attention in plain JAX), pallas (our Pallas kernel: Mosaic on TPU, Triton on GPU,
interpret mode on CPU), tpu_flash and tpu_splash (JAX's TPU kernels), cudnn
(JAX's cuDNN flash attention on GPU). `tpu_interpret_mode()` emulates a TPU on CPU
for tests.
"""

from kernels.attention._dispatch import IMPLS, attention, available_impls, runs_on
from kernels.attention._platform import tpu_interpret_mode

__all__ = ["IMPLS", "attention", "available_impls", "runs_on", "tpu_interpret_mode"]
