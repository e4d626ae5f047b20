"""The streamed listing on local directories: order, dedup across locations, skipped kinds, resuming, memory."""

from __future__ import annotations

import logging
import os
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline import kinds
from pipeline.errors import InputError
from pipeline.io import listing
from pipeline.io.listing import LISTING_SCHEMA, list_inputs, list_pages, tree
from pipeline.kinds import kind_of
from pipeline.output.layout import left_out

# Names that sort differently as paths than as a tree would: "-" and "." before "/", "0" after it; non-ASCII last.
NAMES = [
    "a.txt",
    "a-b.txt",
    "a/x.txt",
    "a/y/z.md",
    "a0.txt",
    "b.pdf",
    "b.png",
    "c/deep/er/still/s.jsonl",
    "c/deep/er/still/t.parquet",
    "c/deep/er/still/skip.bin",
    "c/deep.txt",
    "c/deep-x.txt",
    "é.txt",
    "日本/語.md",
    "z/emptyish/README",
    "ß/ö.txt",
]


def make_tree(root: Path) -> Path:
    for name in NAMES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * len(name))
    (root / "empty" / "dir").mkdir(parents=True)
    return root


def listed(locations, **kwargs) -> tuple[list[tuple[str, str, int]], int, int]:
    """(uri, kind, size) over all pages, the skipped count, and the number of pages."""
    rows, skipped, pages = [], 0, 0
    for page in list_pages(locations, **kwargs):
        assert page.entries.schema == LISTING_SCHEMA
        d = page.entries.to_pydict()
        rows += zip(d["uri"], d["kind"], d["size"])
        skipped += page.skipped
        pages += 1
    return rows, skipped, pages


def expected(root: Path) -> tuple[list[tuple[str, str, int]], int]:
    """What a listing of `root` must give, worked out independently: every file by os.walk, then sorted."""
    files = {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}
    readable = sorted((p, kind_of(p), os.path.getsize(p)) for p in files if kind_of(p))
    return readable, len(files) - len(readable)


@pytest.mark.parametrize("page_size", [1, 3, 1000])
def test_pages_are_sorted_complete_and_count_the_skipped(tmp_path, page_size):
    root = make_tree(tmp_path / "tree")
    rows, skipped, pages = listed([str(root)], page_size=page_size)
    want, want_skipped = expected(root)
    assert rows == want and skipped == want_skipped == 3
    assert [r[0] for r in rows] == sorted({r[0] for r in rows})  # strictly ascending
    assert pages == -(-len(want) // page_size)
    assert str(root / "a-b.txt") in [r[0] for r in rows]


@pytest.mark.parametrize("files, k", [(1000, 10), (1000, 7), (5, 10), (64, 32), (1, 1)])
def test_a_sample_is_spread_evenly_from_the_first_input_to_the_end(tmp_path, files, k):
    for i in range(files):
        (tmp_path / f"f{i:04d}.txt").write_text("x")
    sample, count = listing.sample_inputs([str(tmp_path)], k)
    positions = [int(Path(f.uri).stem[1:]) for f in sample]
    assert count == files and len(positions) == min(k, files) and positions == sorted(set(positions))
    assert positions[0] == 0
    gaps = np.diff(positions)
    if files > k:  # spread over the whole listing, not its first part: no gap more than twice another
        assert positions[-1] >= files * (k - 1) / k / 2 and gaps.max() <= 2 * gaps.min() + 1, positions


class Counted:
    """Stands in for InputFile, counting how many are alive at once."""

    alive = most = 0

    def __init__(self, uri, kind, size):
        self.uri = uri
        Counted.alive += 1
        Counted.most = max(Counted.most, Counted.alive)

    def __del__(self):
        Counted.alive -= 1


def test_a_sample_holds_2k_entries_and_a_page_however_long_the_listing(monkeypatch):
    """500 pages of 1,000 entries (a store's listing, made up here): 10 kept, evenly spaced over all of it, and
    never more than 2k entries and a page's alive at once."""
    monkeypatch.setattr(listing, "InputFile", Counted)

    def pages(locations, leave_out):
        for p in range(500):
            uris = [f"s3://b/{p * 1000 + i:07d}.txt" for i in range(1000)]
            entries = pa.RecordBatch.from_pydict({"uri": uris, "kind": ["text"] * 1000, "size": [1] * 1000})
            yield listing.Page(entries, skipped=0)

    monkeypatch.setattr(listing, "list_pages", pages)
    sample, count = listing.sample_inputs(["s3://b"], 10)
    positions = [int(f.uri[7:14]) for f in sample]
    assert count == 500_000 and positions[0] == 0 and positions[-1] > 400_000, positions
    assert np.diff(positions).max() <= 2 * np.diff(positions).min(), positions
    assert Counted.most <= 2 * 10 + 1000, Counted.most


def test_overlapping_locations_and_single_files_are_listed_once(tmp_path):
    root = make_tree(tmp_path / "tree")
    locations = [str(root / "c"), str(root), f"file://{root}/a", str(root / "b.pdf"), str(root / "c" / "deep.txt")]
    rows, skipped, _ = listed(locations, page_size=2)
    want, want_skipped = expected(root)
    assert rows == want and skipped == want_skipped
    assert list_inputs(locations) == (list_inputs([str(root)])[0], want_skipped)


@pytest.mark.parametrize("page_size", [1, 4])
def test_start_after_gives_the_tail_of_the_listing(tmp_path, page_size):
    root = make_tree(tmp_path / "tree")
    full, _, _ = listed([str(root)])
    uris = [r[0] for r in full]
    # Every listed URI, names between them and outside them, and directories (with and without their "/").
    points = [*uris, str(root / "a"), str(root / "a") + "/", str(root / "a/y"), str(root / "c/deep"), str(tmp_path)]
    points += [str(root / "zz"), str(root / "a/x.txt0"), str(root) + "0", "/"]
    for point in points:
        rows, _, _ = listed([str(root), str(root / "c")], start_after=point, page_size=page_size)
        assert rows == [r for r in full if r[0] > point], point


def test_missing_and_empty_locations(tmp_path):
    (tmp_path / "empty").mkdir()
    assert listed([str(tmp_path / "empty")]) == ([], 0, 0)
    with pytest.raises(InputError, match="does not exist"):
        list_pages([str(tmp_path / "empty"), str(tmp_path / "nope")])  # before any page is asked for
    with pytest.raises(ValueError, match="page_size"):
        list_pages([str(tmp_path)], page_size=0)


def test_an_unreadable_directory_is_one_input_error_and_a_vanished_one_is_passed_over(tmp_path, monkeypatch):
    for sub in ("a", "b", "c"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "f.txt").write_text("x")
    scandir = os.scandir

    def refusing(path):  # as for a directory without read permission, which root (the tests' user here) ignores
        if path.endswith("/b/"):
            raise PermissionError(13, "Permission denied")
        if path.endswith("/c/"):
            raise FileNotFoundError(2, "No such file or directory")
        return scandir(path)

    monkeypatch.setattr(listing.os, "scandir", refusing)
    with pytest.raises(InputError, match=r"^input directory .*/b/ cannot be listed: Permission denied$"):
        listed([str(tmp_path)])
    (tmp_path / "b" / "f.txt").unlink()
    (tmp_path / "b").rmdir()
    assert [f.uri for f in list_inputs([str(tmp_path)])[0]] == [str(tmp_path / "a" / "f.txt")]


def test_files_named_in_bytes_that_are_not_utf8_are_skipped_and_said(tmp_path, caplog):
    # Python names such a file with a lone surrogate, which no Arrow string (no doc_id) can hold.
    (tmp_path / "ok.txt").write_text("ok")
    (Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.txt"))).write_text("x")
    rows, skipped, _ = listed([str(tmp_path)], page_size=1)
    assert [r[0] for r in rows] == [str(tmp_path / "ok.txt")] and skipped == 1
    assert "caf\\xe9.txt': its name is not UTF-8" in caplog.text


def test_a_broken_link_a_loop_of_links_or_a_pipe_under_a_directory_is_skipped_counted_and_said(tmp_path, caplog):
    """Neither can be read (a pipe's read would wait forever), and left out without a word it would vanish from
    the run's counts: an input directory's every entry is read, or skipped and counted."""
    (tmp_path / "ok.txt").write_text("ok")
    (tmp_path / "gone.txt").symlink_to(tmp_path / "unmounted" / "report.txt")
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "loop.txt").symlink_to(tmp_path / "loop.txt")  # its stat fails: too many levels of links
    rows, skipped, _ = listed([str(tmp_path)], page_size=1)
    assert [r[0] for r in rows] == [str(tmp_path / "ok.txt")] and skipped == 3
    for name in ("gone.txt", "pipe.txt", "loop.txt"):
        assert f"{tmp_path / name}: not a regular file (a broken symbolic link, a pipe, a device)" in caplog.text


def test_an_object_key_with_a_question_mark_is_skipped_and_said(caplog):
    # check_location refuses a URI with a query (a signed URL's credentials): such a key could not be read back.
    pages = list(listing._paged(iter([("s3://b/a?.txt", 1), ("s3://b/b #1.txt", 2)]), None, 10, lambda uri: False))
    assert [(p.entries.column("uri").to_pylist(), p.skipped) for p in pages] == [(["s3://b/b #1.txt"], 1)]
    assert "'s3://b/a?.txt': its key holds a '?'" in caplog.text


@pytest.mark.parametrize(
    "key, why",
    [
        ("s3://b/w//double.txt", "an empty segment"),
        ("gs://b//lead.txt", "an empty segment"),
        ("s3://b/k/http://x.txt", "an empty segment"),
        ("s3://b/w/./dot.txt", "a '.' or '..' segment"),
        ("s3://b/w/x/../dotdot.txt", "a '.' or '..' segment"),
    ],
)
def test_an_object_key_pyarrow_cannot_read_is_skipped_and_said(key, why, caplog):
    # pyarrow refuses an empty segment ("Empty path component"), and on S3 the AWS SDK resolves "." and "..".
    entries = [(key, 1), ("s3://b/w/ok.txt", 2)]
    pages = list(listing._paged(iter(sorted(entries)), None, 10, lambda uri: False))
    assert [(p.entries.column("uri").to_pylist(), p.skipped) for p in pages] == [(["s3://b/w/ok.txt"], 1)]
    assert f"{key!r}: its path holds {why}" in caplog.text


def test_gcs_reads_keys_with_dot_segments():
    pages = list(listing._paged(iter([("gs://b/w/../x.txt", 1), ("gs://b/w/./y.txt", 2)]), None, 10, lambda uri: False))
    assert pages[0].entries.column("uri").to_pylist() == ["gs://b/w/../x.txt", "gs://b/w/./y.txt"]


def test_a_symlink_to_a_directory_above_is_not_followed_and_other_links_are(tmp_path):
    root = make_tree(tmp_path / "tree")
    (root / "c" / "up").symlink_to("..")  # a loop: tree/c/up/c/up/...
    (root / "linked").symlink_to(root / "a")  # the same files under another path, as `find -L` lists them
    rows, _, _ = listed([str(root)])
    under = [r[0][len(str(root)) + 1 :] for r in rows]
    assert not [name for name in under if name.startswith("c/up/")]
    assert [name for name in under if name.startswith(("a/", "linked/"))] == [
        "a/x.txt",
        "a/y/z.md",
        "linked/x.txt",
        "linked/y/z.md",
    ]


def test_the_outputs_own_files_are_left_out_and_a_special_file_or_no_name_is_no_input(tmp_path):
    root = make_tree(tmp_path / "tree")
    (root / "out" / "embeddings").mkdir(parents=True)
    (root / "out" / "embeddings" / "part-1.parquet").write_bytes(b"x")
    (root / "out" / "_SUCCESS").write_text("{}")
    (root / "outside.txt").write_text("x")
    (root / "out" / "notes.txt").write_text("x")  # the user's own, beside the output's
    rows, skipped, _ = listed([str(root)], leave_out=left_out(tree(f"file://{root}/out")))
    want, want_skipped = expected(root)
    assert [r[0] for r in rows] == [r[0] for r in want if "/out/" not in r[0] or "notes" in r[0]]
    assert skipped == want_skipped - 1  # _SUCCESS
    assert str(root / "outside.txt") in [r[0] for r in rows]  # `out` is a prefix of its name, not its directory
    os.mkfifo(tmp_path / "pipe.txt")
    with pytest.raises(InputError, match="pipe.txt is neither a file nor a directory"):
        list_pages([str(tmp_path / "pipe.txt")])
    with pytest.raises(InputError, match="an input is an empty string"):
        list_pages([str(root), ""])


def test_another_docembed_output_under_an_input_is_no_input(tmp_path):
    """A run into `out2` over a tree that holds an earlier run's `out`: out's parts were read as shards, each an
    error row. Its files are left out by their names there; the user's own files beside them, and files of
    those names elsewhere, are inputs."""
    root = make_tree(tmp_path / "tree")
    out = root / "out"
    written = [
        "_docembed.json",
        "_SUCCESS",
        "_inputs/part-000000.parquet",
        "_inputs/_LISTED.json",
        "_groups/fdf22a288e9a905188c5.json",
        "embeddings/part-fdf22a288e9a905188c5-db2a79e99361ea1b.parquet",
        "errors/part-5bea4441c5c50b904e19-940eab1fb14e08f2.parquet",
        "_staging/part-x.parquet",
    ]
    for name in [*written, "notes.txt", "embeddings/mine.parquet"]:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b"x")
    (root / "_inputs").mkdir()
    (root / "_inputs" / "part-7.jsonl").write_text("{}")  # a user's: not a name docembed writes
    rows, skipped, _ = listed([str(root)], leave_out=left_out(tree(f"file://{tmp_path}/out2")))
    want, want_skipped = expected(root)
    gone = {str(out / name) for name in written}
    assert [r[0] for r in rows] == [r[0] for r in want if r[0] not in gone]
    assert {str(out / "notes.txt"), str(out / "embeddings" / "mine.parquet")} <= {r[0] for r in rows}
    assert str(root / "_inputs" / "part-7.jsonl") in {r[0] for r in rows}
    assert skipped == want_skipped - 4  # the output's markers (*.json, _SUCCESS) are neither counted nor said


def test_a_glob_is_the_files_it_matches_and_one_that_matches_none_is_said(tmp_path, monkeypatch, caplog):
    root = make_tree(tmp_path / "tree")
    want, _ = expected(root)
    monkeypatch.chdir(tmp_path)  # relative globs, as a shell hands them over quoted
    for glob, matches in [
        ("tree/*.txt", lambda name: "/" not in name and name.endswith(".txt")),
        ("tree/**/*.md", lambda name: name.endswith(".md")),
        ("tree/[!a]*", lambda name: not name.startswith("a")),  # a folder matched: the files under it
        (f"{root}/?/*", lambda name: re.fullmatch(r"./.+", name)),  # a/y matched: a/y/z.md too
    ]:
        rows, _, _ = listed([glob])
        assert [r[0] for r in rows] == [r[0] for r in want if matches(r[0][len(str(root)) + 1 :])], glob
    assert listed(["tree/*.nothing"])[0] == [] and "input tree/*.nothing matches no file" in caplog.text
    (root / "br[a]ck.txt").write_text("x")  # a name that exists as written is no glob
    assert [r[0] for r in listed(["tree/br[a]ck.txt"])[0]] == [str(root / "br[a]ck.txt")]
    with pytest.raises(InputError, match="input nowhere does not exist"):
        list_pages(["nowhere/*.txt"])


def test_a_glob_lists_only_the_folders_that_can_hold_a_match(tmp_path, monkeypatch):
    """Each folder's names must match the glob's at their depth, until one holds `**` or the glob's names run out
    (a folder matched gives the files under it): a corpus's other folders are never listed. A set holding "/"
    spans names, so its glob lists every folder (and still matches `a/y/z.md`)."""
    root = make_tree(tmp_path / "tree")
    want, _ = expected(root)
    scanned, scandir = [], os.scandir
    monkeypatch.setattr(listing.os, "scandir", lambda path: scanned.append(path[len(str(root)) :]) or scandir(path))
    for glob, folders in [
        ("*.txt", ["/"]),
        ("[!a]*/*.md", ["/", "/c/", "/empty/", "/z/", "/ß/", "/日本/"]),
        ("c/**/*.parquet", ["/c/", "/c/deep/", "/c/deep/er/", "/c/deep/er/still/"]),
        ("[ab]", ["/", "/a/", "/a/y/"]),
        ("a[/]y/*", [d[len(str(root)) :] + "/" for d, _, _ in os.walk(root)]),
    ]:
        scanned.clear()
        rows, _, _ = listed([f"{root}/{glob}"])
        pattern = re.compile(listing._translated(glob) + "(?:/.*)?")
        assert [r[0] for r in rows] == [r[0] for r in want if pattern.fullmatch(r[0][len(str(root)) + 1 :])], glob
        assert sorted(scanned) == sorted(folders), glob


def test_a_directory_of_skipped_files_is_one_page_of_counts(tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.png").write_bytes(b"x")
    pages = list(list_pages([str(tmp_path)]))
    assert [(p.entries.num_rows, p.skipped) for p in pages] == [(0, 5)]


def test_listing_a_large_tree_holds_no_structure_per_file(tmp_path):
    """20k files in 200 directories: the listing's memory peak is a page's and a directory's, not the tree's."""
    n, per_dir, page_size = 20_000, 100, 500
    for d in range(n // per_dir):
        sub = tmp_path / f"d{d:03d}" / "inner"
        sub.mkdir(parents=True)
        for i in range(per_dir):
            (sub / f"f{i:03d}.txt").write_bytes(b"")
    listed([str(tmp_path / "d000")])  # what the first listing of a process loads once is not the listing's
    tracemalloc.start()
    try:
        count, last = 0, ""
        for page in list_pages([str(tmp_path)], page_size=page_size):
            uris = page.entries.column("uri").to_pylist()
            assert uris[0] > last
            count, last = count + len(uris), uris[-1]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    # A (uri, size) tuple with its ~60-character path is ~200 bytes of Python objects: 20k of them ~4 MB.
    # Pages live in Arrow buffers (not traced); a directory's sorted entries and a page's lists are ~100 KB.
    assert peak < 1_000_000, peak


def test_a_skipped_json_file_is_told_how_json_lines_are_read(tmp_path, caplog):
    """C4's shards are JSON Lines named .json.gz, read as such; uncompressed, .json, which may as well be one JSON
    document (a config, an array), so it is skipped, and the warning says how to have it read."""
    (tmp_path / "c4-train.00000-of-01024.json").write_text('{"text": "x", "url": "u"}\n')
    with caplog.at_level(logging.WARNING, logger="docembed"):
        rows, skipped, _ = listed([str(tmp_path)], page_size=10)
    assert rows == [] and skipped == 1
    [said] = [r.getMessage() for r in caplog.records]
    assert said.endswith(f"{kinds.described()}; JSON Lines in .json files are read once the files are named .jsonl")


def test_skipped_kinds_are_said_once_each(tmp_path, caplog, monkeypatch):
    for name in ["a.csv", "b.csv", "c.CSV", "README", "d.tsv", "e.zst", "f.txt"]:
        (tmp_path / name).write_text("x")
    monkeypatch.setattr(listing, "SAID_SUFFIXES", 2)
    with caplog.at_level(logging.WARNING, logger="docembed"):
        rows, skipped, _ = listed([str(tmp_path)], page_size=1)
    assert [r[0] for r in rows] == [str(tmp_path / "f.txt")] and skipped == 6
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"docembed: skipped {tmp_path / name}, and any other {ending}: docembed reads {kinds.described()}"
        for name, ending in [("a.csv", "*.csv"), ("d.tsv", "*.tsv")]  # README: no suffix, not said
    ]
