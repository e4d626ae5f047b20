"""The driver's allocators: glibc's arenas capped before its threads start, and Arrow's buffers from glibc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.run.allocator import ARROW_POOL, DRIVER_ARENAS

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


REPO = Path(__file__).resolve().parents[3]


def _child(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`code` run by a fresh interpreter in the repository, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, check=True, env=env
    )


def _arenas(mode: str) -> int:
    return sum(line.startswith("Arena ") for line in _child(PROBE, mode).stderr.splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")
def test_threads_started_after_the_cap_share_its_arenas():
    assert _arenas("uncapped") > DRIVER_ARENAS  # else the probe shows nothing
    assert _arenas("capped") == DRIVER_ARENAS


ARROW_PROBE = """
import io, os, subprocess, sys
from pipeline.run.allocator import arrow_on_malloc
if sys.argv[1] == "late":
    import pyarrow
arrow_on_malloc()
import pyarrow as pa, pyarrow.parquet as pq
system = pa.system_memory_pool()
held = system.bytes_allocated()
table = pa.table({"uri": [f"s3://bucket/file-{i}.pdf" for i in range(10_000)]})
counted = system.bytes_allocated() - held >= table.nbytes
# The Parquet writer allocates from Arrow C++'s default pool, which pyarrow's switch does not reach.
pq.write_table(table, io.BytesIO(), compression="zstd")
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))"],
                       capture_output=True, text=True, check=True).stdout.strip()
print(pa.default_memory_pool().backend_name, counted, pa.mimalloc_memory_pool().max_memory() > 0, child)
"""


def _arrow_probe(when: str, env: dict[str, str]) -> list[str]:
    return _child(ARROW_PROBE, when, env=env).stdout.split()


@pytest.fixture
def without_arrow_pool(monkeypatch):
    """This environment without a user's choice of Arrow pool, where Arrow's own default is mimalloc."""
    monkeypatch.delenv(ARROW_POOL, raising=False)
    # Asked of a fresh process: this one may have switched already (importing pipeline.cli.embed does).
    default = _child("import pyarrow; print(pyarrow.default_memory_pool().backend_name)").stdout.strip()
    if default != "mimalloc":
        pytest.skip(f"this pyarrow's default pool is {default}: the probe would show nothing")
    return dict(os.environ)


def test_a_switch_before_pyarrow_loads_takes_every_arrow_buffer_to_the_system_pool(without_arrow_pool):
    # The Parquet writer too; the processes the driver starts keep Arrow's default (the variable is unset).
    assert _arrow_probe("first", without_arrow_pool) == ["system", "True", "False", "None"]


def test_a_late_switch_reaches_pyarrow_but_not_the_parquet_writer(without_arrow_pool):
    assert _arrow_probe("late", without_arrow_pool) == ["system", "True", "True", "None"]


def test_a_pool_the_user_chose_stays(without_arrow_pool):
    chosen = {**without_arrow_pool, ARROW_POOL: "mimalloc"}
    assert _arrow_probe("first", chosen) == ["mimalloc", "False", "True", "mimalloc"]
