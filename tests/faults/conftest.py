"""Fixtures for the fault tests: a module-scoped local Ray (the corpora are scenarios.write_corpus's)."""

from __future__ import annotations

import pytest

import scenarios


@pytest.fixture(scope="module")
def ray_local():
    with scenarios.local_ray():
        yield
