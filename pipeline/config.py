"""The job's configuration, and the capacity planner's: frozen trees, validated before any work starts."""

from __future__ import annotations

import dataclasses
import math

from pipeline.checked import check_types
from pipeline.encode import model_dir
from pipeline.encode.compile_cache import DEFAULT_COMPILE_CACHE
from pipeline.encode.encoder_config import EncoderConfig, check_shape
from pipeline.encode.model_dir import ModelSpec
from pipeline.errors import ConfigError
from pipeline.extract.sandbox import ExtractConfig
from pipeline.io.uris import redact, scheme_of
from pipeline.text.chunking import DEFAULT_OVERLAP, ChunkingConfig

# What the job prints while it runs: see pipeline.run.console.
VERBOSITY = ("quiet", "normal", "verbose")


@dataclasses.dataclass(frozen=True)
class Resources:
    """CPU encoder actors. (Accelerator encoders and the CPU stages are sized by
    pipeline.encode.placement.place_encoders from the cluster.)

    A CPU encoder actor requests one CPU although its XLA devices, one per core
    (pipeline.encode.cpu_devices), run on every core of its node: the CPU stages
    share the rest of the node's accounting and overlap with encoding instead of
    waiting for it.
    """

    encode_cpus: float = 1.0  # per CPU encoder actor
    encode_actors: int | None = None  # CPU encoder actors; None: one per node

    def __post_init__(self):
        check_types(self, "Resources field")
        if self.encode_actors is not None and self.encode_actors < 1:
            raise ConfigError(f"--encoders must be at least 1, got {self.encode_actors}")


@dataclasses.dataclass(frozen=True)
class JobConfig:
    inputs: tuple[str, ...]
    output: str
    model: str | None = None  # model directory, URI or hub id; None for the bundled default
    max_tokens: int | None = None  # window size incl. special tokens; None for the model's max_seq_length
    overlap: int = DEFAULT_OVERLAP
    chunking: str = "boundaries"  # where chunks end: pipeline.text.chunking.CHUNKING_MODES
    # --prompt NAME|TEXT: a prompt name of the model's or the text itself; None: the model's default prompt, if any.
    prompt: str | None = None
    encoder: EncoderConfig = EncoderConfig()
    extract: ExtractConfig = ExtractConfig()
    resources: Resources = Resources()
    accelerator: str = "auto"  # "auto", "tpu", "gpu" or "cpu": see pipeline.encode.placement
    compile_cache: str | None = str(DEFAULT_COMPILE_CACHE)  # None: compile afresh in every actor
    profile: str | None = None  # directory for JAX profiler traces of the encoder actors
    overwrite: bool = False
    group_size: int = 64  # single-document files committed together (a shard is a group of its own)
    id_field: str = "id"  # a jsonl/parquet shard row's document id; "": the row's position (line:N, row:N)
    text_field: str = "text"  # a jsonl/parquet shard row's text
    verbosity: str = "normal"  # "quiet", "normal" or "verbose": what the job prints (pipeline.run.console)

    def __post_init__(self):
        check_types(self, "JobConfig field")
        if not self.inputs:
            raise ConfigError("at least one --input is required")
        if not self.output:
            raise ConfigError("--output is required")
        if scheme_of(self.output) in ("http", "https"):  # fsspec reads them, and fails the first write
            raise ConfigError(f"--output {redact(self.output)}: HTTP is read-only; write to a path, s3:// or gs://")
        if self.group_size < 1:
            raise ConfigError(f"--group-size must be at least 1, got {self.group_size}")
        if self.verbosity not in VERBOSITY:
            raise ConfigError(f"verbosity must be one of {', '.join(VERBOSITY)}, got {self.verbosity!r}")
        if not self.text_field:
            raise ConfigError("--text-field must not be empty")


@dataclasses.dataclass(frozen=True)
class CapacityConfig:
    """The capacity planner's (pipeline.run.capacity): the job's options that shape what its CPU stages and the
    encoder do, and the sample."""

    inputs: tuple[str, ...]
    model: str | None = None
    max_tokens: int | None = None
    overlap: int = DEFAULT_OVERLAP
    chunking: str = "boundaries"  # where chunks end: pipeline.text.chunking.CHUNKING_MODES
    prompt: str | None = None  # as JobConfig's: its tokens are part of every chunk
    id_field: str = "id"
    text_field: str = "text"
    extract: ExtractConfig = ExtractConfig()
    encoder: EncoderConfig = EncoderConfig()
    sample_docs: int = 200  # documents run through the CPU stages, spread over the input
    encoder_tokens_per_s: float | None = None  # the target chip's rate; None: measured on this machine
    headroom: float = 1.25  # margin over the measured need

    def __post_init__(self):
        check_types(self, "CapacityConfig field")
        if not self.inputs:
            raise ConfigError("at least one --input is required")
        if self.sample_docs < 1:
            raise ConfigError(f"--sample-docs must be at least 1, got {self.sample_docs}")
        # `not 0 < x < inf` refuses nan too, which every comparison calls false.
        if self.encoder_tokens_per_s is not None and not 0 < self.encoder_tokens_per_s < math.inf:
            raise ConfigError(f"--encoder-tokens-per-s must be positive, got {self.encoder_tokens_per_s:g}")
        # A margin over the measured need: below 1 it would plan fewer cores than measured.
        if not 1 <= self.headroom < math.inf:
            raise ConfigError(f"--headroom must be at least 1, got {self.headroom:g}")


def chunks_and_encoder(spec: ModelSpec, cfg: JobConfig | CapacityConfig) -> tuple[ChunkingConfig, EncoderConfig]:
    """How `cfg` cuts chunks for the model `spec`, and its encoder at the chunks' window (`--max-tokens`, else
    the model's), both checked against the model: the job's stages and the capacity planner run these."""
    prompt = spec.prompt_text(cfg.prompt)
    chunking = ChunkingConfig(
        max_tokens=spec.window(cfg.max_tokens), overlap=cfg.overlap, prompt=prompt, mode=cfg.chunking
    )
    encoder = dataclasses.replace(cfg.encoder, max_tokens=chunking.max_tokens)
    check_shape(spec, encoder)
    chunking.validate(model_dir.tokenizer(spec.path, prompt=prompt).n_special, spec.arch.max_tokens)
    return chunking, encoder
