"""`docembed search` against output size: `results.search` (part by part) and the whole table read first.

    .venv/bin/python bench/search.py [--chunks 50000,200000] [--rounds 3] [--top 5]

Each size is a finished output written here: parts of 5,000 chunks (about what
a group of PDFs gives), unit embeddings of the bundled model's 384 dimensions
and about 1 kB of the samples' text per chunk. "part by part" is
`pipeline.results.search`, what `docembed search` and the notebook run;
"whole" is `nearest(read_table(output))`, what they ran before: every chunk
read, sorted and held. Each measurement is a fresh Python process
(`measure_in_child` of tests/support.py) that reports its wall and CPU time and
its peak RSS (VmHWM). Rounds alternate the two. The slopes are per 1,000
chunks, between the smallest and largest size. Never run as a test; results go
in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

# bench/machine.py and tests/support.py, found through the path above.
from machine import cpu_description  # noqa: E402

from support import SAMPLES, measure_in_child  # noqa: E402

PART_CHUNKS = 5000
DIM = 384
TEXT_BYTES = 1000
HOW = ("part by part", "whole")
MEASURE = """
import numpy as np
from pipeline.results import nearest, read_table, search
output, how, top = sys.argv[1], sys.argv[2], int(sys.argv[3])
query_D = np.random.default_rng(1).standard_normal(384).astype(np.float32)
measured(lambda: search(output, query_D, top) if how == "part by part" else nearest(read_table(output), query_D, top))
"""


def write_output(root: Path, chunks: int) -> str:
    """A finished output of `chunks` chunks, as `pipeline.results` reads one: _SUCCESS and embeddings/ parts."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.schemas import EMBEDDING_COLUMNS, embedded_schema

    text = " ".join(p.read_text() for p in sorted((SAMPLES / "text").iterdir()))
    schema = pa.schema([embedded_schema(DIM).field(name) for name in EMBEDDING_COLUMNS])
    rng = np.random.default_rng(0)
    (root / "embeddings").mkdir(parents=True)
    (root / "errors").mkdir()
    (root / "_SUCCESS").write_text('{"counts": {"docs_failed": 0}}')
    for first in range(0, chunks, PART_CHUNKS):
        n = min(PART_CHUNKS, chunks - first)
        vectors_ND = rng.standard_normal((n, DIM)).astype(np.float32)
        vectors_ND /= np.linalg.norm(vectors_ND, axis=1, keepdims=True)
        starts = rng.integers(0, len(text) - TEXT_BYTES, n)
        rows = {name: [None] * n for name in EMBEDDING_COLUMNS}
        rows.update(
            doc_id=[f"s3://bucket/corpus/doc-{(first + i) // 8:08d}.pdf" for i in range(n)],
            chunk_index=[(first + i) % 8 for i in range(n)],
            text=[text[s : s + TEXT_BYTES] for s in starts],
            embedding=list(vectors_ND),
        )
        pq.write_table(pa.Table.from_pydict(rows, schema=schema), root / "embeddings" / f"part-{first:09d}.parquet")
    return str(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="50000,200000", help="output sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(n) for n in args.chunks.split(",")]
    results: dict[tuple[int, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        outputs = {n: write_output(Path(tmp) / str(n), n) for n in sizes}
        for r in range(args.rounds):
            for n in sizes:
                for how in HOW if r % 2 == 0 else HOW[::-1]:
                    got = measure_in_child(MEASURE, outputs[n], how, str(args.top))
                    results.setdefault((n, how), []).append(got)
                    print(f"round {r + 1}, {n} chunks, {how}: {got}", file=sys.stderr)

    def median(n: int, how: str, key: str) -> float:
        return statistics.median(m[key] for m in results[n, how])

    print(f"{datetime.date.today()}, {cpu_description()}; medians of {args.rounds} rounds, top {args.top}")
    print()
    print("| chunks | how | wall s | CPU s | peak RSS MiB |")
    print("|---:|---|---:|---:|---:|")
    for n in sizes:
        for how in HOW:
            wall, cpu, peak = (median(n, how, key) for key in ("wall_s", "cpu_s", "peak"))
            print(f"| {n:,} | {how} | {wall:.2f} | {cpu:.2f} | {peak / 2**20:.0f} |")
    small, big = min(sizes), max(sizes)
    print()
    for how in HOW:
        per_k = 1000 / (big - small)
        rss = (median(big, how, "peak") - median(small, how, "peak")) / 2**10 * per_k
        wall = (median(big, how, "wall_s") - median(small, how, "wall_s")) * 1000 * per_k
        print(f"- {how}: {rss:.0f} KiB and {wall:.1f} ms per 1,000 chunks")


if __name__ == "__main__":
    main()
