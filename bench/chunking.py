"""Chunking modes side by side: where chunks end, sentences kept whole, window fill, padding, rate.

    .venv/bin/python bench/chunking.py [--input DIR ...] [--rounds N] [--max-tokens N] [--overlap N]

For each mode (`--chunking window` and `boundaries`), over the real PDFs
(default: ../shared/corpus and samples/pdf), the sample texts (samples/text),
the small texts in six scripts (tests/fixtures/scripts), and the PDFs with
1,000 short texts cut from the samples (issue 13's mixed corpus, for padding),
with the bundled model's tokenizer:

- ends on a sentence: the share of chunks, of documents longer than one window
  and not their document's last chunk, whose end is a sentence or paragraph
  boundary (`pipeline.text.boundaries`);
- sentences split: the share of sentences of at most `max_tokens - special -
  overlap` content tokens that no chunk holds whole (sentences: the spans
  between the same sentence and paragraph boundaries, so both modes are judged
  by one rule);
- fill: mean tokens of those chunks over the window (special tokens included;
  a document's last chunk included);
- padding efficiency and programs when every chunk is packed the way the
  encoder does it (`pipeline.encode.batching`, the job's CPU settings: 4 rows
  per device, 2 devices, 2 tail halvings), planned over all chunks in one call;
  and the bound on padding efficiency that no packing into rows of the window
  can pass, whatever calls it sees (see `measure`);
- the rate of the tokenise and chunk stage, `ChunkBlock` over the PDFs, the
  sample texts and the six scripts in this one process (one thread: the rate per core), the modes alternating over
  `--rounds` rounds; medians.
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before `tokenizers` loads: one core
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from pipeline.encode.batching import BatchingConfig, make_batches  # noqa: E402
from pipeline.encode.model_location import default_model_dir  # noqa: E402
from pipeline.errors import DocumentError  # noqa: E402
from pipeline.extract import extract_pages  # noqa: E402
from pipeline.run.stages import ChunkBlock  # noqa: E402
from pipeline.schemas import DOC_SCHEMA  # noqa: E402
from pipeline.text.boundaries import SENTENCE, cut_levels  # noqa: E402
from pipeline.text.chunking import CHUNKING_MODES, ChunkingConfig, join_pages  # noqa: E402

SCRIPTS = REPO / "tests" / "fixtures" / "scripts"


def load_documents(pdf_dirs: list[Path]) -> dict[str, list[dict]]:
    """Document rows (DOC_SCHEMA) by corpus: real PDFs, sample texts, the texts in six scripts."""

    def row(doc_id: str, kind: str, pages: list[str]) -> dict:
        return {"doc_id": doc_id, "kind": kind, "pages": pages}

    pdfs = []
    for path in sorted(p for d in pdf_dirs for p in d.rglob("*.pdf")):
        try:
            pdfs.append(row(str(path), "pdf", extract_pages(path.read_bytes(), "pdf")))
        except DocumentError:
            pass  # encrypted, or images only: no text to chunk
    texts = [row(str(p), "text", [p.read_text()]) for p in sorted((REPO / "samples" / "text").iterdir())]
    scripts = [row(str(p), "text", [p.read_text()]) for p in sorted(SCRIPTS.glob("*.txt"))]
    # Issue 13's mixed corpus: the PDFs and 1,000 short texts of 1-90 words cut from the samples.
    words = " ".join(t["pages"][0] for t in texts).split()
    short = [
        row(f"short{i}", "text", [" ".join(words[i * 101 % len(words) :][: 1 + i * 37 % 90])]) for i in range(1000)
    ]
    return {"real PDFs": pdfs, "sample texts": texts, "six scripts": scripts, "PDFs + 1,000 short texts": pdfs + short}


def chunk_rows(block: ChunkBlock, docs: list[dict]) -> list[dict]:
    return block(pa.Table.from_pylist(docs, schema=DOC_SCHEMA)).to_pylist()


def measure(block: ChunkBlock, docs: list[dict]) -> dict:
    """The chunk metrics of one mode over `docs` (see the module's docstring)."""
    tokenizer, cfg = block.tokenizer, block.chunking
    by_doc: dict[str, list[dict]] = {}
    for r in chunk_rows(block, docs):
        if r["error_type"] is None:
            by_doc.setdefault(r["doc_id"], []).append(r)
    longest = cfg.max_tokens - tokenizer.n_special - cfg.overlap
    cut = on_sentence = sentences = split = 0
    fills = []
    for doc in docs:
        chunks = by_doc.get(doc["doc_id"], [])
        if len(chunks) < 2:
            continue
        text, _ = join_pages(doc["pages"])
        offsets = tokenizer.encode_content([text])[0].offsets
        levels = cut_levels(text, offsets)
        # A chunk's tokens: those its characters hold (a span reaches over characters no token holds).
        token_starts, token_ends = [a for a, _ in offsets], [b for _, b in offsets]
        spans = [
            (bisect.bisect_right(token_ends, c["char_start"]), bisect.bisect_left(token_starts, c["char_end"]))
            for c in chunks
        ]
        fills += [c["n_tokens"] / cfg.max_tokens for c in chunks]
        cut += len(spans) - 1
        on_sentence += sum(levels[end] >= SENTENCE for _, end in spans[:-1])
        starts = [s for s, _ in spans]
        bounds = np.flatnonzero(levels >= SENTENCE)
        for a, b in zip(bounds, bounds[1:]):
            if b - a <= longest:
                sentences += 1
                # Spans' ends grow with their starts: the last span starting by `a` reaches furthest.
                holder = spans[bisect.bisect_right(starts, a) - 1]
                split += holder[1] < b
    lengths = [r["n_tokens"] for rows in by_doc.values() for r in rows]
    batching = BatchingConfig(max_seq_len=cfg.max_tokens, batch_size=4, row_multiple=2)
    batches = list(make_batches([[1] * n for n in lengths], batching))
    computed = sum(b.ids_BT.size for b in batches)
    # No packing, across calls or not, beats this: two chunks over half the window never share a row,
    # and the others can at most fill those rows' free room before needing rows of their own.
    window = cfg.max_tokens
    long = [n for n in lengths if 2 * n > window]
    short_tokens, free = sum(lengths) - sum(long), window * len(long) - sum(long)
    fewest_rows = len(long) + -(-max(0, short_tokens - free) // window)
    return {
        "docs": len(by_doc),
        "chunks": len(lengths),
        "tokens": sum(lengths),
        "cut": cut,
        "on_sentence": on_sentence / max(cut, 1),
        "sentences": sentences,
        "split": split / max(sentences, 1),
        "fill": statistics.fmean(fills) if fills else float("nan"),
        "padding": sum(lengths) / computed,
        "padding_bound": sum(lengths) / (window * max(fewest_rows, 1)),
        "programs": len({b.ids_BT.shape for b in batches}),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, action="append", help="directories of PDFs (repeatable)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--overlap", type=int, default=32)
    a = p.parse_args()
    corpora = load_documents(a.input or [REPO.parent / "shared" / "corpus", REPO / "samples" / "pdf"])
    blocks = {mode: ChunkBlock(None, ChunkingConfig(a.max_tokens, a.overlap, mode=mode)) for mode in CHUNKING_MODES}
    print(f"window {a.max_tokens} tokens, overlap {a.overlap}, tokenizer {default_model_dir().name}")
    print(
        "| corpus | mode | docs | chunks | tokens | chunks cut | ends on a sentence | sentences | split | fill |",
        end="",
    )
    print(" padding, programs | padding bound |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, docs in corpora.items():
        for mode, block in blocks.items():
            m = measure(block, docs)
            print(
                f"| {name} | {mode} | {m['docs']} | {m['chunks']} | {m['tokens']:,} | {m['cut']} | "
                f"{m['on_sentence']:.1%} | {m['sentences']:,} | {m['split']:.2%} | {m['fill']:.1%} | "
                f"{m['padding']:.1%}, {m['programs']} | {m['padding_bound']:.1%} |"
            )

    docs = corpora["real PDFs"] + corpora["sample texts"] + corpora["six scripts"]
    seconds = {mode: [] for mode in blocks}
    for _ in range(a.rounds):
        for mode, block in blocks.items():  # alternating, so load on the shared machine hits both alike
            started = time.perf_counter()
            chunk_rows(block, docs)
            seconds[mode].append(time.perf_counter() - started)
    print(f"\nChunkBlock over all {len(docs)} documents, one thread; medians of {a.rounds} rounds")
    print("| mode | median s | docs/s | content tokens/s | against window |")
    print("|---|---:|---:|---:|---:|")
    content = sum(len(block.tokenizer.encode_content([join_pages(d["pages"])[0]])[0].ids) for d in docs)
    for mode in blocks:
        s = statistics.median(seconds[mode])
        ratio = statistics.median(w / b for w, b in zip(seconds["window"], seconds[mode]))
        print(f"| {mode} | {s:.3f} | {len(docs) / s:,.0f} | {content / s:,.0f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
