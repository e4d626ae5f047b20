"""Embed a corpus: documents in storage -> chunks -> embeddings in Parquet.

Options may also come from a YAML file (`--config job.yaml`); flags override it.

Runs on the Ray cluster named by RAY_ADDRESS, or on a local Ray started in
this process when it is unset. Bad arguments, a missing input, an unreadable
model, an unwritable output or a mesh the encoder hosts cannot hold end the job
with one line on stderr and exit 2; Ctrl-C or SIGTERM with one line and exit
130 or 143 (the same command resumes).
"""

from __future__ import annotations

from pipeline.run.allocator import arrow_on_malloc

# Before any import loads pyarrow: then all of the driver's Arrow buffers come from glibc (pipeline.run.allocator).
arrow_on_malloc()

import logging  # noqa: E402

from pipeline import run_job  # noqa: E402
from pipeline.cli import error_line  # noqa: E402
from pipeline.errors import UserError  # noqa: E402
from pipeline.io.uris import redact  # noqa: E402
from pipeline.options import parse_job_args  # noqa: E402
from pipeline.run.console import docembed_level  # noqa: E402


def main(argv: list[str] | None = None, prog: str = "jobs/embed.py") -> int:
    logging.basicConfig(format="%(message)s")
    try:
        cfg = parse_job_args(argv, __doc__.split("\n\n")[0], prog)
        logging.getLogger("docembed").setLevel(docembed_level(cfg.verbosity))
        report = run_job(cfg)
    except UserError as e:
        return error_line(str(e))
    if report is None:
        print(f"docembed: {redact(cfg.output)} already holds a finished run; nothing to do (--overwrite to redo it)")
    else:
        print(report.summary())
    return 0
