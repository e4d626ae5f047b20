"""Fresh random inputs every run; the seed is printed for any failing test.

Rerun a failure exactly with KERNELS_TEST_SEED=<seed>.
"""

import os
import secrets

import numpy as np
import pytest


@pytest.fixture
def seeded_rng(request) -> np.random.Generator:
    seed = int(os.environ.get("KERNELS_TEST_SEED") or secrets.randbits(32))
    request.node.kernels_seed = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    seed = getattr(item, "kernels_seed", None)
    if report.failed and seed is not None:
        report.sections.append(("random seed", f"rerun with KERNELS_TEST_SEED={seed}"))
