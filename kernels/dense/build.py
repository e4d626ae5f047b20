"""Builds the oneDNN dense kernel: `python -m kernels.dense.build` (`make install` runs it).

Compiles onednn_dense.cc with the system's g++ against JAX's FFI headers
(`jax.ffi.include_dir()`) and the oneDNN of this environment (`onednn-cpu-gomp`
and its headers, `onednn-devel-cpu-gomp`), into this environment's lib/.
On any x86-64 Linux with g++, whatever its CPU: whether the kernel can run is
decided when it is called (`kernels.dense.unavailable`). Elsewhere it says so
and builds nothing, and the encoders use XLA's dots.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import jax

from kernels.dense._library import LIBRARY, SOURCE, builds_here


def build(out: Path = LIBRARY) -> Path:
    """Compiles the kernel into `out`, atomically: a reader never sees a half-written library."""
    prefix = Path(sys.prefix)
    if not (prefix / "include" / "oneapi" / "dnnl" / "dnnl.hpp").exists():
        raise FileNotFoundError(f"oneDNN's headers are not in {prefix / 'include'}: install onednn-devel-cpu-gomp")
    partial = out.with_suffix(".so.partial")
    subprocess.run(
        ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-fopenmp", "-w", str(SOURCE),
         f"-I{jax.ffi.include_dir()}", f"-I{prefix / 'include'}", f"-L{prefix / 'lib'}", "-ldnnl",
         f"-Wl,-rpath,{prefix / 'lib'}", "-o", str(partial)],
        check=True,
    )  # fmt: skip
    partial.replace(out)
    return out


def main() -> None:
    why = builds_here() or (None if shutil.which("g++") else "no C++ compiler (g++) on PATH")
    if why is not None:
        print(f"kernels.dense: the oneDNN kernel is not built: {why}; the encoders use XLA's dots")
        return
    print(f"kernels.dense: built {build()}")


if __name__ == "__main__":
    main()
