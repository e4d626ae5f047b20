"""Start-up before and after a change: two source trees in alternating rounds, on the same corpora.

    flock -x /tmp/docembed-heavy.lock .venv/bin/python bench/startup.py --trees /tmp/main . \
        [--rounds 3] [--tiny-files 1000] [--pdfs] [--tests tests/jobs/test_embed_cli.py ...]

Each round runs every tree once, in turn, so that the machine's drift falls on
both alike: a whole job (`bench/scale.py`'s `real_run`: `jobs/embed.py --quiet`
with its private local Ray, this interpreter, started in the tree with the tree first on PYTHONPATH) on
N tiny `.txt` files (bench/scale.py's corpus) and, with `--pdfs`, on the real
PDFs of ../shared/corpus; then, with `--tests`, the wall of those test files
(`pytest -q`, run in the tree). Prints each `startup_seconds` step, the wall
and the driver's peak RSS as medians over the rounds, with the ratio of the
later tree to the first. Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_description
from scale import CORPUS, real_run, tiny_corpus


def test_wall(tree: Path, files: list[str]) -> float:
    """Seconds `pytest -q FILES` takes in `tree`; raises if a test fails."""
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files]
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def medians(runs: list[dict]) -> dict[str, float]:
    """Median of each figure over the rounds: wall, driver peak RSS and every start-up step."""
    figures = {"wall_s": [r["wall_s"] for r in runs], "driver_mb": [r["driver_mb"] for r in runs]}
    for r in runs:
        for step, t in r["startup"]:
            figures.setdefault(step, []).append(t)
    return {name: statistics.median(values) for name, values in figures.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", nargs=2, type=Path, required=True, help="before, after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tiny-files", type=int, default=1000, help="0: none")
    ap.add_argument("--pdfs", action="store_true", help="also the real PDFs of ../shared/corpus")
    ap.add_argument("--tests", nargs="*", default=[])
    args = ap.parse_args()
    trees = [t.resolve() for t in args.trees]
    print(f"# bench/startup.py on {cpu_description()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpora = {}
        if args.tiny_files:
            corpora[f"{args.tiny_files:,} tiny .txt"] = tiny_corpus(tmp / "tiny", args.tiny_files)
        if args.pdfs:
            corpora[f"{len(list(CORPUS.rglob('*.pdf')))} real PDFs"] = CORPUS
        jobs = {(name, tree): [] for name in corpora for tree in trees}
        walls = {tree: [] for tree in trees}
        for r in range(args.rounds):
            for c, (name, corpus) in enumerate(corpora.items()):
                for i, tree in enumerate(trees):
                    jobs[name, tree].append(real_run(corpus, tmp / f"out-{r}-{c}-{i}", tree))
            for tree in trees if args.tests else ():
                walls[tree].append(test_wall(tree, args.tests))
            print(f"round {r + 1} done", flush=True)
    for name in corpora:
        before, after = (medians(jobs[name, tree]) for tree in trees)
        print(f"\n{name}, medians of {args.rounds} rounds: step | before | after | after/before")
        steps = sorted((set(before) | set(after)) - {"wall_s", "driver_mb"}, key=lambda s: after.get(s, before.get(s)))
        for step in [*steps, "wall_s", "driver_mb"]:
            b, a = before.get(step), after.get(step)
            ratio = f"{a / b:.2f}" if a and b else "-"
            print(f"| {step} | {b if b is None else f'{b:.1f}'} | {a if a is None else f'{a:.1f}'} | {ratio} |")
    if args.tests:
        b, a = (statistics.median(walls[tree]) for tree in trees)
        print(f"\n{' '.join(args.tests)}: wall {b:.0f} s before, {a:.0f} s after ({a / b:.2f}x); rounds: {walls}")


if __name__ == "__main__":
    main()
