"""End-to-end job throughput against the encoder alone on the same token windows.

    .venv/bin/python bench/pipeline.py [--copies N] [--input DIR] [--pdf-extractor NAME]

The corpus is the bundled samples (or --input) copied N times, so that the
job's fixed costs (Ray start, actor start, compilation) are spread as they are
on a real corpus. The job runs first, on a local Ray; then the same chunks'
token ids go through `Encoder.encode_ids` in this process, compiled before
timing. Both figures count the same tokens.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline import JobConfig, run_job  # noqa: E402
from pipeline.chunking import ChunkingConfig, chunk_document, join_pages  # noqa: E402
from pipeline.encoder import Encoder  # noqa: E402
from pipeline.extract import PDF_EXTRACTORS, DocumentError, extract_pages, kind_of, resolve_extractor  # noqa: E402
from pipeline.model import resolve  # noqa: E402
from pipeline.sandbox import ExtractConfig  # noqa: E402
from pipeline.tokenizer import Tokenizer  # noqa: E402


def corpus_copies(source: Path, copies: int, root: Path) -> Path:
    for i in range(copies):
        shutil.copytree(source, root / f"copy{i:03d}")
    return root


def window_ids(corpus: Path, overlap: int, pdf_extractor: str) -> list[list[int]]:
    """The token windows the job encodes, made in-process the way the job makes them."""
    spec = resolve(None)
    tokenizer = Tokenizer(spec.path / "tokenizer.json")
    cfg = ChunkingConfig(max_tokens=spec.max_seq_length, overlap=overlap)
    windows = []
    for path in sorted(corpus.rglob("*")):
        kind = kind_of(path.name)
        if kind is None:
            continue
        try:
            pages = extract_pages(path.read_bytes(), kind, pdf_extractor)
        except DocumentError:
            continue
        text, starts = join_pages(pages)
        enc = tokenizer.encode_content([text])[0]
        if enc.ids:
            windows += [c.token_ids for c in chunk_document(text, enc.ids, enc.offsets, starts, tokenizer, cfg)]
    return windows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, default=REPO / "samples")
    p.add_argument("--copies", type=int, default=20)
    p.add_argument("--overlap", type=int, default=32)
    p.add_argument("--pdf-extractor", default="auto", choices=("auto", *PDF_EXTRACTORS))
    a = p.parse_args()
    extractor = resolve_extractor(a.pdf_extractor)

    with tempfile.TemporaryDirectory() as tmp:
        corpus = corpus_copies(a.input, a.copies, Path(tmp) / "corpus")
        t = time.perf_counter()
        cfg = JobConfig(
            inputs=(str(corpus),), output=str(Path(tmp) / "out"), overlap=a.overlap, extract=ExtractConfig(extractor)
        )
        report = run_job(cfg)
        job_wall = time.perf_counter() - t

        windows = window_ids(corpus, a.overlap, extractor)
        tokens = sum(map(len, windows))
        assert tokens == report.tokens, f"the job encoded {report.tokens} tokens, the bench made {tokens}"
        encoder = Encoder(resolve(None))
        encoder.encode_ids(windows)  # compile every shape first
        t = time.perf_counter()
        _, stats = encoder.encode_ids(windows)
        encoder_wall = time.perf_counter() - t

    job_rate, enc_rate = tokens / job_wall, tokens / encoder_wall
    print(f"corpus: {a.input} x{a.copies}: {report.inputs} inputs, {report.chunks} chunks, {tokens} tokens; "
          f"PDF extractor {extractor}")
    print(f"{'what':44s} {'seconds':>8s} {'tokens/s':>9s} {'padding eff.':>12s} {'programs':>8s}")
    print(f"{'end-to-end job (wall, Ray start included)':44s} {job_wall:8.2f} {job_rate:9,.0f} "
          f"{report.padding_efficiency:12.1%} {max(map(len, report.compiled_shapes.values())):8d}")
    print(f"{'encoder alone, same windows, compiled':44s} {encoder_wall:8.2f} {enc_rate:9,.0f} "
          f"{stats.real_tokens / stats.computed_tokens:12.1%} {len(encoder.compiled_shapes):8d}")
    print(f"ratio job / encoder alone: {job_rate / enc_rate:.2f}x")


if __name__ == "__main__":
    main()
