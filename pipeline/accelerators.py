"""Where encoder actors run: one per TPU host, one per GPU, or one per CPU node.

On a TPU slice each encoder actor owns every chip of its host (JAX addresses a
host's chips from one process) and builds its mesh over them; hosts work
data-parallel through Ray and never talk to each other. `plan_encoders` decides
from the cluster's node list alone, so it is testable without a cluster, and it
fails fast when the requested accelerator is absent instead of leaving actors
pending forever.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pipeline.errors import ConfigError

ACCELERATORS = ("auto", "tpu", "gpu", "cpu")
DEFAULT_COMPILE_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "docembed" / "jax"

# CPUs an accelerator's encoder actor reserves on its host: one for its Python
# (packing batches, converting results), one for JAX's transfer and dispatch
# threads. Ray never schedules CPU stages onto reserved CPUs, so a PDF-heavy
# corpus cannot starve the chips of their feeder.
ACCELERATOR_HOST_CPUS = 2
# Tokeniser actors scale with the cluster up to one per this many CPUs: the
# Rust tokeniser handles ~500k tokens/s per core, 10-100x what one core of PDF
# extraction yields (BENCHMARKS.md), so a few serve many extraction workers.
CPUS_PER_TOKENIZER = 8


@dataclasses.dataclass(frozen=True)
class EncoderPlacement:
    kind: str  # "tpu", "gpu" or "cpu"
    actors: int
    ray_remote_args: dict  # resources each encoder actor requests
    # CPUs each CPU-stage worker (extraction, tokeniser, writer) requests. Beside
    # accelerators, a whole core: no stage oversubscribes the cores the encoders
    # left, and the stages spill onto CPU-only nodes when a host's cores are
    # taken. On a CPU-only run the encoder spreads over every core anyway, and
    # half a CPU lets the stages overlap with it.
    stage_cpus: float
    max_tokenizers: int  # the tokeniser pool autoscales from 1 up to this
    devices_per_actor: int  # JAX devices each encoder actor lays its mesh over

    def describe(self) -> str:
        return (
            f"{self.actors} {self.kind} encoder actor(s), each requesting {self.ray_remote_args}; "
            f"CPU stages {self.stage_cpus} CPU per worker, up to {self.max_tokenizers} tokeniser actor(s)"
        )


def _alive(nodes: list[dict]) -> list[dict]:
    return [n for n in nodes if n.get("Alive", True)]


def plan_encoders(requested: str, nodes: list[dict], *, cpu_actors: int | None, cpu_per_actor: float) -> EncoderPlacement:
    """Encoder actors for the accelerator `requested` on a cluster of `nodes` (as `ray.nodes()` lists them).

    `cpu_actors` overrides the count on CPU (default: one per node, since XLA's
    CPU backend already spreads one program over all of a node's cores).
    """
    if requested not in ACCELERATORS:
        raise ConfigError(f"--accelerator must be one of {', '.join(ACCELERATORS)}, got {requested!r}")
    nodes = _alive(nodes)
    cpus = sum(n["Resources"].get("CPU", 0) for n in nodes)
    tokenizers = max(1, int(cpus // CPUS_PER_TOKENIZER))
    tpu_hosts = [n["Resources"]["TPU"] for n in nodes if n["Resources"].get("TPU", 0) > 0]
    gpus = int(sum(n["Resources"].get("GPU", 0) for n in nodes))
    kind = requested if requested != "auto" else "tpu" if tpu_hosts else "gpu" if gpus else "cpu"
    if kind == "tpu":
        if not tpu_hosts:
            raise ConfigError("--accelerator tpu, but no node of this Ray cluster has a TPU resource")
        # A slice's hosts have the same chip count; the smallest fits on all of them.
        args = {"resources": {"TPU": min(tpu_hosts)}, "num_cpus": ACCELERATOR_HOST_CPUS}
        return _check_cpus(EncoderPlacement("tpu", len(tpu_hosts), args, 1.0, tokenizers, min(tpu_hosts)), cpus)
    if kind == "gpu":
        if not gpus:
            raise ConfigError("--accelerator gpu, but no node of this Ray cluster has a GPU")
        placement = EncoderPlacement("gpu", gpus, {"num_gpus": 1, "num_cpus": ACCELERATOR_HOST_CPUS}, 1.0, tokenizers, 1)
        return _check_cpus(placement, cpus)
    # XLA shows a host's CPU as one device.
    placement = EncoderPlacement("cpu", cpu_actors or max(1, len(nodes)), {"num_cpus": cpu_per_actor}, 0.5, tokenizers, 1)
    return _check_cpus(placement, cpus)


def _check_cpus(placement: EncoderPlacement, cluster_cpus: float) -> EncoderPlacement:
    """Fails fast when the encoders leave no room for a tokeniser actor and an extraction task:
    Ray Data would otherwise wait forever for CPUs that never free up."""
    encoders = placement.actors * placement.ray_remote_args["num_cpus"]
    needed = encoders + 2 * placement.stage_cpus
    if cluster_cpus < needed:
        raise ConfigError(
            f"this Ray cluster has {cluster_cpus:g} CPUs; {placement.actors} {placement.kind} encoder actor(s) "
            f"reserve {encoders:g} and the CPU stages need {2 * placement.stage_cpus:g} more"
        )
    return placement


def enable_compilation_cache(path: str | Path | None) -> None:
    """Turns on JAX's persistent compilation cache, so a restarted actor loads rather than compiles."""
    if path is None:
        return
    import jax

    Path(path).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Every program counts: the encoder compiles few, and each costs seconds.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
