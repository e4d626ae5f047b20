"""bfloat16 projections on a CPU: XLA's dots against oneDNN's kernel (`kernels.dense`), from one matmul
to the encoder (issue 21).

    .venv/bin/python bench/dense.py [--rounds N] [--family gte] [--window 2048]

XLA:CPU computes every bfloat16 dot in float32 (bench/xla_cpu.py); on a CPU
with bfloat16 dot instructions (avx512_bf16, AMX) `kernels.dense` runs the
projections on oneDNN's matmul instead. Four tables, each side by side in one
run, rounds alternating so that load from other work falls on all alike:

1. the encoder's MLP matmul ([1024, 384] x [384, 1536], exact GELU after it):
   xla float32, xla bfloat16 and onednn bfloat16, GFLOP/s;
2. six MLP layers of the encoder's shape under `lax.scan` ([2048, 384] rows,
   float32 activations as the encoder runs them): the same three;
3. the bundled model on bench/encoder.py's mixed texts and full windows:
   float32, bfloat16 (auto: onednn) and bfloat16 on xla's dots, tokens/s
   ratios to float32 per round, min cosine to float32;
4. one long-context family (bench/families.py's config, random weights) at a
   long window: float32 against bfloat16, whole rows.

CPU devices are the encoder's default (one per core; JAX_NUM_CPU_DEVICES
overrides it). Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.encode.cpu_devices import use_cpu_devices  # noqa: E402

use_cpu_devices()  # before JAX's backend starts, as the encoder does

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from encoder import CORPUS, corpus_words, min_cosine, mixed_texts, pieces, spread, timed  # noqa: E402
from families import CONFIGS, compiled_forward, rows  # noqa: E402
from machine import cpu_description  # noqa: E402  (bench/machine.py)

from kernels import encoders  # noqa: E402
from kernels.dense import dense, unavailable  # noqa: E402
from pipeline.encode.embedder import Embedder  # noqa: E402

# name: (weights dtype, dense implementation)
VARIANTS = {
    "xla float32": (jnp.float32, "xla"),
    "xla bfloat16": (jnp.bfloat16, "xla"),
    "onednn bfloat16": (jnp.bfloat16, "onednn"),
}


def seconds(fn, *args, calls: int = 10) -> float:
    call = lambda: jax.block_until_ready(fn(*args))  # noqa: E731
    call()
    return statistics.median(timed(call) for _ in range(calls))


def matmul_table(rounds: int, m: int = 1024, k: int = 384, n: int = 1536) -> None:
    rng = np.random.default_rng(0)
    x, w = jnp.asarray(rng.standard_normal((m, k), np.float32)), rng.standard_normal((k, n), np.float32) * 0.05
    programs = {
        name: (jax.jit(functools.partial(dense, activation="gelu", impl=impl)), jnp.asarray(w, dtype))
        for name, (dtype, impl) in VARIANTS.items()
    }
    rates: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(rounds):
        for name, (program, weights) in programs.items():
            rates[name].append(2 * m * k * n / seconds(program, x, weights) / 1e9)
    print(f"## matmul [{m}, {k}] x [{k}, {n}] + GELU, GFLOP/s, median [min-max] of {rounds} rounds")
    for name, values in rates.items():
        print(f"{name}: {statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]")


def mlp_layers(x_MD, up_LDF, down_LFD, impl: str):
    """x + down(gelu(up(x))) per layer under `lax.scan`: the encoder's MLP without its biases."""

    def layer(x_MD, weights):
        up_DF, down_FD = weights
        h_MF = dense(x_MD, up_DF, activation="gelu", out_dtype=down_FD.dtype, impl=impl)
        return x_MD + dense(h_MF, down_FD, impl=impl), None

    return jax.lax.scan(layer, x_MD, (up_LDF, down_LFD))[0]


def mlp_table(rounds: int, m: int = 2048, d: int = 384, f: int = 1536, layers: int = 6) -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((m, d), np.float32))
    up, down = (rng.standard_normal(shape, np.float32) * 0.05 for shape in ((layers, d, f), (layers, f, d)))
    programs = {
        name: (jax.jit(functools.partial(mlp_layers, impl=impl)), jnp.asarray(up, dtype), jnp.asarray(down, dtype))
        for name, (dtype, impl) in VARIANTS.items()
    }
    outputs = {name: np.asarray(program(x, u, w)) for name, (program, u, w) in programs.items()}
    ratios: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(rounds):
        times = {name: seconds(program, x, u, w) for name, (program, u, w) in programs.items()}
        for name in programs:
            ratios[name].append(times["xla float32"] / times[name])
    print(f"\n## {layers} MLP layers, [{m}, {d}] rows, F = {f}: speed against xla float32, min row cosine to it")
    for name in programs:
        print(f"{name}: {spread(ratios[name])}, min cosine {min_cosine(outputs[name], outputs['xla float32']):.6f}")


def encoder_table(rounds: int) -> None:
    words = corpus_words(CORPUS)
    text_sets = {"mixed": mixed_texts(words, 300), "full windows": pieces(words, [400] * 64)}
    embedders = {
        "float32": Embedder.load(dtype="float32"),
        "bfloat16 (auto: onednn)": Embedder.load(dtype="bfloat16"),
        "bfloat16 on xla's dots": Embedder.load(dtype="bfloat16", dense="xla"),
    }
    print(f"\n## the bundled encoder, {jax.local_device_count()} CPU devices: speed against float32, {rounds} rounds")
    for set_name, texts in text_sets.items():
        exact = embedders["float32"].embed(texts)
        ratios: dict[str, list[float]] = {name: [] for name in embedders}
        for round_ in range(rounds):
            order = list(embedders) if round_ % 2 == 0 else list(reversed(embedders))
            times = {name: timed(functools.partial(embedders[name].embed, texts)) for name in order}
            for name in embedders:
                ratios[name].append(times["float32"] / times[name])
        for name, embedder in embedders.items():
            cosine = min_cosine(embedder.embed(texts), exact)
            print(
                f"{set_name}, {name} (runs {embedder.encoder.dtype}): {spread(ratios[name])}, min cosine {cosine:.6f}"
            )


def long_window_table(rounds: int, family: str, window: int) -> None:
    name = next(n for n in CONFIGS if n.startswith(family))
    cfg = encoders.config_from_hf(CONFIGS[name])
    params = encoders.init_params(cfg)
    variants = {
        "float32": encoders.cast_params(params, jnp.float32),
        "bfloat16": encoders.cast_params(params, jnp.bfloat16, jnp.float32),
    }
    batch = rows(window, window)
    programs = {dtype: (compiled_forward(p, cfg, window, window, "auto"), p) for dtype, p in variants.items()}
    out = {dtype: np.asarray(fn(p, *batch), np.float32)[0] for dtype, (fn, p) in programs.items()}
    ratios = []
    for _ in range(rounds):
        times = {dtype: seconds(fn, p, *batch, calls=2) for dtype, (fn, p) in programs.items()}
        ratios.append(times["float32"] / times["bfloat16"])
    print(f"\n## {name}, one row of {window} tokens, random weights: bfloat16 against float32")
    print(f"speed {spread(ratios)}, min token cosine to float32 {min_cosine(out['bfloat16'], out['float32']):.6f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--family", default="gte", help="the long-context family of bench/families.py")
    parser.add_argument("--window", type=int, default=2048)
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; jax {jax.__version__}; {jax.local_device_count()} CPU devices")
    why = unavailable("onednn")
    if why is not None:  # `make bench` runs on every CPU: nothing to compare here
        print(f"the oneDNN kernel cannot run here: {why}")
        return
    matmul_table(args.rounds)
    mlp_table(args.rounds)
    encoder_table(args.rounds)
    long_window_table(args.rounds, args.family, args.window)


if __name__ == "__main__":
    main()
