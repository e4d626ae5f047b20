"""Encoder throughput: docembed's JAX encoder against sentence-transformers, same texts, one run.

    make bench            # or: .venv-bench/bin/python bench/encoder.py [--rounds N] [--model DIR]

Two sets of real text (words of the PDFs of ../shared/corpus and the bundled
text samples): mixed texts as a user embeds them, half short texts of every
length from 1 to 75 words and half ~90-word paragraphs; and texts that fill the
model's window exactly (no padding at all, the per-token compute alone). Both
sides embed the same texts with the same model; tokens are counted once, with
special tokens, truncated to the model's window as both encoders do. Rounds
alternate between the encoders, the order reversed every other round, so that
drift on a shared machine hits all alike; medians, spreads and per-round
ratios are reported, with the CPU model and its ISA flags.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from machine import cpu_description  # noqa: E402  (bench/machine.py)

from pipeline import Embedder  # noqa: E402
from pipeline.encode.model_location import default_model_dir  # noqa: E402
from pipeline.extract import DocumentError, extract_pages  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"


def corpus_words(corpus: Path) -> list[str]:
    """Real text as one stream of words: the PDFs under `corpus` and the bundled text samples."""
    pages = []
    for path in sorted(corpus.rglob("*.pdf")):
        try:
            pages.extend(extract_pages(path.read_bytes(), "pdf"))
        except DocumentError:
            continue
    pages.extend(path.read_text() for path in sorted((REPO / "samples" / "text").glob("*.[mt][dx]*")))
    return " ".join(pages).split()


def pieces(words: list[str], lengths: list[int]) -> list[str]:
    """One text per length, each that many consecutive words, read on through the stream
    (round again from a shifted start when it runs out, so that texts differ)."""
    out, at = [], 0
    for n in lengths:
        if at + n > len(words):
            at = (at + 7) % max(1, len(words) - n)
        out.append(" ".join(words[at : at + n]))
        at += n
    return out


def mixed_texts(words: list[str], n: int) -> list[str]:
    """What a user embeds: half short texts of every length from 1 to 75 words, half ~90-word paragraphs."""
    return pieces(words, [1 + i % 75 for i in range(n // 2)] + [90] * (n - n // 2))


def count_tokens(embedder: Embedder, texts: list[str]) -> int:
    """Tokens of `texts` with special tokens, each cut to the model's window as every encoder here cuts it."""
    return sum(map(len, embedder.tokenizer.encode_truncated(texts, embedder.encoder.spec.max_seq_length)))


def matmul_gflops(n: int = 1024, repeats: int = 20) -> float:
    """This machine's float32 matmul rate through XLA: the ceiling the encoder works against."""
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
    b = embedder.encoder.spec.arch
    dense = b.num_layers * (4 * b.hidden_size**2 + 2 * b.hidden_size * b.intermediate_size)
    attn = b.num_layers * 2 * seq * b.hidden_size
    return 2 * (dense + attn)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The least cosine between rows of `a` and `b` [n, dim]."""
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def spread(ratios: list[float], digits: int = 2) -> str:
    """Ratios measured round by round, as 'median x [min-max]'."""
    return f"{statistics.median(ratios):.{digits}f}x [{min(ratios):.{digits}f}-{max(ratios):.{digits}f}]"


def compare(
    title: str,
    texts: list[str],
    tokens: int,
    runners: dict,
    reference: np.ndarray,
    rounds: int,
    flops_per_token: float | None = None,
) -> dict[str, list[float]]:
    """Alternates rounds of every runner over `texts` (order reversed every other round) and prints each
    runner's median tokens/s with its spread, its min cosine to `reference` [n, dim], and its tokens/s
    over the first runner's: the median and range of that ratio within a round. A runner embeds `texts`
    and returns [n, dim]; its first call, untimed, compiles and allocates and gives the cosines.
    Returns each runner's seconds per round."""
    cosines = {name: min_cosine(reference, run()) for name, run in runners.items()}
    times: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(timed(runners[name]))
    print(
        f"\n## {title}: {len(texts)} texts, {tokens:,} tokens (mean {tokens / len(texts):.0f}/text), "
        f"{rounds} alternating rounds"
    )
    first = names[0]
    print(f"{'encoder':62s} {'tokens/s':>9s} {'spread':>15s} {'GFLOP/s':>8s} {'min cos':>8s}  tokens/s over {first}'s")
    for name, ts in times.items():
        rate = tokens / statistics.median(ts)
        gflops = f"{rate * flops_per_token / 1e9:8.1f}" if flops_per_token else f"{'':8s}"
        ratios = [a / b for a, b in zip(times[first], ts)]
        print(
            f"{name:62s} {rate:9,.0f} {tokens / max(ts):7,.0f}-{tokens / min(ts):<7,.0f} {gflops} "
            f"{cosines[name]:8.6f}  {spread(ratios)}"
        )
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=600, help="mixed texts: half short, half ~90-word paragraphs")
    p.add_argument("--full-windows", type=int, default=128, help="texts of exactly the model's window")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--corpus", type=Path, default=CORPUS, help="a folder of PDFs (default ../shared/corpus)")
    p.add_argument("--batch-size", type=int, help="docembed's per-device batch (default: its platform default)")
    p.add_argument("--model", type=Path, help="a local model directory both sides load (default: the bundled one)")
    p.add_argument(
        "--st-batch-sizes",
        type=int,
        nargs="+",
        default=[32, 8],
        help="sentence-transformers float32 batch sizes (default 32, its default, and 8)",
    )
    a = p.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    model = a.model or default_model_dir()
    embedder = Embedder.load(str(a.model) if a.model else None, batch_size=a.batch_size)
    st = SentenceTransformer(str(model), device="cpu")
    st_bf16 = SentenceTransformer(str(model), device="cpu").to(torch.bfloat16)
    window = embedder.encoder.spec.max_seq_length
    words = corpus_words(a.corpus)
    # 300 words tokenize past the window; both encoders cut them to it.
    full = pieces(words, [300] * a.full_windows)
    mixed = mixed_texts(words, a.texts)

    rates = [matmul_gflops() for _ in range(3)]
    ceiling = statistics.median(rates)
    print(f"CPU: {cpu_description()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; model {model}")
    print(
        f"python {platform.python_version()}, jax {jax.__version__}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    )
    print(
        f"docembed batch {embedder.encoder.batching.batch_size} per device at full length, "
        f"{embedder.encoder.mesh.devices.size} {jax.default_backend()} device(s); "
        f"XLA float32 matmul rate {ceiling:.1f} GFLOP/s (1024^3, median of 3)"
    )

    for title, texts in ((f"{a.texts} mixed texts", mixed), (f"{len(full)} texts of {window} tokens", full)):
        runners = {"docembed JAX float32": functools.partial(embedder.embed, texts)}
        for bs in a.st_batch_sizes:
            runners[f"sentence-transformers float32, batch {bs}"] = functools.partial(st.encode, texts, batch_size=bs)
        runners["sentence-transformers bfloat16 (AMX), batch 32"] = functools.partial(
            st_bf16.encode, texts, batch_size=32
        )
        tokens = count_tokens(embedder, texts)
        fpt = flops_per_token(embedder, tokens // len(texts))
        compare(title, texts, tokens, runners, st.encode(texts), a.rounds, fpt)


if __name__ == "__main__":
    main()
