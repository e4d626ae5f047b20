"""`docembed search` from a checkout: `python jobs/search.py --output DIR --query TEXT [--top K]`.

The code is pipeline.cli.search.
"""

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli import run  # noqa: E402

main = functools.partial(run, "search", prog="jobs/search.py")  # main(argv=None): the command line's own by default


if __name__ == "__main__":
    sys.exit(main())
