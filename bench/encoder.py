"""Encoder throughput: docembed's JAX encoder against sentence-transformers, same texts, one run.

    make bench            # or: .venv-bench/bin/python bench/encoder.py [--rounds N]

Texts are a few hundred real paragraphs from the PDFs of ../shared/corpus (the
bundled samples when it is absent). Both sides embed the same texts with the
same model; tokens are counted once, with special tokens, truncated to the
model's window as both encoders do. Rounds alternate between the two so that
drift on a shared machine hits both alike; medians are reported.
"""

from __future__ import annotations

import argparse
import functools
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline import Embedder  # noqa: E402
from pipeline.encode.model_dir import default_model_dir  # noqa: E402
from pipeline.extract import DocumentError, extract_pages  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"


def paragraphs(limit: int, words_per_paragraph: int = 120) -> list[str]:
    """Real text in paragraph-sized pieces: PDF text is cut into runs of whole lines."""
    root = CORPUS if CORPUS.is_dir() else REPO / "samples"
    out = []
    for path in sorted(root.rglob("*.pdf")):
        try:
            pages = extract_pages(path.read_bytes(), "pdf")
        except DocumentError:
            continue
        current: list[str] = []
        for line in "\n".join(pages).splitlines():
            current.append(line.strip())
            if sum(len(x.split()) for x in current) >= words_per_paragraph:
                out.append(" ".join(current))
                current = []
        if current and len(" ".join(current).split()) > 10:
            out.append(" ".join(current))
    return out[:limit]


def matmul_gflops(n: int = 1024, repeats: int = 20) -> float:
    """This machine's float32 matmul rate through XLA: the ceiling the encoder works against."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    t = time.perf_counter()
    for _ in range(repeats):
        f(a).block_until_ready()
    return 2 * n**3 * repeats / (time.perf_counter() - t) / 1e9


def flops_per_token(embedder: Embedder, seq: int) -> float:
    """Forward FLOPs per token: dense layers (2 per weight) plus attention scores and mixing."""
    b = embedder.encoder.spec.bert
    dense = b.num_layers * (4 * b.hidden_size**2 + 2 * b.hidden_size * b.intermediate_size)
    attn = b.num_layers * 2 * seq * b.hidden_size
    return 2 * (dense + attn)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paragraphs", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, help="docembed's per-device batch (default: its platform default)")
    p.add_argument("--st-batch-sizes", type=int, nargs="+", default=[8, 32],
                   help="sentence-transformers batch sizes tried; the fastest is the baseline (default 8 32)")
    a = p.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    texts = paragraphs(a.paragraphs)
    jax_fp32 = Embedder.load(batch_size=a.batch_size)
    st = SentenceTransformer(str(default_model_dir()), device="cpu")
    ids = jax_fp32.tokenizer.encode_truncated(texts, jax_fp32.encoder.spec.max_seq_length)
    tokens = sum(map(len, ids))
    mean_len = tokens / len(texts)

    runners = {"docembed JAX float32": lambda: jax_fp32.embed(texts)}
    for bs in a.st_batch_sizes:
        runners[f"sentence-transformers float32, batch {bs}"] = functools.partial(st.encode, texts, batch_size=bs)
    ref = st.encode(texts)
    got = jax_fp32.embed(texts)  # also compiles every shape before timing
    cos = (ref * got).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)

    times: dict[str, list[float]] = {name: [] for name in runners}
    matmul_rates = []
    for _ in range(a.rounds):
        matmul_rates.append(matmul_gflops())
        for name, run in runners.items():
            times[name].append(timed(run))

    ceiling = statistics.median(matmul_rates)
    fpt = flops_per_token(jax_fp32, int(mean_len))
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, python {platform.python_version()}")
    print(f"texts: {len(texts)} paragraphs, {tokens} tokens (mean {mean_len:.0f}/text), "
          f"docembed batch {jax_fp32.encoder.batching.batch_size} per device")
    print(f"agreement: min cosine JAX vs sentence-transformers {cos.min():.6f}")
    print(f"XLA float32 matmul rate {ceiling:.1f} GFLOP/s; encoder {fpt / 1e6:.1f} MFLOP/token "
          f"-> ceiling {ceiling * 1e9 / fpt:,.0f} tokens/s")
    print(f"{'encoder':42s} {'median s':>9s} {'tokens/s':>10s} {'of ceiling':>10s}")
    rates = {}
    for name, ts in times.items():
        rates[name] = tokens / statistics.median(ts)
        print(f"{name:42s} {statistics.median(ts):9.3f} {rates[name]:10,.0f} {rates[name] * fpt / ceiling / 1e9:10.1%}")
    jax_rate, *st_rates = rates.values()
    print(f"ratio JAX / fastest sentence-transformers: {jax_rate / max(st_rates):.2f}x")


if __name__ == "__main__":
    main()
