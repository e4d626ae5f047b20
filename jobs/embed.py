"""Embed a corpus: `python jobs/embed.py --input PATH [--input PATH ...] --output DIR [options]`.

Runs on the Ray cluster named by RAY_ADDRESS, or on a local Ray started in
this process when it is unset. Bad arguments, a missing input, an unreadable
model or an unwritable output end the job with one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

# `python jobs/embed.py` from a checkout (or a Ray job's working dir) must find the packages.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import JobConfig, run_job  # noqa: E402
from pipeline.accelerators import ACCELERATORS, DEFAULT_COMPILE_CACHE  # noqa: E402
from pipeline.config import Resources  # noqa: E402
from pipeline.encoder import DTYPES, EncoderConfig  # noqa: E402
from pipeline.errors import UserError  # noqa: E402


def parse_args(argv: list[str]) -> JobConfig:
    p = argparse.ArgumentParser(prog="jobs/embed.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", action="append", required=True, metavar="PATH", help="file or directory; repeatable")
    p.add_argument("--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--model", metavar="DIR", help="Hugging Face-format model directory (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="tokens per chunk incl. special tokens (default: model's max)")
    p.add_argument("--overlap", type=int, default=32, metavar="N", help="tokens shared by neighbouring chunks (default 32)")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="sequences per batch at full length (default 32)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="encoder compute dtype")
    p.add_argument("--attention", default="auto", metavar="IMPL", help="attention implementation (default auto)")
    p.add_argument("--accelerator", choices=ACCELERATORS, default="auto", help="where encoders run (default auto)")
    p.add_argument("--encoders", type=int, metavar="N", help="CPU encoder actors (default: one per node)")
    p.add_argument("--compile-cache", default=str(DEFAULT_COMPILE_CACHE), metavar="DIR",
                   help="persistent JAX compilation cache; '' turns it off (default %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace a finished output instead of keeping it")
    a = p.parse_args(argv)
    return JobConfig(
        inputs=tuple(a.input),
        output=a.output,
        model=a.model,
        max_tokens=a.max_tokens,
        overlap=a.overlap,
        encoder=EncoderConfig(dtype=a.dtype, attention=a.attention, batch_size=a.batch_size),
        resources=Resources(encode_actors=a.encoders),
        accelerator=a.accelerator,
        compile_cache=a.compile_cache or None,
        overwrite=a.overwrite,
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(message)s")
    logging.getLogger("docembed").setLevel(logging.INFO)
    try:
        cfg = parse_args(sys.argv[1:] if argv is None else argv)
        report = run_job(cfg)
    except UserError as e:
        print(f"docembed: error: {e}", file=sys.stderr)
        return 2
    if report is None:
        print(f"docembed: {cfg.output} already holds a finished run; nothing to do (--overwrite to redo it)")
    else:
        print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
