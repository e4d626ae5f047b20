"""Fixtures for the fault tests: a module-scoped local Ray and a corpus big enough for faults to land mid-job."""

from __future__ import annotations

import pytest

import scenarios


@pytest.fixture(scope="module")
def ray_local():
    with scenarios.local_ray():
        yield
