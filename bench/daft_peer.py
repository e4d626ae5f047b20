"""A small run end to end: docembed's command against Daft's document-embedding script, on the same PDFs.

    .venv/bin/python bench/daft_peer.py [--input DIR] [--rounds N]

Each round runs both as a user would, each a fresh process timed from its start
to its exit (imports, Ray's or Daft's start, model load and compiles
included), alternating so that a shared machine's load falls on both:
`jobs/embed.py --quiet` in the project's venv, and bench/daft_worker.py (Daft's
published pipeline on its local runner) in `.venv-daft` (`make bench` builds
it). docembed's compile cache starts empty in this bench's own directory, so
its first round compiles and the later ones load, as a user's first and later
runs do. The two do not embed the same chunks: Daft's script cuts 2,048-character
chunks per page that the model truncates at 256 tokens, docembed embeds every
token in windows (issue 22), so chunks and tokens are printed beside the times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from machine import cpu_description  # noqa: E402  (bench/machine.py)

from pipeline.encode.model_dir import resolve  # noqa: E402

DAFT_PYTHON = REPO / ".venv-daft" / "bin" / "python"


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[1]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, done.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, default=REPO.parent / "shared" / "corpus")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    if not DAFT_PYTHON.exists():
        raise SystemExit(f"{DAFT_PYTHON} is missing: `make bench` builds it")
    model = str(resolve(None).path)

    print(cpu_description())
    walls: dict[str, list[float]] = {"docembed": [], "daft": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(a.rounds):
            out = Path(tmp) / f"docembed{round_}"
            wall, _ = timed(
                [sys.executable, "jobs/embed.py", "--input", str(a.input), "--output", str(out), "--quiet"]
                + ["--compile-cache", str(Path(tmp) / "jax-cache")],
                REPO,
            )
            success = json.loads((out / "_SUCCESS").read_text())
            counts = success["counts"]
            walls["docembed"].append(wall)
            steps = ", ".join(f"{step} {s:.1f}s" for step, s in success["startup_seconds"])
            print(
                f"round {round_ + 1} docembed: {wall:.1f} s; {counts['docs_ok']} documents, "
                f"{counts['chunks']} chunks, {counts['tokens']} tokens; start-up: {steps}"
            )
            # Not from the repository: transformers imports Hugging Face's `kernels` package when it finds
            # one, and a working directory on Daft's workers' path would hand it docembed's.
            wall, stdout = timed(
                [
                    str(DAFT_PYTHON),
                    str(REPO / "bench" / "daft_worker.py"),
                    str(a.input),
                    str(Path(tmp) / f"daft{round_}"),
                    model,
                ],
                Path(tmp),
            )
            daft = json.loads(stdout.splitlines()[-1])
            walls["daft"].append(wall)
            print(
                f"round {round_ + 1} daft: {wall:.1f} s ({daft['seconds']:.1f} s in the pipeline); "
                f"{daft['documents']} documents, {daft['chunks']} chunks (each truncated at the model's 256 tokens)"
            )
    ratios = [d / s for d, s in zip(walls["daft"], walls["docembed"])]
    print(
        f"docembed wall: median {statistics.median(walls['docembed']):.1f} s, daft: median "
        f"{statistics.median(walls['daft']):.1f} s; daft/docembed (above 1: docembed faster): "
        f"median {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}], "
        f"round 1 (cold cache) {ratios[0]:.2f}x"
    )


if __name__ == "__main__":
    main()
