"""A model directory's JSON files (config.json, modules.json, a sharded checkpoint's index...).

Every way one can be wrong (absent, unreadable, not JSON, not an object where one is wanted) is one ModelError
line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.errors import ModelError


def read_json(path: Path, default=None):
    """The JSON value in `path`; `default` when the file is absent (ModelError when that is None too)."""
    if not path.exists():
        if default is not None:
            return default
        raise ModelError(f"model directory {path.parent} has no {path.name}")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {path}: {e}") from None


def read_object(path: Path, default: dict | None = None) -> dict:
    """`read_json`, where the value must be a JSON object."""
    value = read_json(path, default)
    if not isinstance(value, dict):
        raise ModelError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value
