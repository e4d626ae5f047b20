"""`ray job submit` for docembed, checked first.

Runs `ray job submit --working-dir . --runtime-env jobs/runtime_env.yaml` with
the options and command given (either default is left out when given, the
runtime env also when --runtime-env-json gives one). Before it, Ray's own job
client (ray.job_submission.JobSubmissionClient, as the CLI makes it) connects
to the cluster's job API: when the head refuses this shell's credentials (401
or 403: token authentication is on, and this shell sends no token or another
one), when no head answers, or when an HTTP server that is not Ray's job API
does, it prints one line saying what to set, and exits 2, where the CLI would
end in a traceback.

Why a check here: Ray 2.60 turns token authentication on for a head started
with `ray start --head` when ~/.ray/auth_token exists (any local `ray.init()`,
`docembed embed` included, writes one), but the CLI sends the token only
with RAY_AUTH_MODE=token. The refusal happens inside `ray job submit`, before
any docembed code runs on the cluster, so this is the one place of ours that sees it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import sys
from pathlib import Path

from ray.exceptions import AuthenticationError, RayError, RpcError

from pipeline.cli import error_line

# Each default, and the options that give what it gives: Ray refuses --runtime-env beside --runtime-env-json.
DEFAULTS = {
    "--working-dir": (".", ("--working-dir",)),
    "--runtime-env": ("jobs/runtime_env.yaml", ("--runtime-env", "--runtime-env-json")),
}
# How long a head's address may take to accept a connection before it is taken for unreachable.
CONNECT_TIMEOUT_S = 5
DASHBOARD = "http://HEAD:8265"  # the job API's address: the dashboard's
REACH = f"start the cluster (`ray up cluster.yaml`) or set RAY_ADDRESS to its dashboard, {DASHBOARD}"
# What to set, by what this shell sends: the CLI sends the token only with RAY_AUTH_MODE=token.
HINTS = {
    "no token": "{head} requires token authentication and this shell sends no token: export RAY_AUTH_MODE=token "
    "(the token is read from ~/.ray/auth_token, or RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH)",
    "token": "{head} refuses this shell's token: use the head's own (`ray get-auth-token` on the head) "
    "in ~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH",
}


def option(options: list[str], flag: str) -> str | None:
    """The value of `ray job submit`'s `flag` among `options` (`--flag V` or `--flag=V`), else None."""
    for i, arg in enumerate(options):
        if arg == flag and i + 1 < len(options):
            return options[i + 1]
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
    return None


def head_address(options: list[str]) -> str | None:
    """The head's address as the job client picks it: the environment wins over --address."""
    return os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or option(options, "--address")


def head_named(options: list[str]) -> str:
    """The head, for the message."""
    address = head_address(options)
    return f"the Ray head at {address}" if address else "the local Ray head"


def not_a_gcs(address: str, head: str) -> str | None:
    """One line where a cluster address without a scheme (HOST:PORT) cannot be the head's GCS, which the job
    client takes it for and retries for about 40 s (and `ray job submit` as long again): nothing listens
    there, or an HTTP server does (the dashboard's address given without http://). Else None."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():  # `auto` and the like: Ray's to resolve
        return None
    host = host.strip("[]")  # an IPv6 literal
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        return f"cannot reach {head} ({e}): {REACH}"
    try:  # a GCS speaks gRPC, which answers HTTP/1.1 with no status line
        web = http.client.HTTPConnection(host, int(port), timeout=CONNECT_TIMEOUT_S)
        web.request("GET", "/api/version")
        response = web.getresponse()
        response.close()
    except (OSError, http.client.HTTPException):
        return None
    if response.status == 404:
        return not_the_job_api(head)
    return f"{head} answers HTTP, so it is no GCS address: give the job API's with its scheme, http://{address}"


def not_the_job_api(head: str) -> str:
    return f"{head} answers HTTP but is not Ray's job API (404): give its dashboard's address, {DASHBOARD}"


def refusal(options: list[str]) -> str | None:
    """One line saying what to set when the job API refuses this shell's credentials, else None.

    An unreachable head, and an HTTP server that is not Ray's job API, are one
    line too. Anything else (Ray's job client not installed, bad --headers) is
    left to `ray job submit`, in its own words.
    """
    head, address = head_named(options), head_address(options)
    if address and "://" not in address and (problem := not_a_gcs(address, head)):
        return problem
    try:
        from ray.job_submission import JobSubmissionClient

        headers = option(options, "--headers") or os.environ.get("RAY_JOB_HEADERS")  # as the CLI reads them
        JobSubmissionClient(option(options, "--address"), headers=json.loads(headers) if headers else None)
    except AuthenticationError:
        sends = "token" if os.environ.get("RAY_AUTH_MODE") == "token" else "no token"
        return HINTS[sends].format(head=head)
    except (ConnectionError, RpcError) as e:  # the CLI would print it under five tracebacks, after as long again
        return f"cannot reach {head} ({str(e).strip()}): {REACH}"
    except RuntimeError as e:
        if "returned 404" in str(e):  # the job client's words for an HTTP server without the job API
            return not_the_job_api(head)
    except (ImportError, OSError, RayError, TypeError, ValueError):
        pass  # `ray job submit` says what is wrong in its own words
    return None


def ray_cli() -> str:
    beside = Path(sys.executable).with_name("ray")  # the venv's, when it is not activated
    return str(beside) if beside.exists() else shutil.which("ray") or "ray"


def main(argv: list[str] | None = None, prog: str = "jobs/submit.py") -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    options, command = argv[:split], argv[split:]
    cli = ray_cli()
    if {"-h", "--help"} & set(options):
        argparse.ArgumentParser(
            prog=prog,
            usage="%(prog)s [RAY JOB SUBMIT OPTIONS] -- COMMAND ...",
            description=__doc__.split("\n\n")[1],
            epilog="`ray job submit --help` follows: its options are this command's.",
            add_help=False,
        ).print_help()
        sys.stdout.flush()
        os.execv(cli, [cli, "job", "submit", "--help"])
    problem = refusal(options)
    if problem:
        return error_line(problem)
    given = {arg.split("=", 1)[0] for arg in options}
    defaults = [part for flag, (value, givers) in DEFAULTS.items() if not given & set(givers) for part in (flag, value)]
    os.execv(cli, [cli, "job", "submit", *defaults, *options, *command])
