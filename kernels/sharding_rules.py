"""The mesh's axes and the table that maps logical axes onto them (`kernels.sharding` applies it).

Plain data, without JAX: an encoder's config holds a table, and the job's
driver, which builds and checks that config, never imports JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

MESH_AXES = ("data", "model")


@dataclasses.dataclass(frozen=True)
class ShardingRules:
    """Logical axis -> the mesh axis it is split over; a logical axis not named here is replicated."""

    batch: str | None = "data"
    heads: str | None = "model"
    mlp: str | None = "model"

    def __post_init__(self):
        for logical, axis in self._table().items():
            if axis is not None and axis not in MESH_AXES:
                raise ValueError(f"sharding rule {logical}={axis!r}: mesh axes are {MESH_AXES}")

    def _table(self) -> dict[str, str | None]:
        # Grouped-query attention's K/V heads go with the query heads that use them: not a rule of their own.
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {"kv_heads": self.heads}

    def mesh_axis(self, logical: str) -> str | None:
        return self._table().get(logical)

    def check_divisible(self, lengths: Mapping[str, int], mesh: Mapping[str, int]) -> None:
        """Raises ValueError naming every logical axis whose length (`lengths`: logical axis -> length) the size
        of its mesh axis (`mesh`: mesh axis -> size) does not divide. Plain numbers: the job's driver checks a
        mesh against a model's config before any encoder loads its weights."""
        problems = [
            f"{name} ({length}) over mesh axis {axis!r} of size {mesh[axis]}"
            for name, length in lengths.items()
            if (axis := self.mesh_axis(name)) is not None and length % mesh[axis]
        ]
        if problems:
            raise ValueError(f"cannot split {' nor '.join(problems)}")
