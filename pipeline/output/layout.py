"""Where everything lives under `--output`: every file name the job writes is decided here.

_docembed.json                            written first: the output's fingerprint
embeddings/part-<group>-<digest>.parquet  chunk rows of one group (one or more parts)
errors/part-<group>-<digest>.parquet      error rows of one group
_groups/<group>.json                      a group's done-marker, written after all of its parts
_staging/                                 files being written; never read
_SUCCESS                                  written last, once every group is done
"""

from __future__ import annotations

import pyarrow as pa

from pipeline.schemas import rows_digest

MANIFEST_FILE = "_docembed.json"
EMBEDDINGS_DIR = "embeddings"
ERRORS_DIR = "errors"
GROUPS_DIR = "_groups"
STAGING_DIR = "_staging"
SUCCESS_FILE = "_SUCCESS"
PARTS_DIRS = (EMBEDDINGS_DIR, ERRORS_DIR)
# What a docembed run writes, and all that `--overwrite` or a reconciliation may delete.
OURS = (EMBEDDINGS_DIR, ERRORS_DIR, GROUPS_DIR, STAGING_DIR)
FORMAT = 1  # of this layout; part of every group id


def part_name(group: str, table: pa.Table) -> str:
    """`part-<group>-<digest of the rows' (doc_id, chunk_index)>.parquet`: the same rows, the same name."""
    return f"part-{group}-{rows_digest(table)}.parquet"


def marker_path(group: str) -> str:
    return f"{GROUPS_DIR}/{group}.json"


def group_of_marker(name: str) -> str | None:
    """The group whose marker file is called `name`; None for anything else."""
    return name[: -len(".json")] if name.endswith(".json") else None
