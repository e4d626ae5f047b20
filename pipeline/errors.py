"""Errors that are the user's to fix: the job reports them in one line and exits non-zero.

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
