"""config.json's values read with their types checked: a value transformers could not run either (null where a
number belongs, a string for a mapping) is a ValueError that names its key, not a TypeError deep in a family."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_REQUIRED = object()


def integer(config: Mapping[str, Any], key: str, default: Any = _REQUIRED, *, minimum: int = 0) -> int:
    """config.json's `key`, a whole number of at least `minimum`, or `default` where the key is absent (KeyError
    where there is none). ValueError naming the key for anything else, null included: transformers would not
    run the model either."""
    if key not in config and default is not _REQUIRED:
        return default
    value = config[key]
    if not _is_number(value) or not float(value).is_integer() or value < minimum:
        raise ValueError(f"{key} {value!r} is not a whole number of at least {minimum}")
    return int(value)


def number(config: Mapping[str, Any], key: str, default: Any = _REQUIRED) -> float:
    """config.json's `key`, a finite number, as `integer` reads one."""
    if key not in config and default is not _REQUIRED:
        return default
    value = config[key]
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{key} {value!r} is not a number")
    return float(value)


def mapping(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """config.json's `key`, a mapping, or an empty one where it is absent or null."""
    value = config.get(key) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} {value!r} is not a mapping")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
