"""The one place the encoder's compute dtype is chosen: what was asked, what runs, and why.

    choose_dtype(requested, platform, flags=None, kernel_missing=None) -> DtypeChoice(requested, dtype, reason)
    activation_dtype(dtype, platform) -> the dtype of the activations between the matmuls

float32 always runs as asked. bfloat16 runs as asked on GPU and TPU (their
matrix units take it). On a CPU it runs where the CPU has bfloat16 dot-product
instructions (`BF16_DOT_FLAGS`): the projections then run on the oneDNN matmul
kernel (`kernels.dense`) where it is built, and on XLA's own dots where it is
not. XLA:CPU runs a bfloat16 dot with a float32 result natively (YNNPACK);
on an AMD EPYC Zen 4 that alone gave 1.47-1.54x of float32, the kernel
1.53-1.63x (BENCHMARKS.md). A CPU without those instructions runs float32,
and says why: its bfloat16 arithmetic is float32 arithmetic with conversions
around it (the old all-bfloat16 program ran at 0.71x of float32 on a Zen 3).

On a CPU, bfloat16 means bfloat16 matmul operands (the weights, and each
matmul's input rounded to them), accumulated in float32, attention's QK and PV
dots included (its keys centred first: `encoders._blocks.attention_operands`),
with the activations, norms and softmax in float32: XLA:CPU computes
elementwise bfloat16 in float32 anyway, with a convert on each side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

# Names, not JAX dtypes (`jnp.dtype(name)` is one): the job's driver chooses without importing JAX.
DTYPES = ("float32", "bfloat16")

# CPU feature flags of bfloat16 dot-product instructions, as Linux names them in
# /proc/cpuinfo: x86's AVX-512 BF16 (vdpbf16ps) and AMX tiles, Arm's BF16
# (BFDOT, BFMMLA; the "Features" line).
BF16_DOT_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")

CPUINFO = "/proc/cpuinfo"


@dataclasses.dataclass(frozen=True)
class DtypeChoice:
    requested: str
    dtype: str  # what runs: one of DTYPES
    reason: str  # one line saying why

    @property
    def changed(self) -> bool:
        return self.dtype != self.requested


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """This CPU's feature flags: the first `flags` (x86) or `Features` (Arm) line of /proc/cpuinfo,
    or of `cpuinfo`, that file's text. Empty where there is no such file (macOS, Windows)."""
    if cpuinfo is None:
        try:
            with open(CPUINFO) as f:
                cpuinfo = f.read()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def choose_dtype(
    requested: str,
    platform: str,
    flags: frozenset[str] | None = None,
    kernel_missing: Callable[[], str | None] | None = None,
) -> DtypeChoice:
    """The dtype an encoder runs for `requested` ("float32" or "bfloat16") on `platform` ("cpu", "gpu",
    "tpu"). `flags`: the CPU's feature flags (default: `cpu_flags()`, read only on a CPU asked bfloat16).
    `kernel_missing() -> why the CPU's bfloat16 matmul kernel is missing, or None`: default
    `kernels.dense`'s, asked only on a CPU with bfloat16 dot instructions asked bfloat16, to say
    where the matmuls run."""
    if requested not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {requested!r}")
    if requested == "float32":
        return DtypeChoice(requested, "float32", "float32 as asked")
    if platform != "cpu":
        return DtypeChoice(requested, "bfloat16", f"bfloat16 as asked: the {platform.upper()}'s matrix units take it")
    flags = cpu_flags() if flags is None else flags
    has = [flag for flag in BF16_DOT_FLAGS if flag in flags]
    if not has:
        return DtypeChoice(
            requested,
            "float32",
            f"this CPU has no bfloat16 dot instructions ({', '.join(BF16_DOT_FLAGS)}): its bfloat16 matmuls "
            "would be float32 arithmetic with conversions around them, which has not paid (0.71x of float32 "
            "on an AMD EPYC Zen 3)",
        )
    if kernel_missing is None:
        from kernels.dense._library import kernel_missing  # imported here: it imports this module
    kernel = kernel_missing()
    where = "oneDNN" if kernel is None else f"XLA's dots ({kernel})"
    return DtypeChoice(
        requested,
        "bfloat16",
        f"bfloat16 as asked: this CPU has {', '.join(has)}; matmuls in bfloat16 on {where}, activations in float32",
    )


def activation_dtype(dtype: str, platform: str) -> str:
    """The dtype between the matmuls for compute dtype `dtype`: float32 on a CPU (see above), else `dtype`."""
    return "float32" if platform == "cpu" else dtype
