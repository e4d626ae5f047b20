"""How many CPU cores per accelerator chip a corpus like INPUT needs: `python jobs/capacity.py --input URI [options]`.

Measures this machine's per-core rates of the job's CPU stages on a sample of
the input, and the encoder's rate on this machine's accelerator (or takes
either as an argument), and prints cores per chip with the assumption behind
each number. Nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.encode import model_dir  # noqa: E402
from pipeline.errors import UserError  # noqa: E402
from pipeline.io.shards import ShardFields  # noqa: E402
from pipeline.options import add_job_options, encoder_config, extract_config  # noqa: E402
from pipeline.run import capacity  # noqa: E402
from pipeline.text.chunking import ChunkingConfig  # noqa: E402
from pipeline.text.tokenizer import Tokenizer  # noqa: E402

# The job's options that shape what the CPU stages and the encoder do.
JOB_OPTIONS = (
    "input",
    "model",
    "max_tokens",
    "overlap",
    "chunking",
    "batch_size",
    "mesh",
    "dtype",
    "attention",
    "id_field",
    "text_field",
    "pdf_extractor",
    "extract_timeout",
    "extract_memory",
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="jobs/capacity.py", description=__doc__.split("\n\n")[0])
    add_job_options(p, JOB_OPTIONS)
    p.add_argument("--sample-docs", type=int, default=200, metavar="N", help="documents to sample (default 200)")
    p.add_argument(
        "--encoder-tokens-per-s",
        type=float,
        metavar="R",
        help="the target chip's encoder rate per chip, instead of measuring this machine's",
    )
    p.add_argument(
        "--headroom", type=float, default=1.25, metavar="X", help="margin over the measured need (default 1.25)"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        spec = model_dir.resolve(a.model)
        tokenizer = Tokenizer(spec.path / "tokenizer.json")
        chunking = ChunkingConfig(max_tokens=a.max_tokens or spec.max_seq_length, overlap=a.overlap, mode=a.chunking)
        chunking.validate(tokenizer.n_special, spec.arch.max_tokens)
        fields = ShardFields(id=a.id_field, text=a.text_field)
        sample = capacity.sample_cpu_stages(a.input, a.sample_docs, a.model, chunking, fields, extract_config(vars(a)))
        if a.encoder_tokens_per_s:
            encoder = capacity.EncoderRate(a.encoder_tokens_per_s, "given with --encoder-tokens-per-s")
        else:
            encoder = capacity.measure_encoder(a.model, encoder_config(vars(a)), sample.windows)
    except UserError as e:
        print(f"docembed: error: {e}", file=sys.stderr)
        return 2
    print(capacity.render(sample, encoder, a.headroom))
    return 0


if __name__ == "__main__":
    sys.exit(main())
