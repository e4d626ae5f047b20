"""The driver's model check (`model_dir.check_weights`): peak RSS and time, before and after the shape-only reading.

    .venv/bin/python bench/check_weights.py [--rounds 3]

Models: the bundled default (all-MiniLM-L6-v2), the largest committed family
fixture, and a generated checkpoint with bge-m3's shapes (XLM-RoBERTa large,
568M parameters: 2.3 GB of float32 zeros, written sparse into a temporary
directory; the check reads only its headers). "before" is the check as it was
until the shape-only reading: `params_from_hf` over zero-stride views of every
tensor, whose stacking of the layers allocates the model's size in float32.
"after" is `check_weights`: the same reading over `param_shapes`' placeholders.

Each measurement is a fresh Python process that resolves the model and imports
safetensors first; it reports its RSS then (VmRSS), its peak RSS after the
check (VmHWM) and the check's wall and CPU time. The peak is VmHWM, not
ru_maxrss: a child's ru_maxrss starts at its parent's peak (Linux carries the
old memory map's high-water mark over an exec, and subprocess starts children
with vfork), so it would report this script's own peak. Rounds alternate
the models and, within a model, the order of before and after. Never run as a
test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

from machine import cpu_description  # noqa: E402  (bench/machine.py)

from pipeline.encode import model_dir  # noqa: E402

from support import bert_tensor_shapes, write_zero_safetensors  # noqa: E402  (tests/support.py)

FAMILIES = REPO / "tests" / "fixtures" / "families"
MODES = ("before", "after")
# bge-m3's config.json: XLM-RoBERTa large.
BGE_M3 = {
    "model_type": "xlm-roberta",
    "vocab_size": 250002,
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "max_position_embeddings": 8194,
    "type_vocab_size": 1,
    "pad_token_id": 1,
}

MEASURE = """
import json, sys, time
import numpy as np
import safetensors  # noqa: F401  imported before the measurement by both checks
from kernels.encoders import params_from_hf
from pipeline.encode import model_dir

def status(key):
    with open("/proc/self/status") as f:
        return 1024 * int(next(line for line in f if line.startswith(key + ":")).split()[1])

spec = model_dir.resolve(sys.argv[1])
before = status("VmRSS")
wall, cpu = time.perf_counter(), time.process_time()
if sys.argv[2] == "after":
    model_dir.check_weights(spec)
else:
    views = {name: np.broadcast_to(np.float32(0), shape) for name, shape in model_dir.tensor_shapes(spec).items()}
    params_from_hf(views, spec.arch)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
print("BENCH", json.dumps({"rss_before": before, "peak": status("VmHWM"), "wall_s": wall, "cpu_s": cpu}))
"""


def measure(path: Path, mode: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path), mode], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    line = next((out for out in result.stdout.splitlines() if out.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"measuring {mode} on {path} failed: {result.stderr[-3000:]}")
    return json.loads(line[len("BENCH ") :])


def bge_m3_shaped(root: Path) -> Path:
    path = root / "xlm-roberta-large"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(BGE_M3))
    shutil.copy(FAMILIES / "xlm-roberta-mlm-prefix" / "tokenizer.json", path)
    write_zero_safetensors(path / "model.safetensors", bert_tensor_shapes(BGE_M3))
    return path


def weights_mb(path: Path) -> float:
    """The parameters' size in float32, from the headers."""
    shapes = model_dir.tensor_shapes(model_dir.resolve(str(path)))
    return 4 * sum(math.prod(shape) for shape in shapes.values()) / 1e6


def spread(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    fixtures = [p for p in FAMILIES.iterdir() if p.is_dir()]
    largest = max(fixtures, key=lambda p: sum(f.stat().st_size for f in model_dir.weights_files(p)))
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "all-MiniLM-L6-v2 (bundled)": model_dir.default_model_dir(),
            f"fixture {largest.name}": largest,
            "XLM-RoBERTa large (bge-m3 shapes)": bge_m3_shaped(Path(tmp)),
        }
        runs = {(name, mode): [] for name in models for mode in MODES}
        for r in range(args.rounds):
            for name, path in models.items():
                for mode in MODES if r % 2 == 0 else MODES[::-1]:
                    runs[name, mode].append(measure(path, mode))
            print(f"round {r + 1} done", file=sys.stderr, flush=True)
        sizes = {name: weights_mb(path) for name, path in models.items()}

    print(f"{datetime.date.today()}, {cpu_description()}, load average {os.getloadavg()[0]:.2f}, {args.rounds} rounds")
    print("median (min-max) over rounds; growth: the peak RSS during the check over the RSS just before it\n")
    print("| model | float32 weights | RSS growth, before | after | peak RSS, before | after | CPU, before | after |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in models:
        growth = [[(m["peak"] - m["rss_before"]) / 1e6 for m in runs[name, mode]] for mode in MODES]
        peak = [[m["peak"] / 1e6 for m in runs[name, mode]] for mode in MODES]
        cpu = [[1e3 * m["cpu_s"] for m in runs[name, mode]] for mode in MODES]
        cells = [name, f"{sizes[name]:,.1f} MB"]
        cells += [f"{spread(v)} MB" for v in growth + peak] + [f"{spread(v, 0)} ms" for v in cpu]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
