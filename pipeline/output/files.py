"""Small reads, writes and listings of the bookkeeping files under an output, side by side where there are many."""

from __future__ import annotations

import concurrent.futures
import json

import pyarrow.fs as pafs

from pipeline.io import filesystems as storage
from pipeline.output.layout import PARTS_DIRS

_THREADS = 16  # concurrent small reads and deletes against object storage


def list_parts(fs: pafs.FileSystem, root: str) -> set[str]:
    """Every part under `embeddings/` and `errors/`, as its path under the output."""
    return {_rel(root, i.path) for d in PARTS_DIRS for i in storage.list_files(fs, f"{root}/{d}")}


def delete_parts(fs: pafs.FileSystem, root: str, parts: list[str]) -> None:
    parallel(lambda rel: storage.delete_file(fs, f"{root}/{rel}"), parts)


def read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    try:
        return json.loads(storage.read_file(fs, path))
    except (FileNotFoundError, ValueError):
        return None


def dumps(obj) -> bytes:
    return json.dumps(obj, indent=2, sort_keys=True).encode()


def parallel(fn, items: list) -> list:
    if len(items) <= 1:
        return [fn(i) for i in items]
    with concurrent.futures.ThreadPoolExecutor(min(_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


def _rel(root: str, path: str) -> str:
    return path[len(root) :].lstrip("/")
