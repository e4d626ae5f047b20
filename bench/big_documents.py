"""Memory of one big input: a long document tokenised and chunked, and a Parquet shard in one row group.

Each case runs in a fresh process and reports its peak RSS (ru_maxrss), so the figures do not mix:

- document: N MB of prose tokenised and chunked as the tokenise + chunk stage does (`Tokenizer.encode_document`,
  then `chunk_document` at the default window and overlap), against the whole text tokenised in one call as
  before (`--whole`);
- parquet: an N MB shard written with pyarrow's defaults (one row group) read row by row as the read stage does
  (`pipeline.io.shards.iter_shard`).

    .venv/bin/python bench/big_documents.py --mb 10 50
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # before bench/, whose pipeline.py would stand for the package

WORDS = "the of and to in is was for on that with as by at from photosynthesis energy sunlight plants convert".split()


def prose(chars: int, seed: int = 0) -> str:
    """Sentences of common words, with paragraph breaks: about `chars` characters."""
    rng, parts, size = random.Random(seed), [], 0
    while size < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))).capitalize()
        sentence += rng.choice([". ", ". ", "? ", "! ", ".\n\n"])
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts)


def peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


def document(mb: float, whole: bool) -> str:
    from pipeline.encode.model_location import local_dir
    from pipeline.text.chunking import ChunkingConfig, chunk_document
    from pipeline.text.tokenizer import Tokenizer

    text = prose(int(mb * 1_000_000))
    tokenizer = Tokenizer(local_dir(None) / "tokenizer.json")
    before, started = peak_mb(), time.perf_counter()
    if whole:
        (encoding,) = tokenizer.encode_content([text])
        ids, offsets = encoding.ids, encoding.offsets
    else:
        ids, offsets = tokenizer.encode_document(text)
    chunks = chunk_document(text, ids, offsets, None, tokenizer, ChunkingConfig(256, 32))
    seconds = time.perf_counter() - started
    how = "whole text, one call" if whole else "encode_document"
    size = f"{len(ids):,} tokens, {len(chunks):,} chunks"
    return f"| document, {how} | {mb:g} | {size} | {before} | {peak_mb()} | {seconds:.1f} |"


def write_shard(mb: float, path: str) -> None:
    """About `mb` MB of Parquet in one row group, pyarrow's default: rows of 2,000 characters each their own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    text, rows = prose(10_000_000, seed=1), int(mb * 1400)  # snappy halves this prose
    starts = [i * 7919 % (len(text) - 2000) for i in range(rows)]
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(rows)], "text": [text[a : a + 2000] for a in starts]}), path)


def parquet(mb: float) -> str:
    import pyarrow.parquet as pq

    from pipeline.io.shards import iter_shard

    path = os.path.join(tempfile.mkdtemp(), "shard.parquet")
    # Written by another process: the reader's peak is its own.
    subprocess.run([sys.executable, __file__, "--case", f"write:{mb}:{path}"], check=True)
    size_mb = os.path.getsize(path) >> 20
    groups = pq.ParquetFile(path).num_row_groups
    before, started = peak_mb(), time.perf_counter()
    read = sum(1 for _ in iter_shard(path, "parquet"))
    seconds = time.perf_counter() - started
    return f"| Parquet, {groups} row group | {size_mb} | {read:,} rows | {before} | {peak_mb()} | {seconds:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, nargs="+", default=[10.0, 50.0])
    parser.add_argument("--case", help=argparse.SUPPRESS)  # a child's one case
    args = parser.parse_args()
    if args.case:
        kind, mb, *path = args.case.split(":", 2)
        if kind == "write":
            return write_shard(float(mb), *path)
        cases = {"whole": lambda m: document(m, True), "pieces": lambda m: document(m, False), "parquet": parquet}
        print(cases[kind](float(mb)))
        return
    print("| case | MB | size | peak RSS before, MB | peak RSS after, MB | s |")
    print("|---|---:|---|---:|---:|---:|")
    for mb in args.mb:
        for kind in ("whole", "pieces", "parquet"):
            child = subprocess.run([sys.executable, __file__, "--case", f"{kind}:{mb}"], capture_output=True, text=True)
            print(child.stdout.strip() or f"| {kind} | {mb:g} | failed: {child.stderr.strip()[-200:]} | | | |")


if __name__ == "__main__":
    main()
