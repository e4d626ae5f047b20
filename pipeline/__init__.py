"""docembed's data plane: documents in storage -> chunks -> embeddings in Parquet.

Public API:
  Embedder   texts -> embeddings with the job's own encoder (notebooks, tests, queries)
  JobConfig  the job's configuration
  run_job    runs the Ray Data job for a JobConfig
"""

import importlib

__all__ = ["Embedder", "JobConfig", "run_job"]

# Loaded on first use (PEP 562): the extraction sandbox's child process imports
# pipeline.extract and must not pay the seconds and memory of loading JAX.
_EXPORTS = {
    "Embedder": ("pipeline.encode.embedder", "Embedder"),
    "JobConfig": ("pipeline.config", "JobConfig"),
    "run_job": ("pipeline.run.job", "run"),
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    return getattr(importlib.import_module(module), attr)
