"""`docembed capacity` from a checkout: `python jobs/capacity.py --input URI [options]`.

CPU cores per accelerator chip for a corpus like the input; the code is pipeline.cli.capacity.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli.capacity import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
