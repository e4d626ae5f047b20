"""The machine a benchmark ran on, for the head of every table: CPU model and the ISA flags that matter."""

from __future__ import annotations

import platform
import subprocess

# What decides which matmul kernels can run: AVX-512 and its bfloat16/VNNI
# extensions, and AMX (bfloat16 matrix tiles, used by PyTorch, not by XLA CPU).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


def cpu_description() -> str:
    """'Intel(R) Xeon(R) Processor, 2 cpus, avx2 fma avx512f ...' from lscpu."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = set(info.get("Flags", "").split())
    isa = " ".join(f for f in ISA_FLAGS if f in flags)
    return f"{info.get('Model name', platform.processor()).strip()}, {info.get('CPU(s)', '?').strip()} cpus, {isa}"
