"""The one place the encoder's compute dtype is chosen: what was asked, what runs, and why.

    choose_dtype(requested, platform, flags=None) -> DtypeChoice(requested, dtype, reason)

float32 always runs as asked. bfloat16 runs as asked on GPU and TPU (their
matrix units take it) and on CPUs with bfloat16 dot-product instructions
(`BF16_DOT_FLAGS`). On any other CPU it runs float32: XLA:CPU has no
bfloat16 dot there and computes each one in float32, with converts of the
weights and activations around it (the optimized HLO shows `f32 dot`s fed by
`convert`s), so bfloat16 would cost rounding and the converts and save
nothing (docs/accelerators.md, BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses

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


def choose_dtype(requested: str, platform: str, flags: frozenset[str] | None = None) -> DtypeChoice:
    """The dtype an encoder runs for `requested` ("float32" or "bfloat16") on `platform` ("cpu", "gpu",
    "tpu"). `flags`: the CPU's feature flags (default: `cpu_flags()`, read only on a CPU asked bfloat16)."""
    if requested not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {requested!r}")
    if requested == "float32":
        return DtypeChoice(requested, "float32", "float32 as asked")
    if platform != "cpu":
        return DtypeChoice(requested, "bfloat16", f"bfloat16 as asked: the {platform.upper()}'s matrix units take it")
    flags = cpu_flags() if flags is None else flags
    has = [flag for flag in BF16_DOT_FLAGS if flag in flags]
    if has:
        return DtypeChoice(requested, "bfloat16", f"bfloat16 as asked: this CPU has {', '.join(has)}")
    return DtypeChoice(
        requested,
        "float32",
        f"this CPU has no bfloat16 dot instructions ({', '.join(BF16_DOT_FLAGS)}): XLA would compute "
        "every bfloat16 matmul in float32 with conversions around it, slower than float32 itself",
    )
