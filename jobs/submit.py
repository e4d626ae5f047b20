"""`ray job submit` for docembed, checked first: `python jobs/submit.py [OPTIONS] -- python jobs/embed.py ...`.

Runs `ray job submit --working-dir . --runtime-env jobs/runtime_env.yaml` with
the options and command given (either default is left out when given). Before
it, one request to the cluster's job API, made as the CLI makes its own: when
the head answers 401 or 403 (token authentication is on, and this shell sends
no token or another one), it prints one line saying what to set, and exits 2,
where the CLI would end in a traceback.

Why a check here: Ray 2.60 turns token authentication on for a head started
with `ray start --head` when ~/.ray/auth_token exists (any local `ray.init()`,
`python jobs/embed.py` included, writes one), but the CLI sends the token only
with RAY_AUTH_MODE=token. The refusal happens inside `ray job submit`, before
any docembed code runs on the cluster, so this is the one place of ours that sees it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import requests

# Where `ray job submit` sends its requests without --address or RAY_ADDRESS.
DEFAULT_ADDRESS = "http://127.0.0.1:8265"
DEFAULTS = {"--working-dir": ".", "--runtime-env": "jobs/runtime_env.yaml"}
HINTS = {
    401: "the Ray head at {address} requires token authentication and this shell sends no token: "
    "export RAY_AUTH_MODE=token (the token is read from ~/.ray/auth_token, or RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH)",
    403: "the Ray head at {address} refuses this shell's token: use the head's own "
    "(`ray get-auth-token` on the head) in ~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH",
}


def address_of(options: list[str]) -> str:
    """The job API address `ray job submit` would use: --address, then RAY_ADDRESS, then its default."""
    for i, arg in enumerate(options):
        if arg == "--address" and i + 1 < len(options):
            return options[i + 1]
        if arg.startswith("--address="):
            return arg.split("=", 1)[1]
    return os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS


def refusal(address: str) -> str | None:
    """One line saying what to set when the job API refuses this shell's credentials, else None."""
    from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled

    headers = get_auth_headers_if_auth_enabled({})  # what the CLI sends: a token only with RAY_AUTH_MODE=token
    try:
        answer = requests.get(f"{address.rstrip('/')}/api/version", headers=headers, timeout=10)
    except requests.RequestException:
        return None  # unreachable or not HTTP: `ray job submit` says so itself
    hint = HINTS.get(answer.status_code)
    return hint.format(address=address) if hint else None


def ray_cli() -> str:
    beside = Path(sys.executable).with_name("ray")  # the venv's, when it is not activated
    return str(beside) if beside.exists() else shutil.which("ray") or "ray"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    options, command = argv[:split], argv[split:]
    problem = refusal(address_of(options))
    if problem:
        print(f"docembed: error: {problem}", file=sys.stderr)
        return 2
    given = {arg.split("=", 1)[0] for arg in options}
    defaults = [part for flag, value in DEFAULTS.items() if flag not in given for part in (flag, value)]
    cli = ray_cli()
    os.execv(cli, [cli, "job", "submit", *defaults, *options, *command])


if __name__ == "__main__":
    sys.exit(main())
