"""A run holds its local output alone: a second run is refused; a holder that dies leaves no lock."""

import subprocess
import sys
import time

import pytest

from pipeline.errors import OutputError
from pipeline.output.resume import held_alone

from support import REPO, SAMPLES

HOLD = """
import sys, time
from pipeline.output.resume import held_alone
with held_alone(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_held_output_refuses_a_second_holder_and_an_empty_one_it_made_is_removed(tmp_path):
    out = tmp_path / "out"
    with held_alone(str(out)):
        assert out.is_dir()
        with pytest.raises(OutputError, match=r"^output .*out is being written by another run: wait for it"):
            with held_alone(str(out)):
                pass
    assert not out.exists()
    (tmp_path / "kept").mkdir()
    with held_alone(str(tmp_path / "kept")):
        (tmp_path / "kept" / "part").write_text("x")
    assert (tmp_path / "kept" / "part").exists()


def test_the_cli_is_refused_in_one_line_while_another_process_holds_the_output_and_a_killed_holder_frees_it(
    tmp_path,
):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        started = time.time()
        run = subprocess.run(
            [sys.executable, "jobs/embed.py", "--input", str(SAMPLES), "--output", str(out)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr[-3000:]
        assert "is being written by another run" in run.stderr and time.time() - started < 60
        assert list(out.iterdir()) == []  # nothing written: refused before Ray starts
    finally:
        holder.kill()
        holder.wait()
    with held_alone(str(out)):  # the kernel let go with the killed holder
        pass
