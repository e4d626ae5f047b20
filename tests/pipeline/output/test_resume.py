"""Opening an output: a run holds a local one alone (a second is refused, a holder that dies leaves no lock);
`--overwrite` clears what a run wrote, once, and files no fingerprint explains are refused without it."""

import json
import subprocess
import sys
import time

import pytest

from pipeline.errors import OutputError
from pipeline.output import resume
from pipeline.output.layout import GROUPS_DIR, MANIFEST_FILE, OURS, SUCCESS_FILE
from pipeline.output.resume import held_alone, open_output

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


MANIFEST = {"fingerprint": "f1", "inputs": ["/in"]}
real_clear = resume._clear


def _finished_output(out) -> None:
    """An output as a finished run leaves it, with a file of the user's beside its own."""
    for name, text in [(SUCCESS_FILE, "{}"), (MANIFEST_FILE, json.dumps(MANIFEST)), ("notes.txt", "mine")]:
        (out / name).write_text(text)
    for folder in OURS:
        (out / folder).mkdir()
    (out / GROUPS_DIR / "stale.json").write_text("{}")


def test_overwrite_of_a_finished_output_clears_what_a_run_wrote_once_and_keeps_the_rest(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    _finished_output(out)
    assert open_output(str(out), overwrite=False, manifest=MANIFEST) is None
    clears = []
    monkeypatch.setattr(resume, "_clear", lambda fs, root: clears.append(root) or real_clear(fs, root))
    state = open_output(str(out), overwrite=True, manifest=MANIFEST)
    assert state is not None and not state.done and not state.record.groups
    assert not (out / SUCCESS_FILE).exists() and not (out / GROUPS_DIR / "stale.json").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / MANIFEST_FILE).read_text()) == MANIFEST
    assert len(clears) == 1  # a clear lists every folder of a run's: on an object store, requests


def test_a_run_refuses_files_in_its_folders_without_a_fingerprint_unless_told_to_overwrite(tmp_path):
    out = tmp_path / "out"
    (out / GROUPS_DIR).mkdir(parents=True)
    (out / GROUPS_DIR / "someone-elses.json").write_text("{}")
    with pytest.raises(OutputError, match=rf"holds {GROUPS_DIR}/ but no {MANIFEST_FILE}: not a docembed output"):
        open_output(str(out), overwrite=False, manifest=MANIFEST)
    assert open_output(str(out), overwrite=True, manifest=MANIFEST) is not None
    assert not (out / GROUPS_DIR / "someone-elses.json").exists()
