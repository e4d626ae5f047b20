"""The job's driver, as `ray job submit` runs it, with the crash tests' two knobs.

- Small encoder calls, so that the tests' small corpus is committed in many steps.
- With DOCEMBED_TEST_DIE_AFTER_MARKER set, it SIGKILLs itself right after it
  marks a group done: on a fast store markers land in bursts, and a test polling
  from outside could not stop the run between one and `_SUCCESS`.
"""

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pipeline.run.job as job  # noqa: E402
from jobs.embed import main  # noqa: E402
from pipeline.output import ledger  # noqa: E402

job.ENCODE_CALL_BATCHES = 2

if os.environ.get("DOCEMBED_TEST_DIE_AFTER_MARKER"):
    count = ledger.Ledger.add

    def count_then_die(self, summary):
        marker = count(self, summary)
        if marker is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return marker

    ledger.Ledger.add = count_then_die

sys.exit(main(sys.argv[1:]))
