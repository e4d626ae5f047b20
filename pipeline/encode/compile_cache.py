"""JAX's persistent compilation cache: a restarted encoder actor loads its programs instead of compiling them."""

from __future__ import annotations

import collections
import os
from pathlib import Path

# JAX's own setting when the user made one, so that docembed's programs land where JAX's others do.
DEFAULT_COMPILE_CACHE = Path(
    os.environ.get("JAX_COMPILATION_CACHE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "docembed" / "jax"
)

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
