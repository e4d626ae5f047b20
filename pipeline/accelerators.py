"""Where encoder actors run: one per TPU host, one per GPU, or one per CPU node.

On a TPU slice each encoder actor owns every chip of its host (JAX addresses a
host's chips from one process) and builds its mesh over them; hosts work
data-parallel through Ray and never talk to each other. `plan_encoders` decides
from the cluster's node list alone, so it is testable without a cluster, and it
fails fast when the requested accelerator is absent instead of leaving actors
pending forever.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from pathlib import Path

from pipeline.errors import ConfigError

ACCELERATORS = ("auto", "tpu", "gpu", "cpu")
DEFAULT_COMPILE_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "docembed" / "jax"


@dataclasses.dataclass(frozen=True)
class EncoderPlacement:
    kind: str  # "tpu", "gpu" or "cpu"
    actors: int
    ray_remote_args: dict  # resources each encoder actor requests

    def describe(self) -> str:
        return f"{self.actors} {self.kind} encoder actor(s), each requesting {self.ray_remote_args}"


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
    tpu_hosts = [n["Resources"]["TPU"] for n in nodes if n["Resources"].get("TPU", 0) > 0]
    gpus = int(sum(n["Resources"].get("GPU", 0) for n in nodes))
    kind = requested if requested != "auto" else "tpu" if tpu_hosts else "gpu" if gpus else "cpu"
    if kind == "tpu":
        if not tpu_hosts:
            raise ConfigError("--accelerator tpu, but no node of this Ray cluster has a TPU resource")
        # A slice's hosts have the same chip count; the smallest fits on all of them.
        return EncoderPlacement("tpu", len(tpu_hosts), {"resources": {"TPU": min(tpu_hosts)}, "num_cpus": 1})
    if kind == "gpu":
        if not gpus:
            raise ConfigError("--accelerator gpu, but no node of this Ray cluster has a GPU")
        return EncoderPlacement("gpu", gpus, {"num_gpus": 1, "num_cpus": 1})
    return EncoderPlacement("cpu", cpu_actors or max(1, len(nodes)), {"num_cpus": cpu_per_actor})


# This process's persistent-cache lookups, from JAX's monitoring events: a restarted
# actor that reuses the cache shows hits and no misses (each miss compiles afresh).
_CACHE_EVENTS = {"/jax/compilation_cache/cache_hits": "hits", "/jax/compilation_cache/cache_misses": "misses"}
_cache_counts: collections.Counter = collections.Counter()
_counting = False  # listeners cannot be removed: register one per process


def _count_cache_event(event: str, **_) -> None:
    if event in _CACHE_EVENTS:
        _cache_counts[_CACHE_EVENTS[event]] += 1


def compilation_cache_counts() -> dict[str, int]:
    """Persistent compilation cache hits and misses in this process since the cache was enabled."""
    return {"hits": _cache_counts["hits"], "misses": _cache_counts["misses"]}


def enable_compilation_cache(path: str | Path | None) -> None:
    """Turns on JAX's persistent compilation cache, so a restarted actor loads rather than compiles."""
    if path is None:
        return
    import jax

    global _counting
    if not _counting:
        jax.monitoring.register_event_listener(_count_cache_event)
        _counting = True
    Path(path).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Every program counts: the encoder compiles few, and each costs seconds.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
