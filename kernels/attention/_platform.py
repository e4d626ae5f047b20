"""Which platform attention is traced for, and whether a TPU is being emulated.

The platform comes from `jax.default_backend()` at trace time, not from the
arrays: under `jax.jit` and `jax.shard_map` they are tracers without devices.
"""

import contextlib
import contextvars

import jax
from jax.experimental.pallas import tpu as pltpu

_emulating_tpu = contextvars.ContextVar("emulating_tpu", default=False)


def platform() -> str:
    """'cpu', 'gpu' or 'tpu' (or whatever else JAX reports); 'tpu' when emulated."""
    return "tpu" if _emulating_tpu.get() else jax.default_backend()


def emulating_tpu() -> bool:
    return _emulating_tpu.get()


@contextlib.contextmanager
def tpu_interpret_mode():
    """Treat the platform as a TPU and emulate Pallas TPU kernels on CPU (tests only).

    Every `pallas_call` traced inside, ours and JAX's shipped TPU kernels alike,
    runs in JAX's TPU interpret mode, which simulates VMEM, DMAs and TPU grid
    semantics. Dispatch then behaves as on a TPU (`tpu_flash` and `tpu_splash`
    become available). Opt-in, so that `auto` never picks an emulator in
    production.
    """
    token = _emulating_tpu.set(True)
    try:
        with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
            yield
    finally:
        _emulating_tpu.reset(token)
