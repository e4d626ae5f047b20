"""PDF extraction in a child process, with a time and a memory bound per document.

PDF parsers read untrusted input: a crafted file can loop for ever, inflate a
stream to gigabytes, or crash PDFium's C code. A `Sandbox` runs
`pipeline.extract.extract_pages` in a persistent child process (a plain
`python -m pipeline.extract.sandbox`, so it loads the extractors and nothing of Ray or
JAX) and waits for each document at most `timeout_s`. The child caps its own
address space at what it holds after loading the extractors plus `memory_mib`
(RLIMIT_AS), so a bomb fails in the child, not with the node's OOM killer. A
document that runs out of time, memory or crashes the child costs that one
document (an error row: ExtractTimeout, ExtractMemoryLimit, ExtractorCrashed);
the child is killed and a fresh one starts with the next document. Python's
MemoryError is ExtractMemoryLimit. PDFium aborts the process when an allocation
fails, and an abort does not say why (libc++'s and glibc's checks abort too), so
a bomb under `pdfium` is ExtractorCrashed (SIGABRT) with the memory bound in its
message.

Wire protocol over a socket pair (pickled tuples, trusted both ways: both ends
are ours): the child first sends ("ready",) or ("failed", why); then per request
(kind, data) it answers ("pages", list[str]) or ("error", error_type, message).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection
from pathlib import Path

from pipeline.checked import check_types
from pipeline.errors import ConfigError, DocumentError, SandboxError
from pipeline.extract import PDF_EXTRACTORS, extract_pages, resolve_extractor

STARTUP_TIMEOUT_S = 60  # a child that cannot import the extractors in this long is an infrastructure failure
PARENT_POLL_S = 1.0  # how often the child checks that its parent is still alive
MAX_TIMEOUT_S = 86_400  # a day for one document
MAX_MEMORY_MIB = 1 << 20  # 1 TiB of address space for one document


@dataclasses.dataclass(frozen=True)
class ExtractConfig:
    """Which PDF extractor runs, and the bounds each document gets.

    Defaults suit real PDFs with room to spare: at the rates measured on real
    PDFs (BENCHMARKS.md: 876 pages/s pdfium, 46 pypdf, per core) a 2,000-page
    PDF takes about 2 s and 45 s, and a 50 MB one a fraction of a second and
    well under the memory bound.
    """

    pdf_extractor: str = "auto"  # "auto", or a name in pipeline.extract.PDF_EXTRACTORS
    timeout_s: int = 120  # wall seconds per document
    memory_mib: int = 2048  # address space per document, on top of the child's loaded code

    def __post_init__(self):
        check_types(self, "ExtractConfig field")
        if self.pdf_extractor not in ("auto", *PDF_EXTRACTORS):
            raise ConfigError(
                f"--pdf-extractor must be one of auto, {', '.join(PDF_EXTRACTORS)}, got {self.pdf_extractor!r}"
            )
        # Upper bounds too: past them the OS refuses the timer or the limit, and every PDF would fail.
        if not 1 <= self.timeout_s <= MAX_TIMEOUT_S:
            raise ConfigError(f"--extract-timeout must be in [1, {MAX_TIMEOUT_S}] s, got {self.timeout_s}")
        if not 64 <= self.memory_mib <= MAX_MEMORY_MIB:
            raise ConfigError(f"--extract-memory must be in [64, {MAX_MEMORY_MIB}] MiB, got {self.memory_mib}")


class Sandbox:
    """One child process extracting one document at a time; restarted after a document kills it.

    Not thread-safe: one caller at a time, as in a Ray worker or actor.
    """

    def __init__(self, cfg: ExtractConfig):
        self.cfg = cfg
        self.extractor = resolve_extractor(cfg.pdf_extractor)
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        # Killed with its owner, whether that is garbage-collected or the interpreter exits.
        self._finalizer = weakref.finalize(self, Sandbox._kill, self.__dict__)

    def extract_pages(self, data: bytes, kind: str) -> list[str]:
        """Like `pipeline.extract.extract_pages`; raises DocumentError also when a bound is hit."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        try:
            self._conn.send((kind, data))
        except OSError:
            pass  # the child gave up or died while reading the document: its reply or its exit says why
        if not self._conn.poll(self.cfg.timeout_s):
            self.close()
            raise DocumentError(
                "ExtractTimeout", f"extraction took longer than the {self.cfg.timeout_s}s bound (--extract-timeout)"
            )
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            why = self._death()
            self.close()
            raise DocumentError("ExtractorCrashed", f"the extractor process died ({why}) on this document") from None
        if reply[0] == "pages":
            return reply[1]
        _, error_type, message = reply
        if error_type == "ExtractMemoryLimit":
            self.close()  # the child has exited: its heap may be in pieces
        raise DocumentError(error_type, message)

    def close(self) -> None:
        Sandbox._kill(self.__dict__)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _start(self) -> None:
        self.close()
        parent_end, child_end = socket.socketpair()
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        with child_end:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pipeline.extract.sandbox",
                    str(child_end.fileno()),
                    self.extractor,
                    str(self.cfg.memory_mib),
                ],
                pass_fds=(child_end.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self._conn = Connection(parent_end.detach())
        if not self._conn.poll(STARTUP_TIMEOUT_S):
            self.close()
            raise SandboxError(f"the extraction sandbox did not start within {STARTUP_TIMEOUT_S}s")
        hello = self._conn.recv()
        if hello[0] != "ready":
            self.close()
            raise SandboxError(f"the extraction sandbox cannot run: {hello[1]}")

    def _death(self) -> str:
        code = self._proc.wait(timeout=5)
        if code < 0:
            return f"{signal.Signals(-code).name}; memory bound {self.cfg.memory_mib} MiB"
        return f"exit code {code}"

    @staticmethod
    def _kill(state: dict) -> None:
        # A static method over the instance's dict, so the finalizer holds no reference to the instance.
        proc, conn = state.get("_proc"), state.get("_conn")
        state["_proc"] = state["_conn"] = None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if conn is not None:
            conn.close()


@functools.cache
def process_sandbox(cfg: ExtractConfig) -> Sandbox:
    """This process's sandbox for `cfg`, started on first use and kept for the process's life.

    The extraction stage runs in long-lived Ray actor or worker processes, so
    the child's start-up (0.1-0.2 s) is paid once per process, not per block.
    """
    return Sandbox(cfg)


# --- the child -----------------------------------------------------------------


def _serve(fd: int, extractor: str, memory_mib: int) -> None:
    conn = Connection(fd)
    try:
        resolve_extractor(extractor)  # imports it, so its code is part of the memory baseline below
    except Exception as e:
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    baseline = _address_space_bytes()
    resource.setrlimit(resource.RLIMIT_AS, (baseline + memory_mib * 2**20, resource.RLIM_INFINITY))
    conn.send(("ready",))
    while True:
        try:
            kind, data = conn.recv()
            conn.send(("pages", extract_pages(data, kind, extractor)))
        except EOFError:  # the parent closed its end: done
            return
        except DocumentError as e:
            conn.send(("error", e.error_type, str(e)))
        except MemoryError:
            conn.send(
                (
                    "error",
                    "ExtractMemoryLimit",
                    f"extraction needed more than the {memory_mib} MiB bound (--extract-memory)",
                )
            )
            return


def _exit_with_parent(parent: int) -> None:
    """A parent killed with SIGKILL cannot stop its child; the child notices it was orphaned and goes."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(0)


def _address_space_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
