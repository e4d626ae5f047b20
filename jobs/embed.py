"""Embed a corpus: `python jobs/embed.py --input URI [--input URI ...] --output URI [options]`.

Options may also come from a YAML file (`--config job.yaml`); flags override it.

Runs on the Ray cluster named by RAY_ADDRESS, or on a local Ray started in
this process when it is unset. Bad arguments, a missing input, an unreadable
model, an unwritable output or a mesh the encoder hosts cannot hold end the job
with one line on stderr and exit 2; Ctrl-C or SIGTERM with one line and exit
130 or 143 (the same command resumes).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

# `python jobs/embed.py` from a checkout (or a Ray job's working dir) must find the packages.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import run_job  # noqa: E402
from pipeline.errors import UserError  # noqa: E402
from pipeline.io.filesystems import redact  # noqa: E402
from pipeline.options import parse_job_args  # noqa: E402
from pipeline.run.console import docembed_level  # noqa: E402
from pipeline.run.shutdown import Interrupted  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(message)s")
    try:
        cfg = parse_job_args(sys.argv[1:] if argv is None else argv, __doc__.split("\n\n")[0])
        logging.getLogger("docembed").setLevel(docembed_level(cfg.verbosity))
        report = run_job(cfg)
    except UserError as e:
        print(f"docembed: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"docembed: {e}; finished groups are kept: rerun the same command to resume", file=sys.stderr)
        return e.exit_code
    if report is None:
        print(f"docembed: {redact(cfg.output)} already holds a finished run; nothing to do (--overwrite to redo it)")
    else:
        print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
