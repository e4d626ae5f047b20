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
