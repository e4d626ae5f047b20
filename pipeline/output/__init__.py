"""The job's output: its file layout, the Parquet sink, and the exactly-once bookkeeping that makes reruns resume."""
