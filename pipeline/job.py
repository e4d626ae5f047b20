"""The embedding job: a Ray Data graph from input files to committed Parquet and `_SUCCESS`.

    list inputs (driver) -> read + extract (tasks) -> tokenise + chunk (CPU actors)
      -> encode (accelerator actors) -> write parts (tasks) -> summary rows (driver)

The driver only ever holds file names and per-block summary rows.
"""

from __future__ import annotations

import json
import logging
import os
import time

import pyarrow as pa
import ray

from kernels.attention import IMPLS as attention_impls
from pipeline import model as model_dir
from pipeline import sink
from pipeline.accelerators import plan_encoders
from pipeline.batching import BatchingConfig
from pipeline.chunking import ChunkingConfig
from pipeline.config import JobConfig
from pipeline.report import RunReport
from pipeline.errors import ConfigError, InputError
from pipeline.sources import list_inputs
from pipeline.stages import ChunkBlock, EncodeBlock, embedded_schema, extract_block
from pipeline.tokenizer import Tokenizer

log = logging.getLogger("docembed")

# Rows per block handed to each stage. Extraction blocks stay small so that one
# slow PDF delays few others; encoder blocks are large so that length buckets fill.
EXTRACT_BATCH = 4
CHUNK_BATCH = 16
ENCODE_BATCH = 1024


@ray.remote(num_cpus=0)
class RunStats:
    """Collects the encoder actors' cumulative counters while the job runs."""

    def __init__(self):
        self.encoders: dict[str, tuple] = {}

    def report_encoder(self, name, totals, compiled_shapes):
        self.encoders[name] = (totals, compiled_shapes)

    def snapshot(self) -> dict[str, tuple]:
        return self.encoders


def _init_ray() -> None:
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=True)
    else:
        # A laptop run: a private local Ray for this process only.
        ray.init(include_dashboard=False, log_to_driver=True)


def run(cfg: JobConfig) -> RunReport | None:
    """Runs the job. Returns its report, or None when `cfg.output` already holds a finished run."""
    started = time.time()
    spec = model_dir.resolve(cfg.model)
    tokenizer = Tokenizer(spec.path / "tokenizer.json")
    chunking = ChunkingConfig(max_tokens=cfg.max_tokens or spec.max_seq_length, overlap=cfg.overlap)
    chunking.validate(tokenizer.n_special, spec.max_seq_length)
    BatchingConfig(max_seq_len=spec.max_seq_length, batch_size=cfg.encoder.batch_size)  # validates before actors start
    if cfg.encoder.attention not in ("auto", *attention_impls):
        raise ConfigError(f"unknown attention implementation {cfg.encoder.attention!r}; known: auto, {', '.join(attention_impls)}")
    inputs, skipped = list_inputs(list(cfg.inputs))
    if not inputs:
        raise InputError(f"no documents (.pdf, .txt, .md) under {', '.join(cfg.inputs)} ({skipped} other files skipped)")
    sink.check_writable(cfg.output)

    _init_ray()
    placement = plan_encoders(
        cfg.accelerator, ray.nodes(), cpu_actors=cfg.resources.encode_actors, cpu_per_actor=cfg.resources.encode_cpus
    )
    log.info("docembed: %s", placement.describe())
    # Only now, with every argument checked, is anything written.
    if not sink.prepare_output(cfg.output, cfg.overwrite):
        return None
    stats = RunStats.remote()
    res = cfg.resources
    schema = embedded_schema(spec.dim)
    items = pa.table({"doc_id": [f.uri for f in inputs], "kind": [f.kind for f in inputs]})
    # Many small input blocks (not a repartition, which would need a CPU of its own
    # while the actor pools hold theirs) so extraction spreads over workers.
    blocks = [items.slice(i, EXTRACT_BATCH) for i in range(0, len(inputs), EXTRACT_BATCH)]
    ds = (
        ray.data.from_arrow(blocks)
        .map_batches(extract_block, batch_size=EXTRACT_BATCH, batch_format="pyarrow", num_cpus=res.extract_cpus)
        .map_batches(
            ChunkBlock,
            fn_constructor_args=(str(spec.path / "tokenizer.json"), chunking),
            batch_size=CHUNK_BATCH,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=res.tokenize_actors),
            num_cpus=res.tokenize_cpus,
        )
        .map_batches(
            EncodeBlock,
            fn_constructor_args=(cfg.model, cfg.encoder, cfg.compile_cache, stats),
            batch_size=ENCODE_BATCH,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=placement.actors),
            **placement.ray_remote_args,
        )
        .map_batches(
            sink.write_block,
            fn_args=(cfg.output, [n for n in schema.names if not n.startswith("error_")]),
            batch_size=None,
            batch_format="pyarrow",
            num_cpus=res.extract_cpus,
        )
    )
    report = RunReport.start(cfg, spec, chunking, inputs=len(inputs), skipped=skipped)
    for summary in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        report.add_summaries(summary.to_pylist())
    report.finish(time.time() - started, ray.get(stats.snapshot.remote()))
    if report.docs_ok + report.docs_failed != len(inputs):
        raise RuntimeError(
            f"{len(inputs)} inputs but {report.docs_ok} embedded and {report.docs_failed} failed: "
            "refusing to mark the output done"
        )
    sink.write_success(cfg.output, report.to_json())
    return report
