"""How many XLA CPU devices an encoder process lays its mesh over: one per core it may use, by default.

XLA runs one CPU program over a pool of intra-op threads, and between the
matmuls (elementwise fusions, attention's passes over score tiles) one program
leaves cores idle. One CPU device per core, the batch's rows split over the
mesh's `data` axis, runs that many programs side by side and keeps the cores
busy: on 2 Intel Xeon cores 1.29x the tokens/s of one device, with less CPU time
per token (docs/accelerators.md).

The count is chosen once per process, before JAX's backend starts, and a count
the user chose is never overridden: `JAX_NUM_CPU_DEVICES` (JAX's own switch,
also `jax.config.update("jax_num_cpu_devices", n)`) or XLA_FLAGS'
`--xla_force_host_platform_device_count`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import math
import os
import re

from pipeline.errors import ConfigError

log = logging.getLogger("docembed")

# At most this many devices by default. Each device holds its own copy of the
# weights, and a batch is rows-per-device times devices, so a 64-core host would
# otherwise hold 64 copies and wait for 64 devices' rows per call. Measured only
# up to 2 cores (docs/accelerators.md); a many-core host should try counts with
# JAX_NUM_CPU_DEVICES.
MAX_CPU_DEVICES = 8


def forced_cpu_devices(environ=os.environ) -> int | None:
    """The CPU device count the user chose in `environ`, or None: JAX_NUM_CPU_DEVICES wins over
    XLA_FLAGS' --xla_force_host_platform_device_count, as in JAX.

    ConfigError where the count is not a positive whole number: the driver asks before anything is written,
    where an empty or 0 count would otherwise fail in JAX or in Ray Data with a traceback."""
    if "JAX_NUM_CPU_DEVICES" in environ:
        name, count = "JAX_NUM_CPU_DEVICES", environ["JAX_NUM_CPU_DEVICES"]
    else:
        forced = re.search(r"--xla_force_host_platform_device_count=(\S*)", environ.get("XLA_FLAGS", ""))
        if forced is None:
            return None
        name, count = "XLA_FLAGS' --xla_force_host_platform_device_count", forced.group(1)
    if not re.fullmatch(r"\s*[0-9]+\s*", count) or int(count) < 1:
        raise ConfigError(f"{name} must be a positive whole number of CPU devices, got {count!r}")
    return int(count)


def cpu_device_count(cpus: float | None = None, environ=os.environ) -> int:
    """CPU devices for an encoder: the user's count if forced, else one per CPU, at most MAX_CPU_DEVICES.

    `cpus`: a Ray encoder actor's CPUs (its share of a node: see
    pipeline.encode.placement), counted as Ray counts CPUs for OMP_NUM_THREADS
    (the floor, at least 1); None: this process's, its affinity mask.
    """
    forced = forced_cpu_devices(environ)
    if forced is not None:
        return forced
    cpus = len(os.sched_getaffinity(0)) if cpus is None else math.floor(cpus)
    return max(1, min(cpus, MAX_CPU_DEVICES))


def use_cpu_devices(count: int | None = None) -> None:
    """Asks JAX for `count` CPU devices (default `cpu_device_count()`), unless the user chose a count,
    JAX may run on an accelerator here, or its backend has already started (then what it has is kept)."""
    import jax  # here, in the encoder's process: the driver counts devices (`cpu_device_count`) without JAX

    config = jax.config
    if (
        forced_cpu_devices() is not None
        or config.jax_num_cpu_devices >= 0
        or _accelerator_possible(config.jax_platforms)
    ):
        return
    count = cpu_device_count() if count is None else count
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # the backend has started: its device count is fixed for this process
        log.debug("docembed: JAX has started with %d CPU device(s); %d not applied", jax.local_device_count(), count)


def _accelerator_possible(platforms: str | None) -> bool:
    """Whether JAX may pick a GPU or TPU in this process: `platforms` (JAX's jax_platforms) names one first,
    or, with no platform named, a PJRT plugin (CUDA, ROCm) or libtpu is installed. Such a process is left alone."""
    if platforms:
        return platforms.split(",")[0] != "cpu"
    return bool(importlib.metadata.entry_points(group="jax_plugins")) or importlib.util.find_spec("libtpu") is not None
