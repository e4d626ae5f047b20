"""The driver's model check (`model_dir.check_weights`): peak RSS and time, before and after the shape-only reading.

    .venv/bin/python bench/check_weights.py [--rounds 3]

Models: the bundled default (all-MiniLM-L6-v2), the largest committed family
fixture, and a generated checkpoint with bge-m3's shapes (XLM-RoBERTa large,
568M parameters: 2.3 GB of float32 zeros, written sparse into a temporary
directory; the check reads only its headers). "before" is the check as it was
until the shape-only reading: `params_from_hf` over zero-stride views of every
tensor, whose stacking of the layers allocates the model's size in float32.
"after" is `check_weights`: the same reading over `param_shapes`' placeholders.

Each measurement is a fresh Python process (`measure_in_child` of
tests/support.py) that resolves the model and imports safetensors first; it
reports its RSS then (VmRSS), its peak RSS after the check (VmHWM, not
ru_maxrss, which a child inherits from its parent: see there) and the check's
CPU time. Rounds alternate the models and, within a model, the order of before
and after. Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

# bench/machine.py and tests/support.py, found through the path above.
from machine import cpu_description  # noqa: E402

from pipeline.encode import model_dir, model_location, weights  # noqa: E402

from support import XLM_ROBERTA_LARGE, bert_tensor_shapes, measure_in_child, write_zero_safetensors  # noqa: E402

FAMILIES = REPO / "tests" / "fixtures" / "families"
MODES = ("before", "after")
MEASURE = """
import numpy as np
import safetensors  # noqa: F401  imported before the measurement by both checks
from kernels.encoders import params_from_hf
from pipeline.encode import model_dir

def check_before(spec):
    views = {name: np.broadcast_to(np.float32(0), shape) for name, shape in model_dir.tensor_shapes(spec).items()}
    params_from_hf(views, spec.arch)

spec = model_dir.resolve(sys.argv[1])
measured(lambda: model_dir.check_weights(spec) if sys.argv[2] == "after" else check_before(spec))
"""


def bge_m3_shaped(root: Path) -> Path:
    path = root / "xlm-roberta-large"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(XLM_ROBERTA_LARGE))
    shutil.copy(FAMILIES / "xlm-roberta-mlm-prefix" / "tokenizer.json", path)
    write_zero_safetensors(path / "model.safetensors", bert_tensor_shapes(XLM_ROBERTA_LARGE))
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
    largest = max(fixtures, key=lambda p: sum(f.stat().st_size for f in weights.files(p)))
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "all-MiniLM-L6-v2 (bundled)": model_location.default_model_dir(),
            f"fixture {largest.name}": largest,
            "XLM-RoBERTa large (bge-m3 shapes)": bge_m3_shaped(Path(tmp)),
        }
        runs = {(name, mode): [] for name in models for mode in MODES}
        for r in range(args.rounds):
            for name, path in models.items():
                for mode in MODES if r % 2 == 0 else MODES[::-1]:
                    runs[name, mode].append(measure_in_child(MEASURE, str(path), mode))
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
