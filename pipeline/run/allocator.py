"""The driver's C allocator: two glibc arenas, so that what its threads free is used again, not kept.

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
"""

from __future__ import annotations

import ctypes

M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
DRIVER_ARENAS = 2


def limit_arenas(arenas: int = DRIVER_ARENAS) -> bool:
    """Caps this process's glibc arenas for the threads started from now on; False where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): no per-thread arenas to cap
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))
