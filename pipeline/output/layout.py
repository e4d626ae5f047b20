"""Where everything lives under `--output`: every file name the job writes is decided here.

_docembed.json                            written first: the output's fingerprint
_inputs/part-<k>.parquet                  the listing the run works from, each input with its group
_inputs/_LISTED.json                      written once the listing is recorded whole
embeddings/part-<group>-<digest>.parquet  chunk rows of one group (one or more parts)
errors/part-<group>-<digest>.parquet      error rows of one group
_groups/<group>.json                      a group's done-marker, written after all of its parts
_staging/                                 files being written; never read
_SUCCESS                                  written last, once every group is done
_LEASE.json                               on object stores, the running run's lease (pipeline.output.lease)
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyarrow as pa

from pipeline.schemas import rows_digest

MANIFEST_FILE = "_docembed.json"
EMBEDDINGS_DIR = "embeddings"
ERRORS_DIR = "errors"
GROUPS_DIR = "_groups"
INPUTS_DIR = "_inputs"
LISTED_FILE = f"{INPUTS_DIR}/_LISTED.json"
STAGING_DIR = "_staging"
SUCCESS_FILE = "_SUCCESS"
LEASE_FILE = "_LEASE.json"
PARTS_DIRS = (EMBEDDINGS_DIR, ERRORS_DIR)
# What a docembed run writes, and all that `--overwrite` or a reconciliation may delete.
OURS = (EMBEDDINGS_DIR, ERRORS_DIR, GROUPS_DIR, INPUTS_DIR, STAGING_DIR)
FORMAT = 2  # of this layout; part of every group id (2: the recorded listing, markers without members)


def own_files(root: str) -> tuple[str, ...]:
    """What a run writes under the output whose files' URIs start with `root` (ending in "/"), as URI
    prefixes: never inputs, even when the output lies under an input or is one."""
    files = (MANIFEST_FILE, SUCCESS_FILE, LEASE_FILE)
    return (*(f"{root}{name}/" for name in OURS), *(f"{root}{name}" for name in files))


# Any docembed output's files, by their names in it: the parts (`part_name`), the recorded listing
# (`inputs_part_path`), the markers and what is being written.
_OUTPUT_FILE = re.compile(
    "/(?:"
    + "|".join(
        [
            *(re.escape(name) for name in (MANIFEST_FILE, SUCCESS_FILE, LEASE_FILE, LISTED_FILE)),
            *(rf"{re.escape(d)}/part-[0-9a-f]+-[0-9a-f]+\.parquet" for d in PARTS_DIRS),
            rf"{re.escape(INPUTS_DIR)}/part-[0-9]+\.parquet",
            rf"{re.escape(GROUPS_DIR)}/[^/]+\.json",
            rf"{re.escape(STAGING_DIR)}/.*",
        ]
    )
    + ")$"
)


def output_file(uri: str) -> bool:
    """Whether `uri` names a file of a docembed output, by its name there. A listing leaves them out: a run into
    another output once read the first one's parts, under its input, as shards, each an error row."""
    return _OUTPUT_FILE.search(uri) is not None


def left_out(root: str) -> Callable[[str], bool]:
    """What a listing of the inputs leaves out: the run's own files (`own_files` under `root`), and any other
    docembed output's (`output_file`)."""
    own = own_files(root)
    return lambda uri: uri.startswith(own) or output_file(uri)


def part_name(group: str, table: pa.Table) -> str:
    """`part-<group>-<digest of the rows' (doc_id, chunk_index)>.parquet`: the same rows, the same name."""
    return f"part-{group}-{rows_digest(table)}.parquet"


def inputs_part_path(k: int) -> str:
    return f"{INPUTS_DIR}/part-{k:06d}.parquet"


def inputs_part_index(name: str) -> int | None:
    """k of `part-<k>.parquet` under `_inputs/`; None for anything else."""
    stem = name.removeprefix("part-").removesuffix(".parquet")
    return int(stem) if name.startswith("part-") and name.endswith(".parquet") and stem.isdigit() else None


def marker_path(group: str) -> str:
    return f"{GROUPS_DIR}/{group}.json"


def group_of_marker(name: str) -> str | None:
    """The group whose marker file is called `name`; None for anything else."""
    return name[: -len(".json")] if name.endswith(".json") else None
