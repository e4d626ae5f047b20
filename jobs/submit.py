"""`docembed submit` from a checkout: `python jobs/submit.py [OPTIONS] -- python jobs/embed.py ...`.

`ray job submit` with docembed's defaults, checked for token authentication
first; the code is pipeline.cli.submit.
"""

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli import run  # noqa: E402

main = functools.partial(run, "submit", prog="jobs/submit.py")  # main(argv=None): the command line's own by default


if __name__ == "__main__":
    sys.exit(main())
