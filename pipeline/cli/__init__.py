"""The `docembed` command: `docembed COMMAND [options]`, one module here per command.

`jobs/COMMAND.py` runs the same command through `run` from a checkout (what
`ray job submit --working-dir .` runs). A command's module is imported only when it
runs, so `docembed --help` and `docembed --version` load neither JAX nor Ray.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from importlib import metadata
from typing import NoReturn

from pipeline.run.shutdown import Interrupted, raise_if_stopped, restore_signals, stop_delivered, take_signals

# Each command, what it does: its code is pipeline.cli.<command>.main(argv, prog).
COMMANDS = {
    "embed": "embed a corpus into Parquet (jobs/embed.py)",
    "search": "print the chunks of a finished output closest to a query (jobs/search.py)",
    "capacity": "CPU cores per accelerator chip for a corpus like the input (jobs/capacity.py)",
    "submit": "`ray job submit` with docembed's defaults, checked for token authentication first (jobs/submit.py)",
}
# What a bug report needs, read from the installed distributions' metadata: importing JAX or Ray takes seconds.
VERSIONS_OF = ("jax", "ray", "pyarrow")


def versions() -> str:
    """`docembed X (jax Y, ray Z, pyarrow W)`, as installed."""

    def version(distribution: str) -> str:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return "not installed"

    return f"docembed {version('docembed')} ({', '.join(f'{d} {version(d)}' for d in VERSIONS_OF)})"


def error_line(message: str) -> int:
    """Says `message` on stderr in docembed's one line for the user's arguments; the exit code to return."""
    print(f"docembed: error: {message}", file=sys.stderr)
    return 2


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a command line it refuses is docembed's one error line, pointing at --help,
    not argparse's usage block (15 lines for `embed`) above its own line."""

    def error(self, message: str) -> NoReturn:
        sys.exit(error_line(f"{message} (see {self.prog} --help)"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(
        prog="docembed",
        usage="%(prog)s [-h] [--version] COMMAND [options]",
        description="Batch document embeddings: documents in storage -> chunks -> a JAX encoder -> Parquet.",
        epilog="commands:\n" + "\n".join(f"  {name:9s} {summary}" for name, summary in COMMANDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=versions())
    parser.add_argument(
        "command", choices=COMMANDS, metavar="COMMAND", help="one of the commands below; COMMAND --help: its options"
    )
    later = next((word for word in argv[1:] if word in COMMANDS), None)
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version") and later:
        return error_line(f"options go after the command: docembed {later} {argv[0]} ... (see docembed --help)")
    # Only the first word is docembed's: the rest is the command's, `submit`'s `-- COMMAND ...` included.
    command = parser.parse_args(argv[:1]).command
    return run(command, argv[1:], prog=f"docembed {command}")


def run(command: str, argv: list[str] | None = None, *, prog: str) -> int:
    """Runs `command` (a key of COMMANDS) on `argv`, the one way in for `docembed` and `jobs/COMMAND.py`.

    The signals are taken before the command's module is imported: a stop while it imports JAX, Ray and pyarrow
    (seconds), or while Ray starts, is one line and its exit code, as one during the run is. Python's own
    KeyboardInterrupt could land in an import hook that swallows it. The caller's handlers are back on return.
    """
    previous = take_signals()
    try:
        module = importlib.import_module(f"pipeline.cli.{command}")
        raise_if_stopped()  # a stop that an import swallowed (`pipeline.run.shutdown`)
        return module.main(argv, prog=prog)
    except KeyboardInterrupt:
        return stopped(Interrupted(signal.SIGINT))
    except Interrupted as e:
        return stopped(e)
    finally:
        restore_signals(previous)


def stopped(e: Interrupted) -> int:
    """Says in one line that the command was stopped, and what it left; the exit code a shell gives for the signal."""
    stop_delivered()
    if e.output_begun:
        print(f"docembed: {e}; finished groups are kept: rerun the same command to resume", file=sys.stderr)
    else:
        print(f"docembed: {e} before anything was written", file=sys.stderr)
    return e.exit_code
