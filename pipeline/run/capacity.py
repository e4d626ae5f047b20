"""Capacity: how many CPU cores per accelerator chip keep the chips busy on a corpus like a sample of it.

The job's own stage code runs in this process, on one core, over a sample of
the input: reading, extraction, tokenisation and chunking each time
themselves (pipeline.run.stage_clock), and the windows they make are encoded on
this process's devices. One core's CPU stages yield R encoded tokens per
second; a chip encodes E; a chip therefore needs E / R cores, times headroom.
`plan` does it all for a CapacityConfig (`docembed capacity`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import jax
import pyarrow as pa

from pipeline.config import CapacityConfig, chunks_and_encoder
from pipeline.encode import model_dir
from pipeline.encode.encoder import Encoder, EncoderConfig
from pipeline.encode.placement import ACCELERATOR_HOST_CPUS
from pipeline.errors import InputError
from pipeline.extract.sandbox import ExtractConfig
from pipeline.io.listing import sample_inputs
from pipeline.io.shards import ShardFields
from pipeline.io.uris import redact
from pipeline.output.groups import record_groups, work_blocks
from pipeline.output.layout import output_file
from pipeline.run.stage_clock import STAGE_UNITS, RunTally, StageTable
from pipeline.run.stages import ChunkBlock, extract_block
from pipeline.text.chunking import ChunkingConfig

log = logging.getLogger("docembed")

CPU_STAGES = ("read", "extract", "tokenise", "chunk")
# The encoder's options its measured rate depends on, which a given rate makes moot.
ENCODER_RATE_OPTIONS = ("dtype", "attention", "dense", "batch_size", "packing", "mesh")
ENCODER_SECONDS = 3.0  # timed encoding after compilation: long enough to be steady


def plan(cfg: CapacityConfig) -> str:
    """The CPU stages timed on a sample of the input, the encoder's rate given or measured here: the printed plan."""
    spec = model_dir.resolve(cfg.model)
    chunking, encoder_cfg = chunks_and_encoder(spec, cfg)
    fields = ShardFields(id=cfg.id_field, text=cfg.text_field)
    sample = sample_cpu_stages(list(cfg.inputs), cfg.sample_docs, cfg.model, chunking, fields, cfg.extract)
    if not sample.windows:  # no rate of tokens per core, whatever the encoder's
        raise InputError("the sample yielded no text to encode: every sampled document is an error row")
    if cfg.encoder_tokens_per_s:
        encoder = EncoderRate(cfg.encoder_tokens_per_s, "given with --encoder-tokens-per-s")
        default = EncoderConfig()
        moot = [name for name in ENCODER_RATE_OPTIONS if getattr(encoder_cfg, name) != getattr(default, name)]
        if moot:
            flags = ", ".join("--" + name.replace("_", "-") for name in moot)
            log.warning("docembed: %s not used: --encoder-tokens-per-s gives the encoder's rate", flags)
    else:
        encoder = measure_encoder(cfg.model, encoder_cfg, sample.windows)
    return render(sample, encoder, cfg.headroom)


@dataclasses.dataclass(frozen=True)
class CpuSample:
    documents: int
    inputs: int  # of this many in the corpus
    table: StageTable
    windows: list[list[int]]  # token ids the encoder would get

    @property
    def encoded_tokens(self) -> int:
        return sum(map(len, self.windows))

    @property
    def cpu_busy_s(self) -> float:
        return sum(self.table.stages[s].busy_s for s in CPU_STAGES if s in self.table.stages)

    @property
    def tokens_per_core_s(self) -> float:
        """Encoded tokens one core's CPU stages yield per second."""
        return self.encoded_tokens / max(self.cpu_busy_s, 1e-9)


@dataclasses.dataclass(frozen=True)
class EncoderRate:
    tokens_per_chip_s: float
    source: str  # how it was obtained, for the printout
    cpu_host: bool = False  # measured on a host without an accelerator: not a chip's rate


def sample_cpu_stages(
    locations: list[str],
    sample_docs: int,
    model: str | None,
    chunking: ChunkingConfig,
    fields: ShardFields,
    extract: ExtractConfig = ExtractConfig(),
) -> CpuSample:
    """Runs the CPU stages in this process over about `sample_docs` documents spread over the input.

    PDFs go through the extraction sandbox as in the job, so its cost (and its
    child's start-up, once) is part of the extract stage's time.
    """
    sample, inputs = sample_inputs(locations, sample_docs, leave_out=output_file)
    if not sample:
        raise InputError(f"no documents under {redact(', '.join(locations))}")
    tally = RunTally()
    chunker = ChunkBlock(model, chunking, record=tally.record)
    windows, documents = [], 0
    listing = pa.table(
        {"uri": [f.uri for f in sample], "kind": [f.kind for f in sample], "size": [f.size for f in sample]}
    )
    for block in work_blocks(record_groups(listing, group_size=len(sample))):
        for docs in extract_block(block, fields, extract, record=tally.record):
            chunks = chunker(docs)
            documents += docs.num_rows
            ok = pa.compute.is_null(chunks.column("error_type"))
            windows += chunks.filter(ok).column("token_ids").to_pylist()
        if documents >= sample_docs:
            break
    return CpuSample(documents, inputs, tally.stages(), windows)


def measure_encoder(model: str | None, cfg: EncoderConfig, windows: list[list[int]]) -> EncoderRate:
    """Tokens per second per device of the encoder on this process's devices, compiled before timing."""
    encoder = Encoder(model_dir.resolve(model), cfg)
    encoder.encode_ids(windows)
    tokens, started = 0, time.perf_counter()
    while time.perf_counter() - started < ENCODER_SECONDS:
        tokens += encoder.encode_ids(windows)[1].real_tokens
    rate = tokens / (time.perf_counter() - started)
    devices = encoder.mesh.devices.size
    platform = encoder.mesh.devices.flat[0].platform
    if platform == "cpu":
        # One XLA device per core (pipeline.encode.cpu_devices): the "chip" is the whole host.
        source = f"measured here on the CPU ({jax.local_device_count()} device(s), all cores)"
        return EncoderRate(rate, source, cpu_host=True)
    return EncoderRate(rate / devices, f"measured here on {devices} {platform} device(s)")


def render(sample: CpuSample, encoder: EncoderRate, headroom: float) -> str:
    """The plan: per-stage rates, cores per chip, and the assumptions behind each number."""
    per_core = sample.tokens_per_core_s
    cores = encoder.tokens_per_chip_s / max(per_core, 1e-9)
    needed = cores_per_chip(sample, encoder, headroom)
    lines = [
        f"sample: {sample.documents} documents of {sample.inputs} inputs, "
        f"{sample.encoded_tokens:,} encoded tokens "
        f"({sample.encoded_tokens / max(sample.documents, 1):,.0f} per document)",
        "CPU stages on one core (this process, the job's own code):",
    ]
    for stage in CPU_STAGES:
        totals = sample.table.stages.get(stage)
        if totals is None:
            continue
        unit = STAGE_UNITS[stage]
        lines.append(
            f"  {stage:9s} {totals.rate(unit):>12,.1f} {unit}/s"
            f"   {totals.busy_s / max(sample.cpu_busy_s, 1e-9):5.1%} of the CPU time"
        )
    lines += [
        f"  together  {per_core:>12,.0f} encoded tokens/s per core",
        f"encoder: {encoder.tokens_per_chip_s:,.0f} tokens/s per chip ({encoder.source})",
        f"cores per chip: {encoder.tokens_per_chip_s:,.0f} / {per_core:,.0f} = {cores:.2f}; "
        f"with {headroom:g}x headroom: {needed}",
        f"  a host of N chips needs N x {needed} cores for the CPU stages "
        f"+ {ACCELERATOR_HOST_CPUS} its encoder actor reserves; what its hosts lack, CPU worker nodes add",
        "assumptions:",
        "  - the sample is like the corpus: the same mix of PDFs and text, pages per PDF and tokens per document",
        "  - CPU stages scale linearly with cores: each worker is a process of its own and shares nothing",
        "  - one core here is like one core there; vCPUs of cloud hosts are often hyperthreads, worth less",
        "  - reading is timed as CPU work; on object storage it is mostly waiting, overlapped by side-by-side fetches",
        "  - writing Parquet is left out: it is a small share of busy time in measured jobs (see _SUCCESS stages)",
        f"  - {headroom:g}x headroom covers slow documents and uneven blocks, so chips do not wait on stragglers",
    ]
    if encoder.cpu_host:
        lines.append(
            "  - no accelerator here: the encoder rate is this CPU's. Pass --encoder-tokens-per-s with your chip's "
            "(a run's _SUCCESS: stages.encode.tokens_per_busy_s, per encoder actor, over its chips)"
        )
    return "\n".join(lines)


def cores_per_chip(sample: CpuSample, encoder: EncoderRate, headroom: float) -> int:
    """CPU cores (one worker process each) that keep one chip fed, rounded up."""
    cores = headroom * encoder.tokens_per_chip_s / max(sample.tokens_per_core_s, 1e-9)
    # A quotient's last bit is no extra core: (r * 10) / r comes out 10.000000000000002 for some rates r.
    return math.ceil(round(cores, 9))
