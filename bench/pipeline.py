"""End-to-end job throughput against the encoder alone on the same token windows.

    .venv/bin/python bench/pipeline.py [--copies N] [--input DIR] [--pdf-extractor NAME]

The corpus is the bundled samples (or --input) copied N times, so that the
job's fixed costs (Ray start, actor start, compilation) are spread as they are
on a real corpus. The job runs first, on a local Ray; then the job's own CPU
stages make the same token windows in this process (pipeline.capacity), and
`Encoder.encode_ids` encodes them, compiled before timing. Both figures count
the same tokens. The job is quoted twice: over its wall time, and over its
encoder's span (first encoder call to last), which leaves out starting Ray and
the actors, as the encoder-alone figure leaves out compiling.
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
from pipeline.capacity import sample_cpu_stages  # noqa: E402
from pipeline.encode.encoder import Encoder  # noqa: E402
from pipeline.encode.model_dir import resolve  # noqa: E402
from pipeline.extract import PDF_EXTRACTORS, resolve_extractor  # noqa: E402
from pipeline.extract.sandbox import ExtractConfig  # noqa: E402
from pipeline.io.shards import ShardFields  # noqa: E402
from pipeline.text.chunking import ChunkingConfig  # noqa: E402


def corpus_copies(source: Path, copies: int, root: Path) -> Path:
    for i in range(copies):
        shutil.copytree(source, root / f"copy{i:03d}")
    return root


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

        spec = resolve(None)
        chunking = ChunkingConfig(max_tokens=spec.max_seq_length, overlap=a.overlap)
        windows = sample_cpu_stages([str(corpus)], report.inputs, None, chunking, ShardFields(), cfg.extract).windows
        tokens = sum(map(len, windows))
        assert tokens == report.tokens, f"the job encoded {report.tokens} tokens, the bench made {tokens}"
        encoder = Encoder(spec)
        encoder.encode_ids(windows)  # compile every shape first
        t = time.perf_counter()
        _, stats = encoder.encode_ids(windows)
        encoder_wall = time.perf_counter() - t

    encode_span = report.stages.stages["encode"].span_s
    rates = {
        "end-to-end job, wall (Ray start included)": (job_wall, report.padding_efficiency,
                                                      max(map(len, report.compiled_shapes.values()))),
        "end-to-end job, encoder's span": (encode_span, report.padding_efficiency,
                                           max(map(len, report.compiled_shapes.values()))),
        "encoder alone, same windows, compiled": (encoder_wall, stats.real_tokens / stats.computed_tokens,
                                                  len(encoder.compiled_shapes)),
    }
    print(f"corpus: {a.input} x{a.copies}: {report.inputs} inputs, {report.chunks} chunks, {tokens} tokens; "
          f"PDF extractor {extractor}")
    print(f"{'what':44s} {'seconds':>8s} {'tokens/s':>9s} {'padding eff.':>12s} {'programs':>8s}")
    for what, (seconds, padding, programs) in rates.items():
        print(f"{what:44s} {seconds:8.2f} {tokens / seconds:9,.0f} {padding:12.1%} {programs:8d}")
    print(f"ratio job / encoder alone: {encoder_wall / job_wall:.2f}x over the wall, "
          f"{encoder_wall / encode_span:.2f}x over the encoder's span")
    print(report.stages.line(report.wall_seconds))


if __name__ == "__main__":
    main()
