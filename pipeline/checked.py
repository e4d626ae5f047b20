"""Config dataclasses held to their annotations.

The Python API passes its arguments through unchecked, and a value of the wrong type goes far before it
fails: `overwrite="no"` is true and wipes a finished output, `inputs="dir"` is read one character at a time,
`packing="off"` runs packing on. Every config checks its fields at construction instead.
"""

from __future__ import annotations

import dataclasses
import types
import typing


def check_types(cfg, what: str) -> None:
    """TypeError naming the first field of the dataclass `cfg` whose value is not of its annotated type;
    `what` names the fields in the message ("encoder option", "JobConfig field")."""
    hints = typing.get_type_hints(type(cfg))
    for field in dataclasses.fields(cfg):
        value, hint = getattr(cfg, field.name), hints[field.name]
        if not _is(value, hint):
            raise TypeError(f"{what} {field.name} must be {_name(hint)}, got {value!r}")


def _members(hint) -> tuple:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _is(value, hint) -> bool:
    return any(_is_one(value, member) for member in _members(hint))


def _is_one(value, hint) -> bool:
    if hint is type(None):
        return value is None
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_is(item, args[0]) for item in value)
        return len(value) == len(args) and all(map(_is, value, args))
    if isinstance(value, bool):  # an int to isinstance, but True rows per device is no size
        return hint is bool
    if hint is float:  # an int is a float's value (PEP 484's numeric tower)
        return isinstance(value, (int, float))
    return isinstance(value, hint)


def _name(hint) -> str:
    return " or ".join(
        "None" if m is type(None) else str(m) if typing.get_origin(m) else m.__name__ for m in _members(hint)
    )
