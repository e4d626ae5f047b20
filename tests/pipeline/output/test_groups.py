"""Commit groups: deterministic ids, and work blocks that never mix groups."""

from __future__ import annotations

from pipeline.io.listing import InputFile
from pipeline.output.groups import form_groups, work_blocks

from support import text_files as files


def test_groups_are_deterministic_and_depend_on_members_and_settings():
    inputs = files(10) + [InputFile("/d/s.jsonl", "jsonl", 1)]
    groups = form_groups(inputs, 4, "fp1")
    assert [len(g.members) for g in groups] == [4, 4, 2, 1]
    assert [g.docs for g in groups] == [4, 4, 2, None]
    assert [g.id for g in form_groups(inputs, 4, "fp1")] == [g.id for g in groups]
    assert not {g.id for g in form_groups(inputs, 4, "fp2")} & {g.id for g in groups}
    blocks = work_blocks(groups, 3)
    assert [b.num_rows for b in blocks] == [3, 1, 3, 1, 2, 1]
    assert all(len(set(b.column("group").to_pylist())) == 1 for b in blocks)
