"""A benchmark's contender in a process of its own: pickled requests on its stdin, pickled replies on its stdout.

For what cannot share the benchmark's process: another venv (fastembed) or other
XLA_FLAGS (read once per process). Standard library only, so any venv can run
the serving side.
"""

from __future__ import annotations

import pickle
import subprocess
import sys


class Worker:
    """The parent's side: `argv` started with `env`; calling it sends a request and returns the reply.
    The first reply, `.hello`, is what the worker says of itself once it is ready."""

    def __init__(self, argv: list[str], env: dict | None = None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.hello = pickle.load(self.proc.stdout)

    def __call__(self, request):
        pickle.dump(request, self.proc.stdin)
        self.proc.stdin.flush()
        return pickle.load(self.proc.stdout)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def serve(hello, handle) -> None:
    """The worker's side: sends `hello`, then answers each request with `handle(request)` until stdin closes.
    Whatever else the process prints goes to stderr, never among the replies."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    pickle.dump(hello, replies)
    replies.flush()
    while True:
        try:
            request = pickle.load(requests)
        except EOFError:
            return
        pickle.dump(handle(request), replies)
        replies.flush()
