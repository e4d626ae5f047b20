"""PDF extractors side by side, and what the extraction sandbox costs.

    .venv/bin/python bench/extract.py [--rounds N] [--input DIR]

One process, one thread: every rate is per core. Each round extracts every PDF
under --input (default: the shared corpus of real PDFs) with each extractor in
turn, in this process; medians over the rounds. Pages and characters count what
the extractor returned, tokens the model tokenizer's content tokens of that
text (tokenising is not timed). Documents that fail (encrypted, no text) are
timed too, as the job pays for them. Then the same PDFs go through a warm
`Sandbox` per extractor, against the same extractor in this process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.encode.model_dir import resolve  # noqa: E402
from pipeline.extract import PDF_EXTRACTORS, DocumentError, extract_pages  # noqa: E402
from pipeline.extract.sandbox import ExtractConfig, Sandbox  # noqa: E402
from pipeline.text.tokenizer import Tokenizer  # noqa: E402


def extract_all(pdfs: list[bytes], extract) -> tuple[float, list[list[str]]]:
    """Seconds to run `extract(data) -> pages` over every PDF, and the pages (empty for a failed one)."""
    results = []
    started = time.perf_counter()
    for data in pdfs:
        try:
            results.append(extract(data))
        except DocumentError:
            results.append([])
    return time.perf_counter() - started, results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, default=REPO.parent / "shared" / "corpus")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()

    pdfs = [path.read_bytes() for path in sorted(a.input.rglob("*.pdf"))]
    tokenizer = Tokenizer(resolve(None).files / "tokenizer.json")
    in_process = {name: (lambda data, name=name: extract_pages(data, "pdf", name)) for name in PDF_EXTRACTORS}

    seconds = {name: [] for name in PDF_EXTRACTORS}
    pages = {}
    for _ in range(a.rounds):
        for name in PDF_EXTRACTORS:  # alternating, so load on the shared machine hits both alike
            s, pages[name] = extract_all(pdfs, in_process[name])
            seconds[name].append(s)

    print(
        f"{len(pdfs)} PDFs under {a.input}, {sum(map(len, pdfs)) / 1e6:.1f} MB; medians of {a.rounds} rounds, one core"
    )
    print("| extractor | docs with text | pages | chars | tokens | median s | pages/s | chars/s | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rate = {}
    for name in PDF_EXTRACTORS:
        n_pages = sum(map(len, pages[name]))
        texts = ["\n\n".join(doc) for doc in pages[name] if doc]
        chars = sum(map(len, texts))
        tokens = sum(len(e.ids) for e in tokenizer.encode_content(texts))
        s = statistics.median(seconds[name])
        rate[name] = n_pages / s
        print(
            f"| {name} | {len(texts)} | {n_pages:,} | {chars:,} | {tokens:,} | {s:.3f} | {n_pages / s:,.0f} | "
            f"{chars / s:,.0f} | {tokens / s:,.0f} |"
        )
    fast, reference = PDF_EXTRACTORS[-1], PDF_EXTRACTORS[0]
    print(f"\n{fast} / {reference} pages/s: {rate[fast] / rate[reference]:.1f}x")

    print(
        "\n| extractor | in process s | sandboxed s | overhead per document ms | sandboxed / in process "
        "| first document, child start included, s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in PDF_EXTRACTORS:
        sandbox = Sandbox(ExtractConfig(name))
        sandboxed = lambda data, sandbox=sandbox: sandbox.extract_pages(data, "pdf")  # noqa: E731
        start_s = extract_all(pdfs[:1], sandboxed)[0]  # the child starts with the first document
        inside, boxed = [], []
        for _ in range(a.rounds):
            inside.append(extract_all(pdfs, in_process[name])[0])
            boxed.append(extract_all(pdfs, sandboxed)[0])
        sandbox.close()
        s_in, s_box = statistics.median(inside), statistics.median(boxed)
        print(
            f"| {name} | {s_in:.3f} | {s_box:.3f} | {(s_box - s_in) / len(pdfs) * 1e3:.2f} "
            f"| {s_box / s_in:.2f}x | {start_s:.2f} |"
        )


if __name__ == "__main__":
    main()
