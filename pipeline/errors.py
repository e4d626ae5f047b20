"""Every error type of the pipeline, in one place.

- `UserError` and its kinds are the user's to fix: the job reports them in one
  line and exits non-zero.
- `StorageError` is infrastructure (storage down, throttling, credentials): one
  line, no `_SUCCESS`, finished groups kept for the rerun.
- `ClusterError` is infrastructure too: a local Ray that does not start. One
  line, nothing written.
- `SandboxError`: the extraction sandbox cannot run at all; it stops the job.
- `DocumentError` (and `ShardError`) is one document's fault: an error row, and
  the job carries on.

Anything else is a bug or an infrastructure failure and keeps its traceback.
"""


class UserError(Exception):
    """Base: a problem with the job's arguments or the things they name."""


class ConfigError(UserError, ValueError):
    """An option with a value the job cannot use."""


class ModelError(UserError):
    """The model directory is missing, incomplete, or not what it claims to be."""


class InputError(UserError):
    """An input path or URI that does not exist, cannot be listed, or holds no documents."""


class OutputError(UserError):
    """The output location cannot be written."""


class StorageError(UserError):
    """Storage refused or kept failing after retries (down, throttling, wrong credentials).

    Infrastructure, not a document's fault: the job stops with one line and writes
    no `_SUCCESS`; groups it had finished stay done, so a rerun resumes.
    """


class ClusterError(UserError):
    """The private local Ray did not start here (its temporary directory, its ports, a raylet that never came up)."""


class SandboxError(RuntimeError):
    """The extraction sandbox itself cannot run: not a document's fault, so it stops the job."""


class DocumentError(Exception):
    """This document cannot yield text; the job records it as an error row and carries on."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


class ShardError(DocumentError):
    """A shard (jsonl or Parquet file of many documents) that cannot be read on: one error row for the shard."""


def first_line(e: BaseException) -> str:
    """An exception's first line, for a one-line message: its type's name where it says nothing."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
