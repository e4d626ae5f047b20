"""End-to-end job throughput against the encoder alone on the same token windows.

    .venv/bin/python bench/pipeline.py [--copies N] [--input DIR] [--rounds N] [--packing on|off] [--dtype D]

The corpus is the bundled samples (or --input) copied N times, so that the
job's fixed costs (Ray start, actor start, compilation) are spread as they are
on a real corpus. The job runs first, on a local Ray; then the job's own CPU
stages make the same token windows in this process (pipeline.run.capacity), and
`Encoder.encode_ids` encodes them, compiled before timing. Both figures count
the same tokens. Rounds alternate job and encoder alone, so a shared machine's
load falls on both; ratios are quoted as median and range. The job is quoted twice: over its wall time, and over its
encoder's span (first encoder call to last), which leaves out starting Ray and
the actors, as the encoder-alone figure leaves out compiling.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from corpus import corpus_copies  # noqa: E402  (bench/corpus.py)
from machine import cpu_description  # noqa: E402  (bench/machine.py)

from kernels.compute_dtype import DTYPES  # noqa: E402
from pipeline import JobConfig, run_job  # noqa: E402
from pipeline.encode.encoder import Encoder, EncoderConfig  # noqa: E402
from pipeline.encode.model_dir import resolve  # noqa: E402
from pipeline.extract import PDF_EXTRACTORS, resolve_extractor  # noqa: E402
from pipeline.extract.sandbox import ExtractConfig  # noqa: E402
from pipeline.io.shards import ShardFields  # noqa: E402
from pipeline.run.capacity import sample_cpu_stages  # noqa: E402
from pipeline.text.chunking import ChunkingConfig  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, default=REPO / "samples")
    p.add_argument("--copies", type=int, default=20)
    p.add_argument("--overlap", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="job and encoder-alone rounds, alternating")
    p.add_argument("--packing", choices=("on", "off"), default="on")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="the encoder's, in the job and alone")
    p.add_argument("--pdf-extractor", default="auto", choices=("auto", *PDF_EXTRACTORS))
    a = p.parse_args()
    extractor = resolve_extractor(a.pdf_extractor)
    encoder_cfg = EncoderConfig(packing=a.packing == "on", dtype=a.dtype)

    print(cpu_description())
    rows = []  # per round: job wall, job's encoder span, encoder alone, padding, programs
    with tempfile.TemporaryDirectory() as tmp:
        corpus = corpus_copies(a.input, a.copies, Path(tmp) / "corpus")
        spec = resolve(None)
        encoder = windows = None
        for round_ in range(a.rounds):
            t = time.perf_counter()
            cfg = JobConfig(
                inputs=(str(corpus),),
                output=str(Path(tmp) / f"out{round_}"),
                overlap=a.overlap,
                encoder=encoder_cfg,
                extract=ExtractConfig(extractor),
            )
            report = run_job(cfg)
            job_wall = time.perf_counter() - t
            if encoder is None:  # the same windows as the job's, made by its own CPU stages in this process
                chunking = ChunkingConfig(max_tokens=spec.max_seq_length, overlap=a.overlap)
                windows = sample_cpu_stages(
                    [str(corpus)], report.inputs, None, chunking, ShardFields(), cfg.extract
                ).windows
                encoder = Encoder(spec, encoder_cfg)
                encoder.encode_ids(windows)  # compile every shape first
            tokens = sum(map(len, windows))
            assert tokens == report.tokens, f"the job encoded {report.tokens} tokens, the bench made {tokens}"
            t = time.perf_counter()
            _, stats = encoder.encode_ids(windows)
            alone = time.perf_counter() - t
            span = report.stages.stages["encode"].span_s
            busy = report.stages.stages["encode"].busy_s
            rows.append(
                (job_wall, span, alone, report.padding_efficiency, max(map(len, report.compiled_shapes.values())))
            )
            docs = report.docs_ok + report.docs_failed
            print(
                f"round {round_ + 1}: job {job_wall:.1f} s wall, encoder span {span:.1f} s (busy {busy:.1f} s); "
                f"{docs / job_wall:.1f} docs/s over the wall, {docs / span:.1f} over the span; "
                f"padding {report.padding_efficiency:.1%}; first group {report.first_group_seconds:.1f} s; "
                f"encoder alone {alone:.1f} s; "
                f"job/alone {alone / job_wall:.2f}x over the wall, {alone / span:.2f}x over the span; "
                f"{report.stages.line(report.wall_seconds)}"
            )

    print(
        f"corpus: {a.input} x{a.copies}: {report.inputs} inputs, {report.chunks} chunks, {tokens} tokens; "
        f"PDF extractor {extractor}; packing {a.packing}; dtype {a.dtype} asked, {encoder.dtype} ran; "
        f"{a.rounds} rounds alternating job and encoder alone"
    )
    print(
        f"padding efficiency: job {rows[-1][3]:.1%} with {rows[-1][4]} programs, "
        f"encoder alone {stats.real_tokens / stats.computed_tokens:.1%} with {len(encoder.compiled_shapes)}"
    )
    for what, ratios in (
        ("over the wall", [r[2] / r[0] for r in rows]),
        ("over the span", [r[2] / r[1] for r in rows]),
    ):
        print(
            f"job / encoder alone {what}: median {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
        )
    print(f"encoder alone: median {tokens / statistics.median(r[2] for r in rows):,.0f} tokens/s")


if __name__ == "__main__":
    main()
