"""`docembed embed` from a checkout: `python jobs/embed.py --input URI [--input URI ...] --output URI [options]`.

What `ray job submit --working-dir . -- python jobs/embed.py ...` runs on a
cluster; the code is pipeline.cli.embed.
"""

import functools
import sys
from pathlib import Path

# `python jobs/embed.py` from a checkout (or a Ray job's working dir) must find the packages.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli import run  # noqa: E402

main = functools.partial(run, "embed", prog="jobs/embed.py")  # main(argv=None): the command line's own by default


if __name__ == "__main__":
    sys.exit(main())
