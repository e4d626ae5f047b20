"""The job's driver, as `ray job submit` runs it, with the crash tests' knobs.

- Small encoder calls, listing pages and recorded parts, so that the tests' small corpus is listed,
  recorded and committed in many steps.
- With DOCEMBED_TEST_DIE_AFTER_MARKER set, it SIGKILLs itself right after it
  marks a group done: on a fast store markers land in bursts, and a test polling
  from outside could not stop the run between one and `_SUCCESS`.
- With DOCEMBED_TEST_DIE_AFTER_PART=k, right after it records part k of the
  listing: the listing is then recorded in part, the rest not yet listed.
"""

import functools
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pipeline.run.job as job  # noqa: E402
from jobs.embed import main  # noqa: E402
from pipeline.io import listing  # noqa: E402
from pipeline.output import ledger  # noqa: E402
from pipeline.run import feed  # noqa: E402

job.ENCODE_CALL_BATCHES = 2
job.list_pages = functools.partial(listing.list_pages, page_size=3)
feed.FIRST_PART_ROWS = 2
feed.PART_ROWS = 4


def die():
    os.kill(os.getpid(), signal.SIGKILL)


if os.environ.get("DOCEMBED_TEST_DIE_AFTER_MARKER"):
    write = ledger.Ledger._write_marker

    def write_then_die(self, marker, committed):
        write(self, marker, committed)
        die()

    ledger.Ledger._write_marker = write_then_die

if os.environ.get("DOCEMBED_TEST_DIE_AFTER_PART"):
    record = feed.Recorder._record

    def record_then_die(self, fs, root, k, tables):
        record(self, fs, root, k, tables)
        if k == int(os.environ["DOCEMBED_TEST_DIE_AFTER_PART"]):
            die()

    feed.Recorder._record = record_then_die

sys.exit(main(sys.argv[1:]))
