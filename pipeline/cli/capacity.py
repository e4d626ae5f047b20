"""How many CPU cores per accelerator chip a corpus like the input needs.

Measures this machine's per-core rates of the job's CPU stages on a sample of
the input, and the encoder's rate on this machine's accelerator (or takes
either as an argument), and prints cores per chip with the assumption behind
each number (pipeline.run.capacity). Nothing is written.
"""

from __future__ import annotations

from pipeline.cli import error_line
from pipeline.errors import UserError
from pipeline.options import capacity_config, parse_options
from pipeline.run.capacity import plan


def main(argv: list[str] | None = None, prog: str = "jobs/capacity.py") -> int:
    values = parse_options(argv, "capacity", prog=prog, description=__doc__.split("\n\n")[0])
    try:
        text = plan(capacity_config(values))
    except UserError as e:
        return error_line(str(e))
    print(text)
    return 0
