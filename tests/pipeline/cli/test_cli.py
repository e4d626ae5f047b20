"""The `docembed` command itself: its help and version, each command's help, and what installs it."""

import functools
import re
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from jobs import capacity, embed, search
from pipeline.cli import COMMANDS, main
from pipeline.options import options_of

from support import REPO, SAMPLES

DOCEMBED = Path(sys.executable).with_name("docembed")  # the console script `pip install .` puts beside python
SCRIPTS = {"embed": embed.main, "search": search.main, "capacity": capacity.main}


def shown(capsys, run) -> tuple[int, str, str]:
    """The exit code of `run()`, which ends in argparse's exit, and what it printed to stdout and stderr."""
    with pytest.raises(SystemExit) as exited:
        run()
    printed = capsys.readouterr()
    return exited.value.code, printed.out, printed.err


def flags(help_text: str) -> set[str]:
    return set(re.findall(r"^  (--?[a-z][\w-]*)", help_text, re.MULTILINE))


def test_help_lists_every_command_and_a_bad_one_is_one_error_line(capsys):
    code, out, _ = shown(capsys, lambda: main(["--help"]))
    assert code == 0 and out.startswith("usage: docembed [-h] [--version] COMMAND [options]")
    assert all(f"  {name:9s} {summary}\n" in out for name, summary in COMMANDS.items()), out
    for argv, message in [([], "required: COMMAND"), (["embedd", "--input", "x"], "invalid choice: 'embedd'")]:
        code, _, err = shown(capsys, lambda argv=argv: main(argv))
        assert code == 2 and message in err and err.count("\n") == 1, err
        assert err.startswith("docembed: error: ") and err.endswith("(see docembed --help)\n"), err


def test_options_before_the_command_are_one_line_saying_where_they_go(capsys):
    # Only the first word is docembed's: "--quiet embed" once read as no command at all.
    assert main(["--quiet", "embed", "--input", "samples"]) == 2
    assert capsys.readouterr().err == (
        "docembed: error: options go after the command: docembed embed --quiet ... (see docembed --help)\n"
    )


@pytest.mark.parametrize("command", ["embed", "search", "capacity"])
def test_each_commands_help_offers_exactly_its_scripts_options(capsys, command):
    """`docembed COMMAND --help` and `python jobs/COMMAND.py --help`: one parser, the options table's rows for it."""
    code, out, _ = shown(capsys, lambda: main([command, "--help"]))
    assert code == 0 and out.startswith(f"usage: docembed {command} ")
    script_code, script_out, _ = shown(capsys, lambda: SCRIPTS[command](["--help"]))
    assert script_code == 0 and script_out.startswith(f"usage: jobs/{command}.py ")
    config_file = {"--config"} if command == "embed" else set()
    assert flags(out) == flags(script_out) == {"-h"} | config_file | {o.flag for o in options_of(command)}


def test_submit_help_is_docembeds_then_ray_job_submits():
    result = subprocess.run([DOCEMBED, "submit", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: docembed submit [RAY JOB SUBMIT OPTIONS] -- COMMAND ...")
    assert "Usage: ray job submit" in result.stdout and "--submission-id" in result.stdout


def test_version_names_docembed_jax_ray_and_pyarrow_without_importing_them(tmp_path):
    """From another directory, so that `python -m docembed` finds the installed package, not the checkout."""
    expected = "docembed {} (jax {}, ray {}, pyarrow {})".format(
        *(metadata.version(d) for d in ("docembed", "jax", "ray", "pyarrow"))
    )
    script = subprocess.run([DOCEMBED, "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert script.returncode == 0 and script.stdout.strip() == expected, script.stdout + script.stderr
    module = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "docembed", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert module.returncode == 0 and module.stdout.strip() == expected, module.stdout + module.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in module.stderr.splitlines() if line.startswith("import")}
    assert "pipeline.cli" in imported
    assert not [m for m in imported if m.split(".")[0] in ("jax", "ray", "pyarrow")]


def test_the_console_script_is_the_installed_distributions():
    [script] = [ep for ep in metadata.entry_points(group="console_scripts") if ep.name == "docembed"]
    assert script.value == "pipeline.cli:main" and script.dist.name == "docembed"
    assert DOCEMBED.exists(), "pip install . did not put the docembed script beside python"


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (its /proc status's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return bool(int(re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.MULTILINE)[1], 16) >> (signum - 1) & 1)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_while_the_command_starts_is_one_line_saying_nothing_was_written(tmp_path, signum, code):
    # Once `docembed` has its SIGTERM handler, half a second on: it is importing the command, or starting Ray,
    # before the run's own handlers are in place. (SIGINT back to its default: an xdist worker ignores it.)
    # The output is not begun yet, so the line promises no finished groups to resume.
    out = tmp_path / "out"
    argv = [str(DOCEMBED), "embed", "--input", str(SAMPLES), "--output", str(out)]
    reset = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, preexec_fn=reset)
    deadline = time.monotonic() + 60
    while not catches(process.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    last = stderr.strip().splitlines()[-1]
    assert last == f"docembed: stopped by {signal.Signals(signum).name} before anything was written", stderr
    assert "Traceback" not in stderr, stderr
    assert not out.exists()


def test_a_sigterm_ignored_from_the_start_stays_ignored():
    child = """
import contextlib, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a parent that shields its children from SIGTERM starts them
from pipeline.cli import main
with contextlib.suppress(SystemExit):
    main(["capacity", "--help"])
print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)
"""
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "True", result.stderr


SWALLOWED_IN_AN_IMPORT = """
import os, runpy, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts from a terminal (xdist ignores it)


class Swallows:
    # An import hook that swallows what lands in it, as some extension modules' do; returns None: not its module.
    def find_spec(self, name, path=None, target=None):
        if name == "pipeline.cli.embed":
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
            except BaseException as e:
                print("swallowed", type(e).__name__, flush=True)


sys.meta_path.insert(0, Swallows())
sys.argv = ["jobs/embed.py", "--help"]
runpy.run_path("jobs/embed.py", run_name="__main__")
"""


def test_a_ctrl_c_that_an_import_swallows_still_stops_jobs_embed_py():
    """`jobs/embed.py` (what `ray job submit` runs) takes the signals before it imports the command, as `docembed`
    does: it once kept Python's KeyboardInterrupt until the run began, so a swallowed one was lost, and the
    command ran on (here, printed its help)."""
    child = subprocess.run([sys.executable, "-c", SWALLOWED_IN_AN_IMPORT], cwd=REPO, capture_output=True, text=True)
    assert child.returncode == 130, child.stdout + child.stderr
    assert child.stdout == "swallowed Interrupted\n", child.stdout
    assert child.stderr.splitlines()[-1] == "docembed: stopped by SIGINT before anything was written", child.stderr
