"""int8 projections, simulated: how close dynamic int8 comes to float32 on the bundled model (issue 21 item 3).

    .venv/bin/python bench/int8_accuracy.py [--texts N] [--full-windows N]

Before an int8 kernel is worth writing, its scheme has to reach issue 21's min
cosine of 0.999. This quantises the projections' operands as an int8 matmul
would take them and computes in float32 (fake quantisation), so the figures
are the scheme's, whatever kernel would run it:

- weights: symmetric int8 per output column (what oneDNN's and VNNI's s8
  weights take, with a scale per column);
- activations, per row (per token), dynamic: symmetric int8 (s8), or
  asymmetric uint8 with a zero point (u8, VNNI's u8 x s8);
- every projection, all but the MLP's down-projection (whose input, after
  GELU, is the widest), or one projection alone (which one costs most);
- with SmoothQuant's migration of outlier channels from the activations into
  the weights (`smoothed`, alpha 0.3, 0.5 and 0.8), from each call's own channel
  maxima: an upper bound on scales calibrated once and folded into the layer
  norms;
- with LLM.int8()'s split (`kept`): the 1% or 3% of input channels with the
  call's largest max|x| multiply their weight rows unquantised, the rest in
  int8 with scales of their own; found per call, as a kernel would at run
  time, alone and after smoothing (alpha 0.5); and the best of these with
  the projection left out of int8 on bfloat16 operands (`down bf16`), as a
  mixed int8 and bfloat16 encoder would run it.

The forward pass is the encoder's own: the XLA dense implementation is
swapped for the fake-quantising one (`mock.patch.dict` on the dispatch table).
Min and mean cosine to float32 on bench/encoder.py's mixed texts and full
windows. Then, in the bench venv, the rates a kernel would start from:
PyTorch's oneDNN matmuls in float32, bfloat16 and int8 at the model's
projection shapes. Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from encoder import CORPUS, corpus_words, min_cosine, mixed_texts, pieces  # noqa: E402
from machine import cpu_description  # noqa: E402  (bench/machine.py)

from kernels.dense import _dispatch  # noqa: E402
from kernels.dense._reference import xla_dense  # noqa: E402
from pipeline.encode.embedder import Embedder  # noqa: E402

PROJECTIONS = ("qkv", "out", "up", "down")
BUT_DOWN = ("qkv", "out", "up")
WHICH = (("all", PROJECTIONS), ("all but down", BUT_DOWN))


def symmetric(a, axes):
    """Rounded to int8 levels with one scale per slice over `axes`, back in float32."""
    scale = jnp.max(jnp.abs(a), axis=axes, keepdims=True) / 127
    scale = jnp.where(scale == 0, 1.0, scale)
    return jnp.clip(jnp.round(a / scale), -127, 127) * scale


def asymmetric(a, axes):
    """Rounded to uint8 levels between the slice's min and max (a zero point), back in float32."""
    low, high = jnp.min(a, axis=axes, keepdims=True), jnp.max(a, axis=axes, keepdims=True)
    scale = jnp.where(high == low, 1.0, (high - low) / 255)
    zero = jnp.round(-low / scale)
    return (jnp.clip(jnp.round(a / scale) + zero, 0, 255) - zero) * scale


def projection(x, w, contract: int, activation) -> str:
    if contract == 2:
        return "out"
    if w.ndim == 4:  # D, X, N, H
        return "qkv"
    return "up" if activation is not None else "down"


def smoothed(x, w, contract: int, alpha: float):
    """SmoothQuant's migration: each input channel k of x divided by s_k and w's row k multiplied by it,
    s_k = max|x_k| ** alpha / max|w_k| ** (1 - alpha), so that outlier channels of x move into w. The
    product is unchanged; the channel maxima here are the call's own (dynamic), an upper bound on what
    scales calibrated once would give."""
    lead, inputs = tuple(range(x.ndim - contract)), tuple(range(contract, w.ndim))
    x_max = jnp.max(jnp.abs(x), axis=lead)  # [K...]
    w_max = jnp.max(jnp.abs(w), axis=inputs)  # [K...]
    s = jnp.where((x_max > 0) & (w_max > 0), x_max**alpha / jnp.maximum(w_max, 1e-12) ** (1 - alpha), 1.0)
    return x / s, w * s.reshape(s.shape + (1,) * (w.ndim - contract))


def outlier_channels(x, contract: int, share: float):
    """[K...] True for the input channels of x with the largest max|x|, `share` of them (at least one):
    LLM.int8()'s split keeps these out of int8 (here by rank; the paper's threshold is a magnitude of 6)."""
    x_max = jnp.max(jnp.abs(x), axis=tuple(range(x.ndim - contract)))
    k = max(1, round(share * x_max.size))
    return x_max >= jnp.sort(x_max.reshape(-1))[-k]


@dataclasses.dataclass(frozen=True)
class Scheme:
    activations: Callable  # symmetric (s8) or asymmetric (u8) activation levels, per row
    quantised: tuple[str, ...]  # the projections fake-quantised
    alpha: float | None = None  # SmoothQuant's migration strength; None: not smoothed
    kept: float | None = None  # LLM.int8()'s split: the share of input channels kept out of int8
    rest_bfloat16: bool = False  # the other projections on bfloat16 operands (float32 sums), else float32


def fake_int8(scheme: Scheme):
    """The XLA dense implementation with `scheme` applied to its projections."""

    def dense(x, w, bias, *, contract, activation, out_dtype):
        if projection(x, w, contract, activation) not in scheme.quantised:
            if scheme.rest_bfloat16:
                x, w = (a.astype(jnp.bfloat16).astype(jnp.float32) for a in (x, w))
        else:
            x, w = x.astype(jnp.float32), w.astype(jnp.float32)
            if scheme.alpha is not None:
                x, w = smoothed(x, w, contract, scheme.alpha)
            kept = (
                jnp.zeros(x.shape[x.ndim - contract :], bool)
                if scheme.kept is None
                else outlier_channels(x, contract, scheme.kept)
            )
            rows = kept.reshape(kept.shape + (1,) * (w.ndim - contract))
            # The kept channels multiply their weight rows unquantised; the rest is an int8 matmul of its own.
            inliers = scheme.activations(jnp.where(kept, 0.0, x), tuple(range(x.ndim - contract, x.ndim)))
            x = inliers + jnp.where(kept, x, 0.0)
            w = symmetric(jnp.where(rows, 0.0, w), tuple(range(contract))) + jnp.where(rows, w, 0.0)
        return xla_dense(x, w, bias, contract=contract, activation=activation, out_dtype=out_dtype)

    return dense


def smoothing(alpha: float | None) -> str:
    return "" if alpha is None else f" smoothed {alpha}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=300)
    p.add_argument("--full-windows", type=int, default=64)
    a = p.parse_args()
    words = corpus_words(CORPUS)
    sets = {"mixed": mixed_texts(words, a.texts), "full windows": pieces(words, [400] * a.full_windows)}
    exact = Embedder.load(dtype="float32")
    expected = {name: exact.embed(texts) for name, texts in sets.items()}
    # Each kind of activation scale, plain and smoothed, on all projections or all but down; u8 on one
    # projection at a time; LLM.int8()'s split, plain and smoothed; the best of those with down in bfloat16.
    schemes = {
        f"{kind}{smoothing(alpha)}, {which}": Scheme(fn, quantised, alpha)
        for alpha in (None, 0.3, 0.5, 0.8)
        for kind, fn in (("s8", symmetric), ("u8", asymmetric))
        for which, quantised in WHICH
    }
    schemes |= {f"u8, {one} only": Scheme(asymmetric, (one,)) for one in PROJECTIONS}
    schemes |= {
        f"u8{smoothing(alpha)}, {share:.0%} kept, {which}": Scheme(asymmetric, quantised, alpha, share)
        for alpha in (None, 0.5)
        for share in (0.01, 0.03)
        for which, quantised in WHICH
    }
    schemes |= {
        f"u8 smoothed 0.5, {share:.0%} kept, down bf16": Scheme(asymmetric, BUT_DOWN, 0.5, share, True)
        for share in (0.01, 0.03)
    }
    print(f"CPU: {cpu_description()}; jax {jax.__version__}")
    print("## min / mean cosine to float32, per-row activations and per-column int8 weights, fake-quantised")
    print(f"{'scheme':40s}" + "".join(f"{name:>26s}" for name in sets))
    for label, scheme in schemes.items():
        with mock.patch.dict(_dispatch._FNS, {"xla": fake_int8(scheme)}):
            jax.clear_caches()  # the patched implementation must be traced anew
            embedder = Embedder.load(dtype="float32", dense="xla")
            cells = []
            for name, texts in sets.items():
                got = embedder.embed(texts)
                mean = float(np.mean(np.sum(got * expected[name], axis=1)))
                cells.append(f"{min_cosine(got, expected[name]):.6f} / {mean:.6f}")
        print(f"{label:40s}" + "".join(f"{c:>26s}" for c in cells), flush=True)
    matmul_rates()


def matmul_rates(rows: int = 1024, rounds: int = 5, reps: int = 20) -> None:
    """What an int8 kernel could win: PyTorch's matmuls on oneDNN, float32, bfloat16 and int8 x int8 -> int32
    (`torch._int_mm`), at the bundled model's projection shapes and a CPU device's rows per batch (4 x 256).
    Best of `rounds` timings of `reps` calls each; all of this process's threads."""
    try:
        import torch
    except ImportError:
        print("\n(matmul rates: PyTorch is in the bench venv only: make bench)")
        return
    dim, ffn = 384, 1536  # all-MiniLM-L6-v2
    shapes = {"qkv": (dim, 3 * dim), "out": (dim, dim), "up": (dim, ffn), "down": (ffn, dim)}
    print(f"\n## matmul rates, [{rows}, K] x [K, N], torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'projection':12s}{'float32 GFLOP/s':>18s}{'bfloat16':>18s}{'int8 GOP/s':>18s}{'int8 / bfloat16':>18s}")
    for name, (k, n) in shapes.items():
        a, b = torch.randn(rows, k), torch.randn(k, n)
        operands = {
            "float32": (torch.matmul, a, b),
            "bfloat16": (torch.matmul, a.bfloat16(), b.bfloat16()),
            "int8": (
                torch._int_mm,
                torch.randint(-127, 128, (rows, k), dtype=torch.int8),
                torch.randint(-127, 128, (k, n), dtype=torch.int8),
            ),
        }
        rate = {}
        for dtype, (fn, x, w) in operands.items():
            fn(x, w)  # oneDNN picks and caches its kernel on the first call
            best = min(_seconds_per_call(fn, x, w, reps) for _ in range(rounds))
            rate[dtype] = 2 * rows * k * n / best / 1e9
        cells = "".join(f"{rate[d]:18,.0f}" for d in operands) + f"{rate['int8'] / rate['bfloat16']:17.2f}x"
        print(f"{name:12s}{cells}", flush=True)


def _seconds_per_call(fn, x, w, reps: int) -> float:
    started = time.perf_counter()
    for _ in range(reps):
        fn(x, w)
    return (time.perf_counter() - started) / reps


if __name__ == "__main__":
    main()
