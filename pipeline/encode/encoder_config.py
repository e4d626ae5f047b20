"""What the encoder is asked for: its config, its mesh, the dtype it runs, checked against a model.

Without JAX: the job's driver builds and checks all of this before any
encoder starts, and never imports JAX (it would cost the driver seconds of
start-up and a hundred MB); `pipeline.encode.encoder` runs it.
"""

from __future__ import annotations

import dataclasses
import logging
import math

from kernels import encoders
from kernels.attention import IMPLS, RELATIVE_BIAS_IMPLS, runs_on
from kernels.compute_dtype import DTYPES, choose_dtype
from kernels.dense import IMPLS as DENSE_IMPLS
from kernels.dense import unavailable
from kernels.sharding_rules import MESH_AXES, ShardingRules
from pipeline.checked import check_types
from pipeline.encode.model_dir import ModelSpec
from pipeline.errors import ConfigError

log = logging.getLogger("docembed")

# Per device at full length. On CPU, with one device per core
# (pipeline.encode.cpu_devices), small batches keep a layer's activations in
# cache: on 2 Intel Xeon cores 2 and 4 rows per device did 2-4% more tokens/s
# than 8, and 16 was 15% slower (docs/accelerators.md); 4 keeps a job's calls
# at 128 windows on 2 cores. Accelerators want enough rows to fill their matrix units.
DEFAULT_BATCH_SIZE = {"cpu": 4, "gpu": 64, "tpu": 64}

MeshShape = tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    # Compute dtype asked: "float32" or "bfloat16". What runs is `compute_dtype`'s
    # choice: float32 where bfloat16 cannot pay (a CPU without bfloat16 dot instructions).
    # float32 is the default everywhere: docs/accelerators.md says why.
    dtype: str = "float32"
    attention: str = "auto"  # an implementation name from kernels.attention
    dense: str = "auto"  # the projections' implementation: a name from kernels.dense
    # Rows per device (data shard) in a batch at full length; with packing off,
    # shorter buckets hold proportionally more. None: the platform's default
    # (DEFAULT_BATCH_SIZE).
    batch_size: int | None = None
    # Several sequences per row of the model's window (see pipeline.encode.batching);
    # False pads each sequence alone into power-of-two length buckets.
    packing: bool = True
    # Mesh axis sizes, e.g. (("data", 4), ("model", 2)); see `parse_mesh`. An
    # axis left out: model 1, data every local device that model leaves.
    mesh: MeshShape = ()
    # Which mesh axis each logical axis of the model is split over.
    sharding: ShardingRules = ShardingRules()
    # The longest sequence, special tokens included, up to the model's positions.
    # None: the model's max_seq_length (sentence_bert_config.json).
    max_tokens: int | None = None
    # Matryoshka truncation: the first `dim` dimensions, re-normalised. None: the model's (ModelSpec.dim).
    dim: int | None = None

    def __post_init__(self):
        _check_types(self)
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.attention not in ("auto", *IMPLS):
            known = ", ".join(("auto", *IMPLS))
            raise ConfigError(f"unknown attention implementation {self.attention!r}; known: {known}")
        if self.dense not in ("auto", *DENSE_IMPLS):
            known = ", ".join(("auto", *DENSE_IMPLS))
            raise ConfigError(f"unknown dense implementation {self.dense!r}; known: {known}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.dim is not None and self.dim < 1:
            raise ConfigError(f"--dim must be at least 1, got {self.dim}")
        _check_mesh(self.mesh)

    def running_on(self, platform: str) -> EncoderConfig:
        """This config with the dtype an encoder on `platform` runs (see `compute_dtype`)."""
        return dataclasses.replace(self, dtype=compute_dtype(self.dtype, platform))


def _check_types(cfg: EncoderConfig) -> None:
    """TypeError naming the first option of the wrong type (`check_types`); the mesh's says what makes one."""
    pairs = isinstance(cfg.mesh, tuple) and all(
        isinstance(pair, tuple) and tuple(map(type, pair)) == (str, int) for pair in cfg.mesh
    )
    if not pairs:
        raise TypeError(
            f"encoder option mesh must be (axis, size) pairs, as parse_mesh('data=2') gives, got {cfg.mesh!r}"
        )
    check_types(cfg, "encoder option")


def parse_mesh(text: str) -> MeshShape:
    """'data=4,model=2' -> (('data', 4), ('model', 2)), the form of `EncoderConfig.mesh`."""
    pairs = []
    for item in text.split(","):
        name, eq, size = (part.strip() for part in item.partition("="))
        if not eq or not size.isdigit():
            raise ConfigError(f"mesh must look like data=N,model=M; cannot read {item.strip()!r} in {text!r}")
        pairs.append((name, int(size)))
    _check_mesh(tuple(pairs))
    return tuple(pairs)


def format_mesh(mesh: MeshShape) -> str:
    return ",".join(f"{name}={size}" for name, size in mesh)


def _check_mesh(mesh: MeshShape) -> None:
    names = [name for name, _ in mesh]
    for name, size in mesh:
        if name not in MESH_AXES:
            raise ConfigError(f"mesh axis {name!r} is not one of {', '.join(MESH_AXES)}")
        if size < 1:
            raise ConfigError(f"mesh axis {name} must have size at least 1, got {size}")
    if len(set(names)) != len(names):
        raise ConfigError(f"mesh {format_mesh(mesh)} names an axis twice")


def mesh_shape(mesh: MeshShape, n_devices: int, holder: str = "this process") -> dict[str, int]:
    """Fills in the axes `mesh` leaves out and checks that `holder` has the devices.

    The driver calls it too, with each encoder actor's device count, before anything is written."""
    if n_devices < 1:  # else a mesh of data=0 would pass, and fail as batches of no rows
        raise ConfigError(f"{holder} has no devices to lay a mesh over")
    shape = dict(mesh)
    model = shape.setdefault("model", 1)
    if "data" not in shape:
        if n_devices % model:
            raise ConfigError(f"mesh model={model} does not divide the {n_devices} local devices; give data= as well")
        shape["data"] = n_devices // model
    needed = math.prod(shape.values())
    if needed > n_devices:
        mesh_text = format_mesh(tuple(shape.items()))
        raise ConfigError(f"mesh {mesh_text} needs {needed} devices; {holder} has {n_devices}")
    return shape


def check_mesh(spec: ModelSpec, cfg: EncoderConfig, n_devices: int, holder: str = "this process") -> dict[str, int]:
    """`cfg`'s mesh over `holder`'s `n_devices` (`mesh_shape`), checked against the model: each mesh axis must
    divide the heads, K/V heads and MLP split over it.

    The driver asks it for each encoder actor before anything is written; an Encoder for its own devices."""
    shape = mesh_shape(cfg.mesh, n_devices, holder)
    try:
        cfg.sharding.check_divisible(spec.arch.split_axes, shape)
    except ValueError as e:
        mesh = format_mesh(tuple((axis, shape[axis]) for axis in MESH_AXES))
        raise ConfigError(f"mesh {mesh} does not fit model {spec.model_id}: {e}") from None
    return shape


def check_attention(attention: str, platform: str, holder: str, spec: ModelSpec) -> None:
    """ConfigError where `attention` cannot run on `platform` (`holder` says whose it is), or cannot add model
    `spec`'s relative position bias (MPNet's, T5's), naming what can.

    The driver asks it for the encoder actors' platform before anything is written; an Encoder for its own."""
    if not runs_on(attention, platform):
        runnable = ", ".join(name for name in ("auto", *IMPLS) if runs_on(name, platform))
        raise ConfigError(f"--attention {attention} cannot run on {holder}; these can: {runnable}")
    if spec.arch.relative_buckets is not None and attention not in ("auto", *RELATIVE_BIAS_IMPLS):
        runnable = ", ".join(name for name in ("auto", *IMPLS) if name in ("auto", *RELATIVE_BIAS_IMPLS))
        model = f"model {spec.model_id} ({spec.arch.family})"
        raise ConfigError(
            f"--attention {attention} adds no relative position bias, which {model} has; these can: {runnable}"
        )


def check_dense(cfg: EncoderConfig, platform: str, holder: str) -> None:
    """ConfigError where `cfg`'s dense implementation cannot run on `platform` (`holder` says whose it is) for
    the dtype asked, named as the user gave it: onednn multiplies bfloat16 weights on a CPU.

    Without JAX, so the driver asks it for the encoder actors before anything is written; an Encoder for its own."""
    if cfg.dense != "onednn":
        return
    if platform != "cpu":
        why = f"it runs on a CPU only, not on {platform}"
    elif cfg.dtype != "bfloat16":
        why = f"it multiplies bfloat16 weights: add --dtype bfloat16 (asked {cfg.dtype}) or use --dense auto"
    elif (choice := choose_dtype(cfg.dtype, platform)).changed:
        why = f"--dtype bfloat16 runs as {choice.dtype} there: {choice.reason}"
    else:
        why = unavailable("onednn")
    if why is not None:
        raise ConfigError(f"--dense onednn cannot run on {holder}: {why}")


_warned: set[tuple[str, str]] = set()


def compute_dtype(requested: str, platform: str) -> str:
    """The dtype an encoder on `platform` runs for `requested` (kernels.compute_dtype), with one
    warning per process when it is not the one asked. The job's driver asks it for the encoders'
    platform before anything is written, so that the output's fingerprint names what runs."""
    choice = choose_dtype(requested, platform)
    if choice.changed and (requested, platform) not in _warned:
        _warned.add((requested, platform))
        log.warning("docembed: dtype %s runs as %s: %s", requested, choice.dtype, choice.reason)
    return choice.dtype


def check_shape(spec: ModelSpec, cfg: EncoderConfig) -> tuple[int, int]:
    """The window and output dimension `cfg` asks of this model, checked against it."""
    window = spec.window(cfg.max_tokens)
    try:
        encoders.check_window(spec.arch, window)
    except encoders.WindowTooLong as e:
        raise ConfigError(f"--max-tokens {window}: {e}") from None
    if cfg.dim is not None and cfg.dim > spec.dim:
        raise ConfigError(f"--dim {cfg.dim} is more than model {spec.model_id}'s {spec.dim} dimensions")
    return window, cfg.dim or spec.dim
