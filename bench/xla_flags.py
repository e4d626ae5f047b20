"""docembed's encoder under several XLA_FLAGS settings, side by side: a process per setting, alternating rounds.

    .venv/bin/python bench/xla_flags.py [--rounds N] [--flags "" "--xla_cpu_experimental_ynn_fusion_type=" ...]

XLA reads XLA_FLAGS once per process, so each setting gets a worker process of
its own (this script, `--serve`) with the job's encoder as `Embedder.load()`
builds it (one CPU device per core, the default batch). The parent sends every
worker the same texts, bench/encoder.py's two sets, round after round in
alternating order, and prints each setting's tokens/s, its ratio to the first
setting's and its min cosine to the first setting's embeddings.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_FLAGS = ["", "--xla_cpu_experimental_ynn_fusion_type="]


def embed_forever() -> None:
    """Worker: the job's encoder under this process's XLA_FLAGS; texts in, embeddings out (bench/worker.py)."""
    from worker import serve

    from pipeline import Embedder

    embedder = Embedder.load()
    serve("ready", embedder.embed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--flags", nargs="+", default=DEFAULT_FLAGS, help="XLA_FLAGS settings; the first is the baseline")
    p.add_argument("--texts", type=int, default=300)
    p.add_argument("--full-windows", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    if a.serve:
        return embed_forever()

    from encoder import CORPUS, compare, corpus_words, count_tokens, mixed_texts, pieces
    from machine import cpu_description
    from worker import Worker

    from pipeline import Embedder

    print(f"CPU: {cpu_description()}")
    embedder = Embedder.load()  # counts tokens as the workers cut them
    argv = [sys.executable, __file__, "--serve"]
    workers = {f"XLA_FLAGS={flags!r}": Worker(argv, os.environ | {"XLA_FLAGS": flags}) for flags in a.flags}
    try:
        words = corpus_words(CORPUS)
        window = embedder.encoder.spec.max_seq_length
        sets = {
            f"{a.texts} mixed texts": mixed_texts(words, a.texts),
            f"{a.full_windows} texts of {window} tokens": pieces(words, [300] * a.full_windows),
        }
        for title, texts in sets.items():
            runners = {name: functools.partial(worker, texts) for name, worker in workers.items()}
            baseline = next(iter(runners.values()))()
            compare(title, texts, count_tokens(embedder, texts), runners, baseline, a.rounds)
    finally:
        for worker in workers.values():
            worker.close()


if __name__ == "__main__":
    main()
