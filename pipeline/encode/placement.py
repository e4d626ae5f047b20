"""Where encoder actors run: one per TPU host, one per GPU, or one per CPU node.

On a TPU slice each encoder actor owns every chip of its host (JAX addresses a
host's chips from one process) and builds its mesh over them; hosts work
data-parallel through Ray and never talk to each other. `place_encoders` decides
from the cluster's node list alone, so it is testable without a cluster, and it
fails fast when the requested accelerator is absent instead of leaving actors
pending forever. `check_encoders` then holds the encoder's options (mesh,
attention, dense) to the model and the devices the placement gives each actor,
also before anything is written.
"""

from __future__ import annotations

import dataclasses
import math

from pipeline.encode.cpu_devices import cpu_device_count
from pipeline.encode.encoder_config import EncoderConfig, check_attention, check_dense, check_mesh
from pipeline.encode.model_dir import ModelSpec
from pipeline.errors import ConfigError

ACCELERATORS = ("auto", "tpu", "gpu", "cpu")

# CPUs an accelerator's encoder actor reserves on its host: one for its Python
# (packing batches, converting results), one for JAX's transfer and dispatch
# threads. Ray never schedules CPU stages onto reserved CPUs, so a PDF-heavy
# corpus cannot starve the chips of their feeder.
ACCELERATOR_HOST_CPUS = 2


@dataclasses.dataclass(frozen=True)
class EncoderPlacement:
    kind: str  # "tpu", "gpu" or "cpu"
    actors: int
    ray_remote_args: dict  # resources each encoder actor requests
    devices_per_actor: int  # JAX devices each encoder actor lays its mesh over
    # CPUs each CPU-stage worker (extraction, tokeniser, writer) requests. Beside
    # accelerators, a whole core: no stage oversubscribes the cores the encoders
    # left, and the stages spill onto CPU-only nodes when a host's cores are
    # taken. On a CPU-only run the encoder spreads over every core anyway, and
    # half a CPU lets the stages overlap with it.
    stage_cpus: float
    # The CPU stages' actor pool autoscales from 1 up to this: every CPU slot the
    # encoders and the writers leave. (Ray Data fuses the extraction tasks into
    # this pool's actors, so it is extraction's width too.)
    max_cpu_actors: int = 1
    # Writer actors, one per node that runs encoders: the Parquet writes of a
    # node's encoder calls take a small share of a core, and a long-lived writer
    # starts with the job rather than in the middle of it (pipeline.output.sink.WriteBlock).
    writers: int = 1

    def describe(self) -> str:
        return (
            f"{self.actors} {self.kind} encoder actor(s), each requesting {self.ray_remote_args}; "
            f"CPU stages {self.stage_cpus:g} CPU per worker, up to {self.max_cpu_actors} actor(s), "
            f"{self.writers} writer(s)"
        )


def _alive(nodes: list[dict]) -> list[dict]:
    return [n for n in nodes if n.get("Alive", True)]


def place_encoders(
    requested: str, nodes: list[dict], *, cpu_actors: int | None, cpu_per_actor: float
) -> EncoderPlacement:
    """Encoder actors for the accelerator `requested` on a cluster of `nodes` (as `ray.nodes()` lists them),
    and how wide the CPU stages beside them may grow.

    `cpu_actors` overrides the count on CPU (default: one per node, since one
    actor's XLA devices already cover all of a node's cores).
    """
    if requested not in ACCELERATORS:
        raise ConfigError(f"--accelerator must be one of {', '.join(ACCELERATORS)}, got {requested!r}")
    nodes = _alive(nodes)
    tpu_hosts = [n["Resources"]["TPU"] for n in nodes if n["Resources"].get("TPU", 0) > 0]
    gpus = int(sum(n["Resources"].get("GPU", 0) for n in nodes))
    kind = requested if requested != "auto" else "tpu" if tpu_hosts else "gpu" if gpus else "cpu"
    if kind == "tpu":
        if not tpu_hosts:
            raise ConfigError("--accelerator tpu, but no node of this Ray cluster has a TPU resource")
        # A slice's hosts have the same chip count; the smallest fits on all of them.
        # Ray counts resources in floats (4.0): devices are a whole number.
        chips = int(min(tpu_hosts))
        args = {"resources": {"TPU": chips}, "num_cpus": ACCELERATOR_HOST_CPUS}
        placement = EncoderPlacement("tpu", len(tpu_hosts), args, chips, stage_cpus=1.0, writers=len(tpu_hosts))
    elif kind == "gpu":
        if not gpus:
            raise ConfigError("--accelerator gpu, but no node of this Ray cluster has a GPU")
        args = {"num_gpus": 1, "num_cpus": ACCELERATOR_HOST_CPUS}
        gpu_hosts = sum(1 for n in nodes if n["Resources"].get("GPU", 0) > 0)
        placement = EncoderPlacement("gpu", gpus, args, 1, stage_cpus=1.0, writers=gpu_hosts)
    else:
        actors = cpu_actors or max(1, len(nodes))
        devices = _cpu_actor_devices(nodes, actors)
        args = {"num_cpus": cpu_per_actor}
        placement = EncoderPlacement("cpu", actors, args, devices, stage_cpus=0.5, writers=min(actors, len(nodes)))
    return _size_cpu_stages(placement, sum(n["Resources"].get("CPU", 0) for n in nodes))


def _cpu_actor_devices(nodes: list[dict], actors: int) -> int:
    """XLA devices of a CPU encoder actor: one per core of its share of a node (pipeline.encode.cpu_devices).

    Its share, not the CPU it reserves: Ray's reservation is accounting that lets
    the CPU stages overlap with the encoder, while XLA's threads run on every core
    of the actor's process (they ignore the OMP_NUM_THREADS Ray sets). Actors
    spread evenly over the nodes; the smallest node bounds them all.
    """
    per_node = math.ceil(actors / max(1, len(nodes)))
    smallest = min((n["Resources"].get("CPU", 0) for n in nodes), default=0)
    return cpu_device_count(max(1.0, smallest / per_node))


def _size_cpu_stages(placement: EncoderPlacement, cluster_cpus: float) -> EncoderPlacement:
    """Sets how many CPU-stage actors fit beside the encoders and the writers, failing fast when not one
    does: Ray Data would otherwise wait forever for CPUs that never free up."""
    encoders = placement.actors * placement.ray_remote_args["num_cpus"]
    slots = int((cluster_cpus - encoders) // placement.stage_cpus)
    if slots < placement.writers + 1:
        needed = (placement.writers + 1) * placement.stage_cpus
        raise ConfigError(
            f"this Ray cluster has {cluster_cpus:g} CPUs; {placement.actors} {placement.kind} encoder actor(s) "
            f"reserve {encoders:g} and the CPU stages and writers need {needed:g} more"
        )
    return dataclasses.replace(placement, max_cpu_actors=slots - placement.writers)


def check_encoders(placement: EncoderPlacement, encoder: EncoderConfig, spec: ModelSpec) -> None:
    """Raises ConfigError when `encoder`'s mesh (for model `spec`), attention or dense implementation cannot run
    on the placed actors: the checks each Encoder makes of its own, made before anything is written.

    The batch size needs no check: it counts rows per data shard, so every batch
    splits evenly over any data axis (`pipeline.encode.batching`).
    """
    check_mesh(spec, encoder, placement.devices_per_actor, f"each {placement.kind} encoder actor")
    check_attention(encoder.attention, placement.kind, f"the {placement.kind} encoder actors", spec)
    check_dense(encoder, placement.kind, f"the {placement.kind} encoder actors")
