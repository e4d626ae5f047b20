"""Commit groups: the units of input that are committed, and resumed, together.

The driver cuts the sorted inputs into groups: the single-document files in
runs of `group_size`, and each shard alone (see `pipeline.output.ledger` for
why). A group's id hashes its members' URIs with the settings that shape its
output, so the same inputs and settings give the same groups, run after run.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pyarrow as pa

from pipeline.io.listing import InputFile
from pipeline.io.shards import ShardPlan, ShardUnit
from pipeline.schemas import WORK_SCHEMA


@dataclasses.dataclass(frozen=True)
class Group:
    id: str
    members: tuple[InputFile, ...]  # single-document files, or one shard
    plan: ShardPlan | None = None  # a big shard's units; None: read whole

    @property
    def docs(self) -> int | None:
        """Documents in the group: known up front for files and planned shards, found while reading a whole shard."""
        if self.plan is not None:
            return self.plan.docs
        return None if self.members[0].is_shard else len(self.members)


def form_groups(
    inputs: list[InputFile], group_size: int, salt: str = "", plans: dict[str, ShardPlan] | None = None
) -> list[Group]:
    """`inputs` (sorted) -> groups: runs of `group_size` single-document files, and one group per shard.

    `salt` goes into every id: the settings that shape a group's output (model,
    chunking, shard fields), so that changed settings never reuse a group.
    `plans`: the units of big shards, by URI (`pipeline.io.shards.plan_units`);
    they split the reading of a group, never the group.
    """
    plans = plans or {}
    files = [f for f in inputs if not f.is_shard]
    runs = [tuple(files[i : i + group_size]) for i in range(0, len(files), group_size)]
    groups = [Group(_group_id(members, salt), members) for members in runs]
    groups += [Group(_group_id((f,), salt), (f,), plans.get(f.uri)) for f in inputs if f.is_shard]
    return groups


def _group_id(members: tuple[InputFile, ...], salt: str) -> str:
    digest = hashlib.sha256(salt.encode())
    for f in members:
        digest.update(b"\0" + f.uri.encode())
    return digest.hexdigest()[:20]


def work_blocks(groups: list[Group], rows_per_block: int) -> list[pa.Table]:
    """The extraction stage's input: blocks of at most `rows_per_block` files, never two groups in one;
    a planned shard's units one block each, so that they spread over the extraction workers."""
    blocks = []
    for group in groups:
        if group.plan is not None:
            blocks += [_work_table(group, group.members, [unit]) for unit in group.plan.units]
            continue
        for i in range(0, len(group.members), rows_per_block):
            members = group.members[i : i + rows_per_block]
            blocks.append(_work_table(group, members, [None] * len(members)))
    return blocks


def _work_table(group: Group, files: tuple[InputFile, ...], units: list[ShardUnit | None]) -> pa.Table:
    return pa.table(
        {
            "doc_id": [f.uri for f in files],
            "kind": [f.kind for f in files],
            "group": [group.id] * len(files),
            "group_docs": [group.docs] * len(files),
            "unit_start": [None if u is None else u.start for u in units],
            "unit_stop": [None if u is None else u.stop for u in units],
            "unit_first": [None if u is None else u.first for u in units],
            "unit_repeats": [None if u is None else list(u.repeats) for u in units],
        },
        schema=WORK_SCHEMA,
    )
