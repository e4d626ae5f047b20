"""Fault figures: an undisturbed job and each fault scenario on the same corpus, as a table.

    .venv/bin/python bench/faults.py [--files N] [--shard-docs N]

The scenarios are tests/faults/scenarios.py, the very code the fault tests
assert with (imported from there, so the figures and the tests cannot drift
apart). On a local two-CPU Ray: undisturbed, the encoder actor killed twice
with `ray.kill`, and twice with SIGKILL. On a three-node `ray.cluster_utils`
cluster: undisturbed, and one worker node removed. Each Ray first runs a
warm-up job; each fault's time overhead is against the undisturbed run on the
same Ray. Lost counts documents missing
from the output and documents missing chunks; duplicated counts repeated rows.
Driver crashes and resume are tests/storage/test_crash_resume.py's (identical
output after three SIGKILLs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "faults")]

import scenarios  # noqa: E402


def row(name: str, corpus: Path, work: Path, run: scenarios.Run, baseline: float | None) -> str:
    t = scenarios.tally(str(work / "out"), scenarios.expected_inputs(corpus))
    overhead = "-" if baseline is None else f"{run.seconds / baseline - 1:+.0%}"
    return (
        f"| {name} | {run.injected} | {t.inputs} | {t.outputs} | {t.lost + t.gapped} | {t.duplicated} "
        f"| {run.seconds:.1f} | {overhead} |"
    )


def scenario_rows(ray_name: str, corpus: Path, tmp: Path, faults: dict) -> list[str]:
    """A warm-up run, the undisturbed run, then one run per fault (name -> a function making its sidecar).

    The warm-up, not reported, takes the Ray's first-job costs (worker processes, imports) off the baseline.
    """
    scenarios.run(scenarios.job(corpus, tmp / f"{ray_name}-warm-up"))
    rows, baseline = [], None
    for name, sidecar in {"none": None, **faults}.items():
        work = tmp / f"{ray_name}-{name}"
        run = scenarios.run(scenarios.job(corpus, work), sidecar() if sidecar else None)
        baseline = baseline or run.seconds
        rows.append(row(f"{ray_name}: {name}", corpus, work, run, None if sidecar is None else baseline))
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=scenarios.FILES)
    parser.add_argument("--shard-docs", type=int, default=scenarios.SHARD_DOCS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = scenarios.write_corpus(tmp / "corpus", args.files, args.shard_docs)
        rows = [
            "| fault | faults injected | inputs | outputs | lost | duplicated | time (s) | overhead |",
            "|---|---|---|---|---|---|---|---|",
        ]
        print("\n".join(rows), flush=True)
        with scenarios.local_ray():
            rows += scenario_rows(
                "local Ray, 2 CPUs",
                corpus,
                tmp,
                {
                    "encoder actor ray.kill x2": lambda: scenarios.KillEncoder(["ray.kill"] * 2),
                    "encoder actor SIGKILL x2": lambda: scenarios.KillEncoder(["SIGKILL"] * 2),
                },
            )
        with scenarios.three_node_cluster() as (cluster, workers):
            rows += scenario_rows(
                "3-node cluster",
                corpus,
                tmp,
                {
                    "worker node removed": lambda: scenarios.RemoveNode(cluster, workers),
                },
            )
    print("\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
