"""`docembed capacity` from a checkout: `python jobs/capacity.py --input URI [options]`.

CPU cores per accelerator chip for a corpus like the input; the code is pipeline.cli.capacity.
"""

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli import run  # noqa: E402

main = functools.partial(run, "capacity", prog="jobs/capacity.py")  # main(argv=None): the command line's own by default


if __name__ == "__main__":
    sys.exit(main())
