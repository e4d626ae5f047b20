"""Small reads, writes and listings of the bookkeeping files under an output, side by side where there are many."""

from __future__ import annotations

import concurrent.futures
import json

import pyarrow.fs as pafs

from pipeline.io import filesystems as storage
from pipeline.output.layout import PARTS_DIRS, STAGING_DIR

# Requests side by side against object storage, for the many small reads, writes and deletes of bookkeeping
# files and parts: each is tens of milliseconds of a cloud store's latency, and little CPU. A part or a
# done-marker is about seven requests (`write_file`): one at a time at 30 ms a request, a writer or the driver
# committed 4 groups a second, 16 at a time 40 and 54 (BENCHMARKS.md, "Done-markers and parts side by side").
IN_FLIGHT = 16


def list_parts(fs: pafs.FileSystem, root: str) -> set[str]:
    """Every part under `embeddings/` and `errors/`, as its path under the output."""
    return {_rel(root, i.path) for d in PARTS_DIRS for i in storage.list_files(fs, f"{root}/{d}")}


def delete_parts(fs: pafs.FileSystem, root: str, parts: list[str]) -> None:
    parallel(lambda rel: storage.delete_file(fs, f"{root}/{rel}"), parts)


def put(fs: pafs.FileSystem, root: str, rel: str, data: bytes) -> None:
    """Writes the output's file `rel` whole or not at all, staged under the output's `_staging/`."""
    storage.write_file(fs, f"{root}/{rel}", data, f"{root}/{STAGING_DIR}")


def read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    try:
        return json.loads(storage.read_file(fs, path))
    except (FileNotFoundError, ValueError):
        return None


def dumps(obj) -> bytes:
    return json.dumps(obj, indent=2, sort_keys=True).encode()


def parallel(fn, items: list) -> list:
    """`fn` of each item, IN_FLIGHT at a time; the first failure is raised once those running have ended, and
    the items not yet started are dropped."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    pool = concurrent.futures.ThreadPoolExecutor(min(IN_FLIGHT, len(items)))
    try:
        return list(pool.map(fn, items))
    finally:
        pool.shutdown(cancel_futures=True)


def _rel(root: str, path: str) -> str:
    return path[len(root) :].lstrip("/")
