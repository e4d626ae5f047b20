"""bfloat16 matmuls on oneDNN through jax.ffi, against XLA:CPU's: a lone matmul and the encoder (issue 21).

    .venv-bench/bin/python bench/onednn_matmul.py [--rounds N]

XLA:CPU computes every bfloat16 dot in float32 (bench/xla_cpu.py), so on a CPU
with bfloat16 dot instructions (avx512_bf16, AMX) the route to bfloat16 speed is a
matmul kernel of a library that uses them. This builds bench/onednn_matmul.cc (an
XLA FFI handler over oneDNN's matmul primitive, bfloat16 in and out, float32
accumulation, optionally GELU as a post-op) with g++ against `jax.ffi.include_dir()` and the oneDNN of the
bench extra (`onednn-cpu-gomp`, `onednn-devel-cpu-gomp`), and measures:

- the encoder's MLP matmul ([1024, 384] x [384, 1536]): XLA float32, XLA
  bfloat16 and the oneDNN kernel, GFLOP/s;
- six MLP layers of the encoder's shape under `lax.scan` (up, exact GELU, down,
  residual; [2048, 384] rows): XLA float32 and bfloat16, the oneDNN kernel with
  XLA's GELU between its matmuls, and with the GELU as the kernel's post-op;
- the encoder (the bundled model, one device) on bench/encoder.py's mixed texts
  and full windows: float32 against bfloat16 with the layers' projections (every
  two-operand einsum of `kernels.encoders._blocks` in bfloat16) on the oneDNN
  kernel, in alternating rounds, and the min cosine to float32.

The encoder's einsums are rerouted by replacing the `jnp` that `_blocks` sees, in
this process only: a measurement of what the kernel would give before it is
wired in behind a dispatch of its own.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from encoder import CORPUS, corpus_words, min_cosine, mixed_texts, pieces, timed  # noqa: E402
from machine import cpu_description  # noqa: E402  (bench/machine.py)

from kernels.encoders import _blocks  # noqa: E402
from pipeline.encode.embedder import Embedder  # noqa: E402

TARGET = "docembed_onednn_matmul_bf16"


def threads_per_device() -> int:
    """The cores each CPU device's calls may use: the kernel runs on its caller's thread with an OpenMP
    team of this size, so the devices' calls together take every core, as XLA's dots do, and no more."""
    return max(1, len(os.sched_getaffinity(0)) // jax.local_device_count())


def build(out_dir: Path) -> Path:
    """Compiles bench/onednn_matmul.cc against JAX's FFI headers and the venv's oneDNN."""
    lib = out_dir / "libdocembed_onednn.so"
    prefix = Path(sys.prefix)
    subprocess.run(
        ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-fopenmp", "-w", str(REPO / "bench" / "onednn_matmul.cc"),
         f"-I{jax.ffi.include_dir()}", f"-I{prefix / 'include'}", f"-L{prefix / 'lib'}", "-ldnnl",
         f"-Wl,-rpath,{prefix / 'lib'}", "-o", str(lib)],
        check=True,
    )  # fmt: skip
    return lib


def register(lib_path: Path) -> None:
    lib = ctypes.cdll.LoadLibrary(str(lib_path))
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.DocembedMatmulBf16), platform="cpu")


def onednn_matmul(x_MK, w_KN, gelu: bool = False):
    """x [M, K] @ w [K, N] in bfloat16 on the oneDNN kernel; with `gelu`, the exact GELU of it."""
    out = jax.ShapeDtypeStruct((x_MK.shape[0], w_KN.shape[1]), jnp.bfloat16)
    return jax.ffi.ffi_call(TARGET, out)(x_MK, w_KN, threads=np.int64(threads_per_device()), gelu=gelu)


def onednn_einsum(spec: str, x, w):
    """`jnp.einsum` for the blocks' projections (x's trailing axes contracted with w's leading ones)
    on the oneDNN kernel when in bfloat16."""
    if x.dtype != jnp.bfloat16:
        return jnp.einsum(spec, x, w)
    x_axes, w_axes = spec.split("->")[0].split(",")
    contracted = len(set(x_axes) & set(w_axes))
    lead, k = x.shape[: x.ndim - contracted], int(np.prod(x.shape[x.ndim - contracted :]))
    return onednn_matmul(x.reshape(-1, k), w.reshape(k, -1)).reshape(*lead, *w.shape[contracted:])


def seconds(fn, *args, calls: int = 10) -> float:
    call = lambda: fn(*args).block_until_ready()
    call()
    return statistics.median(timed(call) for _ in range(calls))


def matmul_table(m: int = 1024, k: int = 384, n: int = 1536) -> None:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32) * 0.05
    xb, wb = jnp.asarray(x, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)
    xla, ours = jax.jit(jnp.matmul), jax.jit(onednn_matmul)
    exact = np.asarray(xb, np.float32) @ np.asarray(wb, np.float32)
    error = np.max(np.abs(np.asarray(ours(xb, wb), np.float32) - exact)) / np.max(np.abs(exact))
    flop = 2 * m * k * n
    print(f"## matmul [{m}, {k}] x [{k}, {n}], GFLOP/s (median of 10 calls)")
    rates = [flop / seconds(fn, *args) / 1e9 for fn, args in ((xla, (x, w)), (xla, (xb, wb)), (ours, (xb, wb)))]
    print(f"XLA float32 {rates[0]:.0f}; XLA bfloat16 {rates[1]:.0f}; oneDNN bfloat16 {rates[2]:.0f}")
    print(f"oneDNN's largest error: {error:.1e} of the largest entry")


def mlp_layers(x_MD, up_LDF, down_LFD, up_gelu, down):
    """L MLP layers under `lax.scan`: x + down(up_gelu(x, up)), the encoder's MLP without its biases."""

    def layer(x_MD, weights):
        up_DF, down_FD = weights
        return x_MD + down(up_gelu(x_MD, up_DF), down_FD), None

    return jax.lax.scan(layer, x_MD, (up_LDF, down_LFD))[0]


def mlp_table(m: int = 2048, d: int = 384, f: int = 1536, layers: int = 6) -> None:
    rng = np.random.default_rng(0)
    f32 = (
        rng.standard_normal((m, d), np.float32),
        rng.standard_normal((layers, d, f), np.float32) * 0.05,
        rng.standard_normal((layers, f, d), np.float32) * 0.05,
    )
    bf16 = tuple(jnp.asarray(a, jnp.bfloat16) for a in f32)
    xla_up = lambda x, w: jax.nn.gelu(jnp.matmul(x, w), approximate=False)
    variants = {  # name: (up and GELU, down, arguments)
        "XLA float32": (xla_up, jnp.matmul, f32),
        "XLA bfloat16": (xla_up, jnp.matmul, bf16),
        "oneDNN bfloat16, XLA's GELU between": (
            lambda x, w: jax.nn.gelu(onednn_matmul(x, w), approximate=False),
            onednn_matmul,
            bf16,
        ),
        "oneDNN bfloat16, GELU as its post-op": (lambda x, w: onednn_matmul(x, w, gelu=True), onednn_matmul, bf16),
    }
    print(f"\n## {layers} MLP layers, [{m}, {d}] rows, F = {f}: ms a call (median of 10), speed, min row cosine")
    exact_MD = base_ms = None
    for name, (up_gelu, down, args) in variants.items():
        program = jax.jit(lambda x, u, w, up_gelu=up_gelu, down=down: mlp_layers(x, u, w, up_gelu, down))
        out_MD = np.asarray(program(*args), np.float32)
        ms = seconds(program, *args) * 1e3
        if exact_MD is None:  # the first variant, XLA float32, is what the others are measured against
            exact_MD, base_ms = out_MD, ms
        print(
            f"{name}: {ms:.1f} ms, {base_ms / ms:.2f}x of float32, min cosine to it {min_cosine(out_MD, exact_MD):.6f}"
        )


def encoder_table(rounds: int) -> None:
    words = corpus_words(CORPUS)
    text_sets = {"mixed": mixed_texts(words, 300), "full windows": pieces(words, [400] * 64)}
    f32 = Embedder.load(dtype="float32")
    # bfloat16 weights make the forward pass trace anew, so it sees the rerouted einsum.
    _blocks.jnp = types.SimpleNamespace(**{name: getattr(jnp, name) for name in dir(jnp) if not name.startswith("__")})
    _blocks.jnp.einsum = onednn_einsum
    bf16 = Embedder.load(dtype="bfloat16")
    print(f"\n## encoder, float32 against bfloat16 on oneDNN projections (GELU apart): {rounds} alternating rounds")
    for name, texts in text_sets.items():
        cosine = min_cosine(f32.embed(texts), bf16.embed(texts))
        ratios = [
            timed(functools.partial(f32.embed, texts)) / timed(functools.partial(bf16.embed, texts))
            for _ in range(rounds)
        ]
        print(f"{name}: bfloat16/float32 speed {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}], "
              f"min cosine to float32 {cosine:.6f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; jax {jax.__version__}; {threads_per_device()} threads per device")
    with tempfile.TemporaryDirectory() as tmp:
        register(build(Path(tmp)))
        matmul_table()
        mlp_table()
        encoder_table(args.rounds)


if __name__ == "__main__":
    main()
