"""The driver's allocators: glibc's arenas capped before its threads start, and Arrow's buffers from glibc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.run.allocator import DRIVER_ARENAS

# Six threads hold memory at once while glibc prints its arenas (malloc_stats, to stderr).
PROBE = """
import ctypes, sys, threading
from pipeline.run.allocator import limit_arenas
if sys.argv[1] == "capped":
    assert limit_arenas()
barrier = threading.Barrier(7)
def hold():
    held = [bytearray(64 << 10) for _ in range(4)]
    barrier.wait()
    barrier.wait()
threads = [threading.Thread(target=hold) for _ in range(6)]
for t in threads:
    t.start()
barrier.wait()
ctypes.CDLL("libc.so.6").malloc_stats()
barrier.wait()
"""


def _arenas(mode: str) -> int:
    repo = Path(__file__).resolve().parents[3]
    run = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=repo, capture_output=True, text=True, check=True)
    return sum(line.startswith("Arena ") for line in run.stderr.splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")
def test_threads_started_after_the_cap_share_its_arenas():
    assert _arenas("uncapped") > DRIVER_ARENAS  # else the probe shows nothing
    assert _arenas("capped") == DRIVER_ARENAS


ARROW_PROBE = """
import pyarrow as pa
from pipeline.run.allocator import arrow_on_malloc
before = pa.default_memory_pool().backend_name
arrow_on_malloc()
system = pa.system_memory_pool()
held = system.bytes_allocated()
table = pa.table({"uri": [f"s3://bucket/file-{i}.pdf" for i in range(10_000)]})
print(before, pa.default_memory_pool().backend_name, system.bytes_allocated() - held >= table.nbytes)
"""


def test_arrow_buffers_come_from_the_system_pool_after_the_switch():
    repo = Path(__file__).resolve().parents[3]
    run = subprocess.run([sys.executable, "-c", ARROW_PROBE], cwd=repo, capture_output=True, text=True, check=True)
    before, after, counted = run.stdout.split()
    assert before != "system"  # else the probe shows nothing: Arrow's default here is mimalloc or jemalloc
    assert (after, counted) == ("system", "True")
