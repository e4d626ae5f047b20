"""Retrieval with each chunking mode, side by side: a paragraph's first sentence finds the rest of it.

    .venv/bin/python bench/retrieval.py [--input DIR ...] [--max-tokens N] [--overlap N]

The corpus: the real PDFs (default: ../shared/corpus and samples/pdf) and the
sample texts (samples/text), chunked in each mode (`--chunking window` and
`boundaries`) and embedded as the job does it (each chunk's token ids through
the bundled model's encoder, `pipeline.Embedder`).

A paragraph is a run of text between blank lines or, in PDF text, which has
none, between a line that ends a sentence and the next line. Each paragraph of
at least two sentences gives one query: its first sentence (5 to 60 words),
embedded as a query. The targets are the chunks that hold any of the rest of
the paragraph. recall@k: the share of queries with a target among the k
chunks nearest to the query (cosine), out of every chunk of the corpus. The
queries are the same for both modes; the sentences are cut by
`pipeline.text.boundaries`' rule, not by either mode's chunks.
"""

from __future__ import annotations

import argparse
import bisect
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from chunking import load_documents  # noqa: E402  (bench/chunking.py)

from pipeline import Embedder  # noqa: E402
from pipeline.text.boundaries import SENTENCE, cut_levels  # noqa: E402
from pipeline.text.chunking import CHUNKING_MODES, ChunkingConfig, chunk_document, join_pages  # noqa: E402

# A paragraph ends at a blank line, or at a line break after a sentence's end.
_PARAGRAPH_END = re.compile(r"\n[^\S\n]*\n\s*|(?<=[.!?:])[\"'”’)]*\n")
TOP_K = (1, 5)


def queries_of(text: str, offsets: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
    """(first sentence, start and end of the rest of its paragraph) for each paragraph of two sentences or more."""
    levels = cut_levels(text, offsets)
    sentence_ends = [offsets[i - 1][1] for i in np.flatnonzero(levels >= SENTENCE) if i > 0]
    found, start = [], 0
    for m in [*_PARAGRAPH_END.finditer(text), None]:
        end = len(text) if m is None else m.start()
        i = bisect.bisect_right(sentence_ends, start)
        if i < len(sentence_ends) and sentence_ends[i] < end:
            first_end = sentence_ends[i]
            first = text[start:first_end].split()
            if 5 <= len(first) <= 60 and len(text[first_end:end].split()) >= 5:
                found.append((" ".join(first), first_end, end))
        start = end if m is None else m.end()
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, action="append", help="directories of PDFs (repeatable)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--overlap", type=int, default=32)
    a = p.parse_args()
    corpora = load_documents(a.input or [REPO.parent / "shared" / "corpus", REPO / "samples" / "pdf"])
    docs = corpora["real PDFs"] + corpora["sample texts"]
    embedder = Embedder.load()
    tokenizer = embedder.tokenizer
    texts = [join_pages(d["pages"])[0] for d in docs]
    encodings = tokenizer.encode_content(texts)

    queries = []  # (query, doc index, rest start, rest end)
    for i, (text, enc) in enumerate(zip(texts, encodings)):
        queries += [(q, i, s, e) for q, s, e in queries_of(text, enc.offsets)]
    query_ND = embedder.embed([q for q, *_ in queries])
    print(
        f"{len(docs)} documents, {len(queries)} queries; window {a.max_tokens} tokens, overlap {a.overlap}; "
        f"{embedder.encoder.spec.model_id}"
    )
    print("| mode | chunks | tokens | recall@1 | recall@5 |")
    print("|---|---:|---:|---:|---:|")
    for mode in CHUNKING_MODES:
        cfg = ChunkingConfig(a.max_tokens, a.overlap, mode=mode)
        chunks = [
            (i, c)
            for i, (text, enc) in enumerate(zip(texts, encodings))
            for c in chunk_document(text, enc.ids, enc.offsets, None, tokenizer, cfg)
        ]
        chunk_ND, _ = embedder.encoder.encode_ids([c.token_ids for _, c in chunks])
        nearest = np.argsort(-(query_ND @ chunk_ND.T), axis=1, kind="stable")[:, : max(TOP_K)]
        hits = {k: 0 for k in TOP_K}
        for (_, doc, start, end), top in zip(queries, nearest):
            relevant = [d == doc and c.char_start < end and start < c.char_end for d, c in (chunks[j] for j in top)]
            for k in TOP_K:
                hits[k] += any(relevant[:k])
        tokens = sum(len(c.token_ids) for _, c in chunks)
        recall = " | ".join(f"{hits[k] / len(queries):.1%}" for k in TOP_K)
        print(f"| {mode} | {len(chunks)} | {tokens:,} | {recall} |")


if __name__ == "__main__":
    main()
