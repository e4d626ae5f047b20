"""The kinds of input file docembed reads, by file name: one table for the listing, the extractors and the shards.

    .pdf                 'pdf'      one document, text per page (pipeline.extract)
    .txt, .md            'text'     one document (pipeline.extract)
    .jsonl, .ndjson      'jsonl'    a shard: one document per line (pipeline.io.shards)
    .jsonl, .ndjson      'jsonl'    the same, compressed whole: gzip, zstd or bzip2
      or .json                      (`.json.gz` is how C4 and Dolma name their JSON Lines;
      + .gz, .zst, .bz2             `.ndjson`, newline-delimited JSON, is the same format)
    .parquet             'parquet'  a shard: one document per row (pipeline.io.shards)

Any other file is not an input: the listing skips it and counts it (a plain `.json` too: see SKIPPED_HINTS).
"""

from __future__ import annotations

# A whole file's compression, by its last suffix -> the codec's name in Arrow (pyarrow.Codec).
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".bz2": "bz2"}
# Longest suffix first: ".jsonl.gz" before anything it ends with.
SUFFIXES = (
    (".pdf", "pdf"),
    (".txt", "text"),
    (".md", "text"),
    *((base + suffix, "jsonl") for base in (".jsonl", ".ndjson", ".json") for suffix in COMPRESSIONS),
    (".jsonl", "jsonl"),
    (".ndjson", "jsonl"),
    (".parquet", "parquet"),
)
SHARD_KINDS = ("jsonl", "parquet")
# What a user can do about a kind of file the listing skips, said in its warning where something can be done.
SKIPPED_HINTS = {
    # A .json file may hold one JSON document (an array, a config) as well as JSON Lines: read as lines, each would
    # be an error row. C4's and Dolma's shards, uncompressed, are .json.
    ".json": "JSON Lines in .json files are read once the files are named .jsonl",
}


def kind_of(path: str) -> str | None:
    """The kind of the file at `path` ('pdf', 'text', 'jsonl', 'parquet'), or None for one docembed does not read."""
    lower = path.lower()
    for suffix, kind in SUFFIXES:
        if lower.endswith(suffix):
            return kind
    return None


def described() -> str:
    """The suffixes read, for messages."""
    return ", ".join(suffix for suffix, _ in SUFFIXES)
