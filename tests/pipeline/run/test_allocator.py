"""The driver's glibc arenas: capped before its threads start, each thread no longer gets one of its own."""

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
