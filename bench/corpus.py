"""A benchmark corpus: a directory of documents copied N times, so that a job's fixed costs are spread."""

from __future__ import annotations

import shutil
from pathlib import Path


def corpus_copies(source: Path, copies: int, root: Path) -> Path:
    """`source` copied `copies` times under `root` (copy000, copy001, ...); returns `root`."""
    for i in range(copies):
        shutil.copytree(source, root / f"copy{i:03d}")
    return root
