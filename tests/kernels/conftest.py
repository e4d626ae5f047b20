"""Fresh random inputs every run; the seed is printed for any failing test. Programs compiled for speed of compiling.

Rerun a failure exactly with KERNELS_TEST_SEED=<seed>.
"""

import os
import secrets

import jax
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def compiled_without_llvm_optimisation():
    """The kernel tests compile many small programs that each run once: XLA's HLO passes all run, and LLVM
    compiles what XLA emits at -O0 (JAX's jax_disable_most_optimizations). Alone in one process, on an AMD
    EPYC Zen 3: test_attention.py 208 s instead of 251 s, encoders/test_families.py 146 s instead of 198 s.
    Not for the tests that run the real model on many texts: test_stage.py took twice as long, and the
    jobs' actors, the CLI's children and the notebooks compile as the product does (BENCHMARKS.md)."""
    before = jax.config.values["jax_disable_most_optimizations"]  # True where the run's environment asked for it
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


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
