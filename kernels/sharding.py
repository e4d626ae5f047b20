"""Logical axes, and the one table that maps them onto a device mesh.

Model code names the axes of its arrays logically, as a PartitionSpec of
logical names (`P("batch", "seq")`). `ShardingRules` says which mesh axis each
logical axis is split over, and every mesh PartitionSpec, of parameters and of
activations alike, is derived from it: another parallel layout is another
table, not other model code.

The mesh has two axes. `data` splits the batch. `model` splits attention heads
and the MLP hidden dimension, Megatron style: column-parallel in-projections,
row-parallel out-projections whose partial sums are psummed, so two
all-reduces per layer run over `model`. It is the inner (last) mesh axis
because `jax.make_mesh` puts neighbouring devices along the last axis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from kernels.sharding_rules import MESH_AXES, ShardingRules


def spec(rules: ShardingRules, logical: P) -> P:
    """P of logical names -> P of mesh axes, e.g. P('batch', 'seq') -> P('data', None)."""
    return P(*(rules.mesh_axis(name) for name in logical))


def make_mesh(shape: dict[str, int], devices: Sequence[jax.Device]) -> Mesh:
    """A mesh over the first prod(shape) of `devices`, axes `MESH_AXES` sized by `shape`.

    Axes are Explicit: an argument placed differently from its spec is
    refused instead of being resharded on every call, which keeps "weights are
    placed once" a checked fact.
    """
    sizes = tuple(shape[axis] for axis in MESH_AXES)
    return jax.make_mesh(sizes, MESH_AXES, axis_types=(AxisType.Explicit,) * len(sizes), devices=devices)


def axis_size(mesh: Mesh, rules: ShardingRules, logical: str) -> int:
    """How many shards the logical axis is split into on this mesh (1 when replicated)."""
    axis = rules.mesh_axis(logical)
    return 1 if axis is None else mesh.shape[axis]


def named_shardings(axes: Any, rules: ShardingRules, mesh: Mesh) -> Any:
    """A pytree of logical P -> the same pytree of NamedSharding, for `jax.device_put`."""
    return jax.tree.map(lambda logical: NamedSharding(mesh, spec(rules, logical)), axes)


def sum_shards(x: jax.Array, logical: str, rules: ShardingRules | None) -> jax.Array:
    """Completes a contraction over a split logical axis: x holds this device's
    partial sum over its slice of `logical`; psum adds the other slices.

    Only valid inside `shard_map`; with `rules` None (whole arrays, no mesh),
    the axis replicated, or its mesh axis of size 1, x already is the full sum.
    The last is checked because XLA keeps a one-device all-reduce as a copy.
    """
    axis = None if rules is None else rules.mesh_axis(logical)
    if axis is None or jax.lax.axis_size(axis) == 1:
        return x
    return jax.lax.psum(x, axis)


def shard_map(fn: Callable, mesh: Mesh, rules: ShardingRules, *, in_axes: Any, out_axes: Any) -> Callable:
    """`jax.shard_map` with specs given as logical P pytrees (prefixes of fn's args and result).

    check_vma is off because under it `pallas_call` refuses any out_shape that
    does not declare how it varies over mesh axes (`manual_axis_type`), which
    JAX's own TPU flash and splash kernels do not, and the encoder must run
    every attention implementation. What the check would prove, that outputs
    really are replicated over the mesh axes their specs leave out, the
    sharded-vs-unsharded tests check on numbers instead.
    """
    to_mesh = lambda tree: jax.tree.map(lambda logical: spec(rules, logical), tree)  # noqa: E731
    return jax.shard_map(fn, mesh=mesh, in_specs=to_mesh(in_axes), out_specs=to_mesh(out_axes), check_vma=False)
