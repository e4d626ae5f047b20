"""Commit groups: deterministic ids, cut as the listing streams so that a stopped listing can go on, and work
blocks that never mix groups."""

from __future__ import annotations

import pyarrow as pa

from pipeline.output.groups import BLOCK_BYTES, GroupCutter, record_groups, work_blocks
from pipeline.run.job import CHUNK_BATCH

from support import listing, text_files


def test_groups_are_deterministic_and_depend_on_members_and_settings():
    entries = listing(sorted(text_files(10) + ["/d/s.jsonl"]))
    recorded = record_groups(entries, 4, "fp1")
    assert recorded.column("uri").to_pylist() == entries.column("uri").to_pylist()
    groups = recorded.column("group").to_pylist()
    files = [g for g, kind in zip(groups, recorded.column("kind").to_pylist()) if kind == "text"]
    assert [files.count(g) for g in dict.fromkeys(files)] == [4, 4, 2]
    assert recorded.column("group_docs").to_pylist() == [4] * 8 + [2] * 2 + [None]
    assert record_groups(entries, 4, "fp1").equals(recorded)
    assert not set(record_groups(entries, 4, "fp2").column("group").to_pylist()) & set(groups)


def test_the_cutter_returns_whole_groups_in_order_and_any_page_split_gives_the_same_groups():
    uris = sorted(text_files(9) + ["/d/a.jsonl", "/d/f004.parquet", "/d/z.jsonl"])
    whole = record_groups(listing(uris), 3, "s")
    for page in (1, 2, 5, 12):
        cutter = GroupCutter(3, "s")
        out = []
        for i in range(0, len(uris), page):
            ready = cutter.add(listing(uris[i : i + page]))
            if ready is not None:
                # What is returned ends on a group boundary: no file before its end still waits for a group.
                done = [g for t in out + [ready] for g in t.column("group").to_pylist()]
                assert None not in done
                out.append(ready)
        out.append(cutter.finish())
        assert pa.concat_tables([t for t in out if t is not None]).equals(whole)


def test_a_listing_resumed_after_a_recorded_prefix_makes_the_groups_of_a_whole_listing():
    uris = sorted(text_files(10) + ["/d/f003.jsonl", "/d/f007.parquet"])
    whole = record_groups(listing(uris), 4, "s")
    cutter = GroupCutter(4, "s")
    prefix = cutter.add(listing(uris[:9]))  # the driver killed after recording this
    last = prefix.column("uri")[-1].as_py()
    rest = record_groups(listing([u for u in uris if u > last]), 4, "s")
    assert pa.concat_tables([prefix, rest]).equals(whole)


def test_work_blocks_never_mix_groups_and_close_at_their_byte_budget():
    small = record_groups(listing(text_files(10), size=10), 4, "s")
    blocks = list(work_blocks(small))
    assert [b.num_rows for b in blocks] == [4, 4, 2]  # tiny files: a block per group
    assert all(len(set(b.column("group").to_pylist())) == 1 for b in blocks)
    big = record_groups(listing(text_files(6), size=BLOCK_BYTES // 2), 6, "s")
    assert [b.num_rows for b in work_blocks(big)] == [2, 2, 2]
    pdfs = record_groups(listing([f"/d/p{i}.pdf" for i in range(40)], size=1000), 64, "s")
    # As many PDFs as a task of the extraction stage, fused with the chunk stage, takes anyway.
    assert [b.num_rows for b in work_blocks(pdfs)] == [CHUNK_BATCH, CHUNK_BATCH, 8]
    big_pdfs = record_groups(listing([f"/d/p{i}.pdf" for i in range(9)], size=BLOCK_BYTES // 4), 64, "s")
    assert [b.num_rows for b in work_blocks(big_pdfs)] == [4, 4, 1]  # big PDFs close a block by their bytes


def test_a_groups_blocks_come_together_though_the_listing_interleaves_its_files_with_shards():
    """Sorted, a run of files is broken up by the shards listed among them: the read counts a group as started
    at its first block, and counted a broken run once per piece, so that a window of 6 groups filled at the
    fourth real one and waited for a commit that the stages, waiting for rows, never made."""
    uris = ["/d/a.txt", "/d/b.jsonl", "/d/c.pdf", "/d/d.parquet", "/d/e.txt", "/d/f.jsonl"]
    blocks = list(work_blocks(record_groups(listing(uris, size=10), 64, "s")))
    groups = [b.column("group")[0].as_py() for b in blocks]
    assert len(groups) == len(set(groups)) == 4
    assert [b.column("uri").to_pylist() for b in blocks] == [
        ["/d/a.txt", "/d/c.pdf", "/d/e.txt"],
        ["/d/b.jsonl"],
        ["/d/d.parquet"],
        ["/d/f.jsonl"],
    ]
