"""Whole storage operations retried on transient errors, and one line when they keep failing."""

from __future__ import annotations

import pytest

from pipeline.errors import StorageError
from pipeline.io import retries


def test_retrying_retries_transient_errors_and_gives_up_in_one_line(monkeypatch):
    monkeypatch.setattr(retries, "BACKOFF_SECONDS", 0.001)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("AWS Error SLOW_DOWN during GetObject operation: Please reduce your request rate.")
        return "ok"

    assert retries.retrying("read x", flaky) == "ok" and len(calls) == 3

    def down():
        raise OSError("AWS Error NETWORK_CONNECTION during GetObject\nsecond line")

    with pytest.raises(StorageError, match="still failing after 3 attempts") as e:
        retries.retrying("read x", down)
    assert "\n" not in str(e.value)

    def refused():
        calls.append(1)
        raise OSError("AWS Error ACCESS_DENIED during HeadObject operation")

    calls.clear()
    with pytest.raises(StorageError, match="check the credentials"):
        retries.retrying("read x", refused)
    assert len(calls) == 1  # permanent: not retried

    def missing():
        raise FileNotFoundError("gone")

    with pytest.raises(FileNotFoundError):
        retries.retrying("read x", missing)


@pytest.mark.parametrize(
    "error",
    [
        # pyarrow-S3 with an invalid or expired AWS_SESSION_TOKEN: a HEAD's bare 400
        "When getting information for key 'w' in bucket 'in1': AWS Error UNKNOWN (HTTP status 400) during HeadObject "
        "operation: No response body.",
        # GCS without credentials: google-cloud-cpp has retried for GCS_RETRY_SECONDS already
        "google::cloud::Status(UNAVAILABLE: Retry policy exhausted, with a last message of Could not create a OAuth2 "
        "access token to authenticate the request. ...)",
    ],
)
def test_refused_or_missing_credentials_fail_at_once_with_the_hint(error):
    calls = []

    def refused():
        calls.append(1)
        raise OSError(error)

    with pytest.raises(StorageError, match=r"\(check the credentials in the environment\)$"):
        retries.retrying("read x", refused)
    assert len(calls) == 1


def test_a_storage_error_described_again_says_the_hint_once():
    # As sink.check_writable does with what its probe's write raised: "not writable: <describe(e)>".
    def refused():
        raise OSError("AWS Error ACCESS_DENIED during PutObject operation")

    with pytest.raises(StorageError) as e:
        retries.retrying("cannot write probe", refused)
    assert retries.describe(e.value) == str(e.value) and str(e.value).count("check the credentials") == 1
