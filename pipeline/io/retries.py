"""Retrying whole storage operations, and saying in one redacted line why one failed.

The SDKs retry each request themselves (S3: the AWS SDK's default strategy,
which backs off on SlowDown, throttling and 5xx; GCS: google-cloud-cpp's policy);
`retrying` retries whole operations on top, so a connection dropped mid-object
is read again. What still fails is `StorageError`, one line with credentials
scrubbed: infrastructure failures stop the job, they never become error rows.
"""

from __future__ import annotations

import contextlib
import random
import re
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from pipeline.errors import StorageError, first_line
from pipeline.io.uris import redact

T = TypeVar("T")

ATTEMPTS = 3  # per whole operation, on top of the SDK's retries
BACKOFF_SECONDS = 0.5
# A file that is not there (or not a file): the caller's to handle, never retried or wrapped.
NOT_FOUND = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)

# Errors that retrying cannot fix: missing things and refused or missing credentials. "HTTP status code: 403" is
# google-cloud-cpp's wording, "HTTP status 403" pyarrow-S3's; google-cloud-cpp says it "Could not create a OAuth2
# access token" without credentials, after retrying for GCS_RETRY_SECONDS.
_PERMANENT = re.compile(
    r"ACCESS_DENIED|AccessDenied|SIGNATURE_DOES_NOT_MATCH|INVALID_ACCESS_KEY_ID|InvalidAccessKeyId|NO_SUCH_BUCKET|"
    r"NO_SUCH_KEY|RESOURCE_NOT_FOUND|PERMISSION_DENIED|UNAUTHENTICATED|Permanent error|"
    r"HTTP status (?:code: )?40[0134]\b|OAuth2 access token"
)
_STORAGE_CLIENT = re.compile(r"google::cloud::Status|AWS Error")
# S3 answers a HEAD with an invalid or expired session token with a bare 400 (a HEAD has no body to say why).
_CREDENTIALS = re.compile(
    r"ACCESS_DENIED|AccessDenied|SIGNATURE|INVALID_ACCESS_KEY|PERMISSION_DENIED|UNAUTHENTICATED|40[13]\b|"
    r"HTTP status 400\b|OAuth2 access token"
)


def describe(e: BaseException) -> str:
    """One redacted line for a storage exception, with a hint when credentials look wrong."""
    if isinstance(e, StorageError):  # described already, hint included
        return str(e)
    line = redact(first_line(e))
    if _CREDENTIALS.search(str(e)):
        line += " (check the credentials in the environment)"
    return line


def is_transient(e: BaseException) -> bool:
    if isinstance(e, (*NOT_FOUND, FileExistsError)):
        return False
    return isinstance(e, OSError) and not _PERMANENT.search(str(e))


def retrying(what: str, fn: Callable[[], T], *, attempts: int = ATTEMPTS) -> T:
    """`fn()`, retried with backoff on transient storage errors; `StorageError` when it keeps failing.

    Missing files are not storage failures: FileNotFoundError and friends pass through.
    """
    for attempt in range(attempts):
        try:
            return fn()
        except NOT_FOUND:
            raise
        except ValueError as e:
            # pyarrow reports some refusals of a storage service as ArrowInvalid (a ValueError)
            if not _STORAGE_CLIENT.search(str(e)):
                raise
            raise StorageError(f"{redact(what)}: {describe(e)}") from None
        except OSError as e:
            if not is_transient(e):
                raise StorageError(f"{redact(what)}: {describe(e)}") from None
            if attempt == attempts - 1:
                raise StorageError(f"{redact(what)}: still failing after {attempts} attempts: {describe(e)}") from None
            time.sleep(BACKOFF_SECONDS * 2**attempt * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


@contextlib.contextmanager
def failing_at(where: str) -> Iterator[None]:
    """A `StorageError` raised inside gets `where` (e.g. "output s3://b/x") in front: which location failed."""
    try:
        yield
    except StorageError as e:
        raise StorageError(f"{redact(where)}: {e}") from None
