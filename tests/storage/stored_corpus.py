"""The storage tests' corpus and what the jobs must make of it."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs

from pipeline.io.uris import doc_id_of

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"

NOTES = 12  # short text files, so that a small corpus still makes several groups
SHARD_DOCS = 8


def note_name(i: int) -> str:
    """One name holds a "#" and a space, as object keys may: its doc_id spells the "#" "%23" (`doc_id_of`), so
    that it names no shard's row."""
    return f"note-{i:02d} #{i}.txt" if i == 5 else f"note-{i:02d}.txt"


def note_text(i: int) -> str:
    return (
        f"Note {i}. Object storage keeps each file as a whole object under a key; "
        f"listing a prefix returns keys in order. This note has the number {i * 7 % 13}."
    )


def shard_rows(name: str) -> list[dict]:
    return [
        {"id": f"{name}-{i}", "text": f"Shard {name}, document {i}: a short record about item {i}."}
        for i in range(SHARD_DOCS)
    ]


def expected_docs(base: str) -> tuple[set[str], set[str]]:
    """(documents that embed, documents that fail) of `corpus` stored under `base`."""
    ok = {f"{base}/samples/pdf/{n}" for n in ("crazyones-pdfa.pdf", "google-doc-document.pdf", "pdflatex-4-pages.pdf")}
    ok |= {f"{base}/samples/text/{p.name}" for p in (SAMPLES / "text").iterdir()}
    ok |= {doc_id_of(f"{base}/notes/{note_name(i)}") for i in range(NOTES)}
    ok |= {f"{base}/shards/a.jsonl#a-{i}" for i in range(SHARD_DOCS)}
    ok |= {f"{base}/shards/b.jsonl.gz#b-{i}" for i in range(SHARD_DOCS)}
    ok |= {f"{base}/shards/c.parquet#{i}" for i in range(SHARD_DOCS)}
    ok |= {f"{base}/shards/d.jsonl.zst#d-{i}" for i in range(SHARD_DOCS)}
    failed = {
        f"{base}/samples/pdf/libreoffice-writer-password.pdf",
        f"{base}/bad/truncated.pdf",
        f"{base}/bad/zero.txt",
        f"{base}/shards/a.jsonl#line:4",
        f"{base}/shards/a.jsonl#line:5",
        f"{base}/shards/a.jsonl#a-empty",
    }
    return ok, failed


def upload(local: Path, uri: str) -> None:
    from pipeline.io.filesystems import filesystem_for

    fs, path = filesystem_for(uri)
    pafs.copy_files(str(local), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
