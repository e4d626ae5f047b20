"""`interruptible` (pipeline.run.shutdown): SIGINT and SIGTERM raise Interrupted, except a signal the process was
started with ignored. In a child process, whose signals a test may change."""

import subprocess
import sys

from support import REPO

CHILD = """
import os, signal, sys, time
from pipeline.run.shutdown import Interrupted, interruptible
if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a script's background job
try:
    with interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        print("SIGINT ignored", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
except Interrupted as e:
    print(e)
print("SIGINT after:", signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
"""


def run(started_with: str) -> list[str]:
    child = subprocess.run([sys.executable, "-c", CHILD, started_with], cwd=REPO, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    return child.stdout.splitlines()


def test_a_signal_ignored_from_the_start_stays_ignored_and_the_other_still_stops_the_run():
    assert run("ignored") == ["SIGINT ignored", "stopped by SIGTERM", "SIGINT after: True"]


def test_sigint_stops_the_run_when_the_process_takes_it():
    assert run("default") == ["stopped by SIGINT", "SIGINT after: False"]


SWALLOWED = """
import os, signal, time
from pipeline.run.shutdown import Interrupted, interruptible, stop
signal.signal(signal.SIGINT, stop)


class Swallows:
    def __del__(self):  # Python prints "Exception ignored in" for what a __del__ raises, and goes on
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)


Swallows()
print("went on", flush=True)
try:
    with interruptible():
        print("the run ran")
except Interrupted as e:
    print(e)
"""


def test_a_stop_swallowed_where_it_landed_still_stops_the_run_before_it_begins():
    """A handler's raise can land in code that swallows it (an extension module's import hook does, as the
    command starts): the run's entry raises it again, so the command stops instead of running to its end."""
    child = subprocess.run([sys.executable, "-c", SWALLOWED], cwd=REPO, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert "Exception ignored" in child.stderr, child.stderr
    assert child.stdout.splitlines() == ["went on", "stopped by SIGINT"]
