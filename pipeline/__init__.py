"""docembed's data plane: documents in storage -> chunks -> embeddings in Parquet.

Public API:
  Embedder   texts -> embeddings with the job's own encoder (notebooks, tests, queries)
  JobConfig  the job's configuration
  run_job    runs the Ray Data job for a JobConfig
"""

from pipeline.config import JobConfig
from pipeline.embedder import Embedder
from pipeline.job import run as run_job

__all__ = ["Embedder", "JobConfig", "run_job"]
