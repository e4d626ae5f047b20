"""XLA:CPU's dot paths, float32 and bfloat16, side by side in one process: a matmul and the encoder.

    .venv/bin/python bench/xla_cpu.py [--rounds N] [--rows N]

Each XLA option set (DebugOptions, passed per compilation, so every program
lives in one process and rounds alternate between them) compiles two programs,
each in float32 and in bfloat16: one matmul of the encoder's MLP shape
([rows * window, D] x [D, F]) and the encoder's forward pass over `--rows`
full windows of real text on one CPU device. For each it prints what the
optimized HLO computes its dots in (`f32 dot` fed by `convert`s is bfloat16
upcast), which library runs them (YNNPACK, XNNPACK or oneDNN fusions, or
XLA's own emitter), the largest deviation from the default float32 program,
and its speed against the default float32 program: median and range of the
per-round ratios.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from encoder import CORPUS, corpus_words, pieces  # noqa: E402
from machine import cpu_description  # noqa: E402  (bench/machine.py)

from kernels import encoders  # noqa: E402
from pipeline.encode.model_dir import load_params, resolve  # noqa: E402
from pipeline.text.tokenizer import Tokenizer  # noqa: E402

NO_YNN = {"xla_cpu_experimental_ynn_fusion_type": ""}
ONEDNN = NO_YNN | {"xla_cpu_use_onednn": True, "xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
OPTIONS = {
    "default (YNNPACK dot and reduce fusions)": {},
    "YNNPACK off: XLA's dot thunk (Eigen)": NO_YNN,
    "fast math": {"xla_cpu_enable_fast_math": True},
}
# On an AMD EPYC Zen 3 the encoder under oneDNN dot fusions fails to compile a
# oneDNN partition and then dies of SIGILL, taking the process with it: the
# matmul alone runs. (XNNPACK's dot fusions and its greedy graph fusion leave
# these programs as YNNPACK off does: nothing is fused, the same numbers.)
MATMUL_ONLY = {"oneDNN dot fusions": ONEDNN}
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def hlo_summary(hlo: str) -> str:
    """What the compiled program's dots compute in and which library fusions run them."""
    dots = sorted(set(re.findall(r"= (\w+)\[[^\]]*\]\S* dot\(", hlo)))
    libraries = sorted(set(re.findall(r'"kind":"(__\w+_fusion)"', hlo)))
    converts = len(re.findall(r"= \w+\[[^\]]*\]\S* convert\(", hlo))
    return f"dots in {','.join(dots) or '-'}; {','.join(libraries) or 'no library fusion'}; {converts} converts"


def programs(fn, args_by_dtype: dict, options: dict) -> dict:
    """(option set, dtype) -> (compiled, its args, output as float32, HLO summary)."""
    out = {}
    for option, overrides in options.items():
        for dtype, args in args_by_dtype.items():
            compiled = jax.jit(fn).lower(*args).compile(compiler_options=overrides)
            result = np.asarray(compiled(*args), np.float32)
            out[(option, dtype)] = (compiled, args, result, hlo_summary(compiled.as_text()))
    return out


def race(title: str, progs: dict, rounds: int, reps: int, work: float, unit: str) -> None:
    """Alternating rounds over every program (order reversed every other round); each round calls one
    program `reps` times. Prints rate in `unit` (work per call / s), deviation and ratio to default f32."""
    keys = list(progs)
    times = {k: [] for k in keys}
    for r in range(rounds):
        for k in keys if r % 2 == 0 else keys[::-1]:
            compiled, args, _, _ = progs[k]
            compiled(*args).block_until_ready()
            t = time.perf_counter()
            for _ in range(reps):
                compiled(*args).block_until_ready()
            times[k].append((time.perf_counter() - t) / reps)
    base_key = keys[0]
    base = progs[base_key][2]
    print(f"\n## {title}: {rounds} alternating rounds of {reps} calls; ratio is the default float32's time over this")
    print(f"{'XLA options':42s} {'dtype':9s} {unit:>9s} {'ratio':>17s} {'max |diff|':>10s}  compiled")
    for k, ts in times.items():
        ratios = sorted(b / t for b, t in zip(times[base_key], ts))
        diff = float(np.abs(progs[k][2] - base).max())
        print(
            f"{k[0]:42s} {k[1]:9s} {work / statistics.median(ts):9.1f} "
            f"{statistics.median(ratios):5.2f}x [{ratios[0]:.2f}-{ratios[-1]:.2f}] {diff:10.2e}  {progs[k][3]}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rows", type=int, default=4, help="full windows per encoder call (the CPU default per device)")
    p.add_argument("--corpus", type=Path, default=CORPUS, help="a folder of PDFs (default ../shared/corpus)")
    a = p.parse_args()
    print(f"CPU: {cpu_description()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; jax {jax.__version__}")
    print(f"{jax.device_count()} {jax.default_backend()} device(s); programs run on the first")

    spec = resolve(None)
    cfg, window = spec.arch, spec.max_seq_length
    rng = np.random.default_rng(0)
    m, k, n = a.rows * window, cfg.hidden_size, cfg.intermediate_size
    x32 = rng.standard_normal((m, k), np.float32)
    w32 = rng.standard_normal((k, n), np.float32) * np.float32(k**-0.5)
    mats = {name: (jnp.asarray(x32, dt), jnp.asarray(w32, dt)) for name, dt in DTYPES.items()}
    race(
        f"matmul [{m}, {k}] x [{k}, {n}]",
        programs(lambda x, w: x @ w, mats, OPTIONS | MATMUL_ONLY),
        a.rounds,
        10,
        2 * m * k * n / 1e9,
        "GFLOP/s",
    )

    tokenizer = Tokenizer(spec.files / "tokenizer.json")
    ids = tokenizer.encode_truncated(pieces(corpus_words(a.corpus), [300] * a.rows), window)
    ids_BT = np.asarray(ids, np.int32)
    segments_BT = np.ones_like(ids_BT)
    positions_BT = np.broadcast_to(np.arange(window, dtype=np.int32), ids_BT.shape).copy()
    params = load_params(spec)

    def forward(params, ids_BT, segments_BT, positions_BT):
        hidden_BTD = encoders.forward(params, ids_BT, segments_BT, positions_BT, cfg)
        return encoders.pool(hidden_BTD, segments_BT, 1, spec.pooling).astype(jnp.float32)

    tokens = (ids_BT, segments_BT, positions_BT)
    args = {name: (encoders.cast_params(params, dt), *tokens) for name, dt in DTYPES.items()}
    race(
        f"encoder forward, {a.rows} x {window} tokens",
        programs(forward, args, OPTIONS),
        a.rounds,
        3,
        ids_BT.size,
        "tokens/s",
    )


if __name__ == "__main__":
    main()
