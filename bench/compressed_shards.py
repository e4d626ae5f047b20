"""Reading one JSON Lines shard plain and compressed: the shard reader's rate per codec, and the codec alone.

    python bench/compressed_shards.py               # a ~64 MiB shard, 3 rounds
    python bench/compressed_shards.py --mib 16 --rounds 5

The text is words of the corpus PDFs (../shared/corpus, extracted by pypdf) drawn at random with their own
frequencies, so that it compresses as prose does and not as a repeated page would (zstd finds a repeat
across megabytes). Each codec's command-line tool compresses it at its default level (gzip -6, zstd -3,
bzip2 -9). Two rates per file, each the best of the rounds, in MiB/s of uncompressed JSON Lines:
`pipeline.io.shards.iter_shard` (the extraction workers' reader: decompressing, splitting lines, parsing
JSON, checking ids), and decompressing alone, through Arrow (what the reader uses) and through Python's
own module where it has one. Never run as a test; results go in BENCHMARKS.md.
"""

import argparse
import bz2
import gzip
import io
import json
import pathlib
import random
import subprocess
import sys
import time

import pyarrow as pa
from pypdf import PdfReader

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine import cpu_description  # noqa: E402  (bench/machine.py)

from pipeline.io.shards import iter_shard  # noqa: E402
from pipeline.kinds import COMPRESSIONS  # noqa: E402

TOOLS = {"gzip": ["gzip", "-kf"], "zstd": ["zstd", "-qf"], "bz2": ["bzip2", "-kf"]}
PYTHON_MODULES = {"gzip": gzip.GzipFile, "bz2": bz2.BZ2File}


def corpus_words() -> tuple[list[str], list[int]]:
    counts: dict[str, int] = {}
    for path in sorted((REPO.parent / "shared" / "corpus").rglob("*.pdf")):
        try:
            pages = PdfReader(path).pages
            for word in " ".join(page.extract_text() or "" for page in pages).split():
                counts[word] = counts.get(word, 0) + 1
        except Exception:  # a PDF pypdf cannot read gives no words; the others are enough
            continue
    return list(counts), list(counts.values())


def write_shard(path: pathlib.Path, mib: float) -> None:
    words, weights = corpus_words()
    rng = random.Random(0)
    with path.open("w") as f:
        i = 0
        while f.tell() < mib * 2**20:
            text = " ".join(rng.choices(words, weights, k=rng.randint(50, 600)))
            f.write(json.dumps({"id": f"doc-{i}", "text": text}) + "\n")
            i += 1


def best_rate(size: int, rounds: int, read) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        read()
        best = min(best, time.perf_counter() - start)
    return size / 2**20 / best


def lines_of(stream) -> int:
    return sum(1 for _ in io.BufferedReader(stream, 1 << 20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=float, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/docembed-bench-compressed")
    args = parser.parse_args()
    folder = pathlib.Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    plain = folder / "shard.jsonl"
    write_shard(plain, args.mib)
    size = plain.stat().st_size
    suffix_of = {codec: suffix for suffix, codec in COMPRESSIONS.items()}
    for tool in TOOLS.values():
        subprocess.run([*tool, str(plain)], check=True)

    print(f"# bench/compressed_shards.py, {time.strftime('%Y-%m-%d')}, {cpu_description()}, one process")
    print(f"# {size / 2**20:.0f} MiB of JSON Lines; MiB/s of uncompressed text, best of {args.rounds} rounds")
    print("| file | size | iter_shard | Arrow's codec alone | Python's module alone |")
    print("|---|---:|---:|---:|---:|")
    read_all = lambda path: lambda: sum(1 for _ in iter_shard(str(path), "jsonl"))  # noqa: E731
    print(f"| .jsonl | {size / 2**20:.0f} MiB | {best_rate(size, args.rounds, read_all(plain)):,.0f} | - | - |")
    for codec in TOOLS:
        path = plain.with_name(plain.name + suffix_of[codec])
        arrow = lambda: lines_of(pa.CompressedInputStream(str(path), codec))  # noqa: E731, B023
        module = PYTHON_MODULES.get(codec)
        python = f"{best_rate(size, args.rounds, lambda: lines_of(module(path))):,.0f}" if module else "-"  # noqa: B023
        print(
            f"| .jsonl{suffix_of[codec]} | {path.stat().st_size / 2**20:.1f} MiB "
            f"| {best_rate(size, args.rounds, read_all(path)):,.0f} | {best_rate(size, args.rounds, arrow):,.0f} "
            f"| {python} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
