"""The driver's allocators: two glibc arenas, and Arrow's buffers from glibc too, so that what is freed is reused.

glibc gives each thread that allocates while others do an arena of its own, up
to eight per core, and keeps what is freed in an arena for that arena's next
allocations. The driver's threads are mostly Ray's (its core worker's event
loops, gRPC) and Ray Data's executor; their allocations are short-lived, and
in separate arenas their freed memory was neither reused by the others nor
given back. Measured on 2 cores (docs/scale.md): the driver's allocated memory
stayed flat over a run of PDFs while glibc's free memory in its arenas grew
about 50 KB per second of run, most of the driver's growth per PDF; with two
arenas it grew a tenth as fast. The driver computes nothing in parallel, so
the threads' sharing of two arenas costs nothing that was measured.

Arrow allocates from its own pool, mimalloc by default, which keeps freed
memory for Arrow's next buffers. The driver's Arrow work is the listing and
its record (Parquet parts of up to PART_ROWS entries), done in the run's
first seconds, so what mimalloc kept from it grew with the corpus and stayed
for the whole run. Measured (`jobs/embed.py` on 1,000 and 10,000 PDFs, 2-core
AMD EPYC Zen 4, the driver's anonymous RSS at 20 s): 144.6 and 149.3 MB with
mimalloc, 137.0 and 137.4 MB with the system pool (BENCHMARKS.md). The driver
computes nothing on Arrow, so mimalloc's speed is not missed there; the
stages' workers keep it.

Arrow C++ picks its default pool once, when pyarrow loads, and the Parquet
writer takes its buffers from that pool whatever pyarrow's own default says
(`pa.set_memory_pool`): written after a late switch, the record's parts still
came from mimalloc (8 MB at most for a part of 65,536 entries), which kept them.
So the driver's command switches before anything loads pyarrow
(`pipeline.cli.embed`), and `run()` switches again for a caller that loaded it
already, where only pyarrow's own allocations follow.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
DRIVER_ARENAS = 2
ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"  # read by Arrow C++ once, as pyarrow loads


def limit_arenas(arenas: int = DRIVER_ARENAS) -> bool:
    """Caps this process's glibc arenas for the threads started from now on; False where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): no per-thread arenas to cap
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def arrow_on_malloc() -> None:
    """Arrow's buffers allocated from now on in this process come from the C allocator (glibc's), not mimalloc:
    all of them when pyarrow is not loaded yet, pyarrow's own otherwise. A pool the user chose stays."""
    if os.environ.get(ARROW_POOL):
        return
    if "pyarrow" not in sys.modules:
        os.environ[ARROW_POOL] = "system"
        try:
            import pyarrow  # noqa: F401  (Arrow C++ reads the variable here)
        finally:
            # Unset again: the processes this one starts (Ray's, the stages' workers) keep mimalloc.
            del os.environ[ARROW_POOL]
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
