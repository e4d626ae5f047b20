"""`docembed embed` from a checkout: `python jobs/embed.py --input URI [--input URI ...] --output URI [options]`.

What `ray job submit --working-dir . -- python jobs/embed.py ...` runs on a
cluster; the code is pipeline.cli.embed.
"""

import sys
from pathlib import Path

# `python jobs/embed.py` from a checkout (or a Ray job's working dir) must find the packages.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli.embed import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
