"""Where the oneDNN kernel's library lives and whether it can run here, without JAX (the job's
driver asks before any encoder starts)."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from kernels.compute_dtype import cpu_flags

IMPLS = ("xla", "onednn")

SOURCE = Path(__file__).with_name("onednn_dense.cc")
# Built by `make install` (python -m kernels.dense.build) into this environment, beside the
# oneDNN library it links: each virtualenv has its own.
LIBRARY = Path(sys.prefix) / "lib" / "libdocembed_dense.so"


def builds_here() -> str | None:
    """Why the oneDNN kernel cannot be built on this platform, or None: the `onednn-cpu-gomp` wheels
    it links are x86-64 Linux only."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"oneDNN's CPU wheels are x86-64 Linux only, this is {sys.platform} {platform.machine()}"
    return None


def kernel_missing() -> str | None:
    """Why there is no oneDNN kernel to call in this environment, or None."""
    why = builds_here()
    if why is None and not LIBRARY.exists():
        why = f"the oneDNN kernel is not built ({LIBRARY.name}): run `make install`"
    return why


def unavailable(impl: str) -> str | None:
    """Why `impl` cannot run in this process, or None. xla always can; onednn needs its kernel and
    AVX-512 (oneDNN has no bfloat16 matmul without it; avx512_bf16 or AMX make it fast)."""
    if impl not in IMPLS:
        raise ValueError(f"unknown dense implementation {impl!r}; known: auto, {', '.join(IMPLS)}")
    if impl == "xla":
        return None
    why = kernel_missing()
    if why is None and "avx512f" not in cpu_flags():
        why = "this CPU has no AVX-512, which oneDNN's bfloat16 matmul needs"
    return why
