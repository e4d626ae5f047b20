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
from pipeline.schemas import WORK_SCHEMA


@dataclasses.dataclass(frozen=True)
class Group:
    id: str
    members: tuple[InputFile, ...]  # single-document files, or one shard

    @property
    def docs(self) -> int | None:
        """Documents in the group: known up front for files, found while reading for a shard."""
        return None if self.members[0].is_shard else len(self.members)


def form_groups(inputs: list[InputFile], group_size: int, salt: str = "") -> list[Group]:
    """`inputs` (sorted) -> groups: runs of `group_size` single-document files, and one group per shard.

    `salt` goes into every id: the settings that shape a group's output (model,
    chunking, shard fields), so that changed settings never reuse a group.
    """
    files = [f for f in inputs if not f.is_shard]
    runs = [tuple(files[i : i + group_size]) for i in range(0, len(files), group_size)]
    runs += [(f,) for f in inputs if f.is_shard]
    return [Group(_group_id(members, salt), members) for members in runs]


def _group_id(members: tuple[InputFile, ...], salt: str) -> str:
    digest = hashlib.sha256(salt.encode())
    for f in members:
        digest.update(b"\0" + f.uri.encode())
    return digest.hexdigest()[:20]


def work_blocks(groups: list[Group], rows_per_block: int) -> list[pa.Table]:
    """The extraction stage's input: blocks of at most `rows_per_block` files, never two groups in one."""
    blocks = []
    for group in groups:
        for i in range(0, len(group.members), rows_per_block):
            members = group.members[i : i + rows_per_block]
            blocks.append(
                pa.table(
                    {
                        "doc_id": [f.uri for f in members],
                        "kind": [f.kind for f in members],
                        "group": [group.id] * len(members),
                        "group_docs": [group.docs] * len(members),
                    },
                    schema=WORK_SCHEMA,
                )
            )
    return blocks
