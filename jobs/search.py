"""`docembed search` from a checkout: `python jobs/search.py --output DIR --query TEXT [--top K]`.

The code is pipeline.cli.search.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli.search import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
