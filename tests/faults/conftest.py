"""Fixtures for the fault tests: a Ray of the module's own (the corpora are scenarios.write_corpus's)."""

from __future__ import annotations

import pytest

import scenarios


@pytest.fixture(scope="module")
def own_ray():
    """Not the job modules' shared `ray_local`: a run whose actors were killed, or that soaked 1,000 batches, ends
    with its Ray, so nothing it leaves behind runs beside the next module's tests."""
    with scenarios.local_ray():
        yield
