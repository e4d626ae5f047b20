"""Commit groups: the units of input that are committed, and resumed, together.

The sorted listing is cut into groups as it streams (`GroupCutter`): the
single-document files in runs of `group_size`, and each shard alone (see
`pipeline.output.ledger` for why). A group's id hashes its members' URIs with
the settings that shape its output, so the same inputs and settings give the
same groups, run after run. Groups live in Arrow columns (`group`,
`group_docs`) beside the listing's entries, never as a Python object per file:
the recorded listing (`pipeline.output.inputs`) is where a group's members are
written down.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

import pyarrow as pa

from pipeline.io.shards import ShardPlan
from pipeline.kinds import SHARD_KINDS
from pipeline.schemas import INPUTS_SCHEMA, WORK_SCHEMA

# The extraction stage's input blocks: a block closes at this many bytes of input, a PDF counting at
# least PDF_BLOCK_COST, so a block holds at most 16 PDFs, what one task of the extraction stage takes
# anyway: Ray Data fuses it with the chunk stage, whose calls take CHUNK_BATCH (16) documents
# (pipeline.run.job), so one slow PDF holds up the other 15 of its task however the blocks are cut.
# Smaller blocks only left Ray Data's state for each of them on the driver (about 0.9 KiB a block over a
# run, docs/scale.md). A group of tiny text files is one block: blocks and tasks grow per group of them.
BLOCK_BYTES = 1 << 20
PDF_BLOCK_COST = BLOCK_BYTES // 16


class GroupCutter:
    """Sorted listing entries in, the same entries out with their group, cut where a rerun can go on.

    `add` returns the entries whose group is known and before which no entry
    still waits for its group (a run of files not yet `group_size` long): a
    recorded listing made of these prefixes ends on a group boundary, so a
    listing resumed after its last URI forms the groups a whole listing would.
    `finish` returns the rest, the last short run of files a group of its own.
    """

    def __init__(self, group_size: int, salt: str):
        self.group_size = group_size
        self.salt = salt
        self._waiting: list[pa.RecordBatch] = []  # entries not returned yet, in order
        self._ids: list[str | None] = []  # their groups; None for files of the unfinished run
        self._run: list[int] = []  # positions in _ids of the unfinished run's files
        self._members: list[str] = []  # and their URIs, which make its group's id

    def add(self, entries: pa.RecordBatch | pa.Table) -> pa.Table | None:
        """`entries` (uri, kind, size, in ascending URI order after every earlier one) -> ready entries, or None."""
        self._waiting.append(entries)
        for uri, kind in zip(entries.column("uri").to_pylist(), entries.column("kind").to_pylist()):
            if kind in SHARD_KINDS:
                self._ids.append(_group_id([uri], self.salt))
                continue
            self._run.append(len(self._ids))
            self._ids.append(None)
            self._members.append(uri)
            if len(self._run) == self.group_size:
                self._close_run()
        ready = self._ids.index(None) if None in self._ids else len(self._ids)
        return self._take(ready)

    def finish(self) -> pa.Table | None:
        if self._run:
            self._close_run()
        return self._take(len(self._ids))

    def _close_run(self) -> None:
        group = _group_id(self._members, self.salt)
        for i in self._run:
            self._ids[i] = group
        self._run, self._members = [], []

    def _take(self, n: int) -> pa.Table | None:
        if n == 0:
            return None
        waiting = pa.concat_tables([_as_table(b) for b in self._waiting])
        ids, self._ids = self._ids[:n], self._ids[n:]
        self._run = [i - n for i in self._run]
        self._waiting = [waiting.slice(n)] if n < waiting.num_rows else []
        taken = waiting.slice(0, n)
        return _with_groups(taken, ids)


def record_groups(entries: pa.Table, group_size: int, salt: str = "") -> pa.Table:
    """A whole sorted listing at once (the capacity planner's sample, tests) -> INPUTS_SCHEMA rows."""
    cutter = GroupCutter(group_size, salt)
    parts = [cutter.add(entries), cutter.finish()]
    return pa.concat_tables([p for p in parts if p is not None] or [INPUTS_SCHEMA.empty_table()])


def _as_table(entries: pa.RecordBatch | pa.Table) -> pa.Table:
    table = pa.Table.from_batches([entries]) if isinstance(entries, pa.RecordBatch) else entries
    return table.select(["uri", "kind", "size"])


def _with_groups(entries: pa.Table, ids: list[str]) -> pa.Table:
    """Adds `group` and `group_docs` (a file group's member count; null for a shard, found by its reader)."""
    counts: dict[str, int] = {}
    for group in ids:
        counts[group] = counts.get(group, 0) + 1
    kinds = entries.column("kind").to_pylist()
    docs = [None if kind in SHARD_KINDS else counts[g] for g, kind in zip(ids, kinds)]
    table = entries.append_column("group", pa.array(ids, pa.string()))
    return table.append_column("group_docs", pa.array(docs, pa.int32())).cast(INPUTS_SCHEMA)


def _group_id(uris: list[str], salt: str) -> str:
    digest = hashlib.sha256(salt.encode())
    for uri in uris:
        digest.update(b"\0" + uri.encode())
    return digest.hexdigest()[:20]


def work_blocks(recorded: pa.Table, plan: Callable[[dict], ShardPlan | None] | None = None) -> Iterator[pa.Table]:
    """Recorded entries (INPUTS_SCHEMA) -> the extraction stage's input blocks (WORK_SCHEMA), as they are asked for.

    A block never mixes groups and closes at BLOCK_BYTES of input; a shard is a
    block of its own, and a big shard that `plan` (given the shard's entry)
    cuts into units (`pipeline.io.shards.plan_units`) one block per unit, so
    that its units spread over the extraction workers.

    A group's blocks come one after another, groups in the order of their first
    entry: the listing's order interleaves a run of files with the shards listed
    among them, and the read counts a group as started at its first block.
    """
    rows = recorded.to_pylist()
    first_entry: dict[str, int] = {}
    for i, row in enumerate(rows):
        first_entry.setdefault(row["group"], i)
    rows.sort(key=lambda row: first_entry[row["group"]])  # stable: a group's entries keep their order
    start = 0
    while start < len(rows):
        first = rows[start]
        if first["kind"] in SHARD_KINDS:
            units = None if plan is None else plan(first)
            if units is None:
                yield _work_table([first], [None])
            else:
                docs = {**first, "group_docs": units.docs}
                for unit in units.units:
                    yield _work_table([docs], [unit])
            start += 1
            continue
        stop, cost = start, 0
        while stop < len(rows) and rows[stop]["group"] == first["group"] and cost < BLOCK_BYTES:
            row = rows[stop]
            cost += max(row["size"], PDF_BLOCK_COST) if row["kind"] == "pdf" else row["size"]
            stop += 1
        yield _work_table(rows[start:stop], [None] * (stop - start))
        start = stop


def _work_table(rows: list[dict], units: list) -> pa.Table:
    return pa.table(
        {
            "uri": [r["uri"] for r in rows],
            "kind": [r["kind"] for r in rows],
            "size": [r["size"] for r in rows],
            "group": [r["group"] for r in rows],
            "group_docs": [r["group_docs"] for r in rows],
            "unit_start": [None if u is None else u.start for u in units],
            "unit_stop": [None if u is None else u.stop for u in units],
            "unit_first": [None if u is None else u.first for u in units],
            "unit_repeats": [None if u is None else list(u.repeats) for u in units],
        },
        schema=WORK_SCHEMA,
    )
