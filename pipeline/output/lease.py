"""A run's lease on an object-store output: a second run on it is refused, and a dead run's lease lapses.

Object stores have no lock that its holder's death lets go of, so a run
holds `_LEASE.json` under the output and renews it every `beat_s` from a
thread. A run that finds a lease takes it over at once when it can tell the
holder is dead (a process of this host that is gone, or a run of this process
that ended), and otherwise watches it: renewed within `missed_beats` beats, it
is a live run's and this run is refused; not renewed, it is a dead run's and
is taken over.

S3 and GCS read back what was just written (both are strongly consistent), so
a claim is written, left to settle, and read back: of two runs that claimed
at once, the one whose claim was overwritten is refused. Only a run stalled
between reading no lease and writing its claim for longer than `settle_s`
could miss the other's claim; its renewals would then find the other's lease,
and the run stops at its next commit (`Lease.check`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import socket
import threading
import time
import uuid

import pyarrow.fs as pafs

from pipeline.errors import OutputError, StorageError
from pipeline.io import filesystems as storage
from pipeline.io.retries import failing_at
from pipeline.io.uris import redact
from pipeline.output.files import dumps, read_json
from pipeline.output.layout import LEASE_FILE

log = logging.getLogger("docembed")

# The runs of this process that hold a lease now: one of its leases naming any other is left from one that ended.
_HELD_HERE: set[str] = set()


@dataclasses.dataclass(frozen=True)
class LeaseTiming:
    beat_s: float = 10.0  # between renewals
    missed_beats: int = 3  # a lease not renewed for this many beats is a dead run's
    settle_s: float = 1.0  # between writing a claim and reading it back: far longer than one request takes

    @property
    def lapse_s(self) -> float:
        return self.beat_s * self.missed_beats


class Lease:
    """This run's claim on `output` (an object store's `fs`, `root`), renewed from a thread while it is held."""

    def __init__(self, fs: pafs.FileSystem, root: str, output: str, timing: LeaseTiming):
        self.fs, self.path, self.output, self.timing = fs, f"{root}/{LEASE_FILE}", output, timing
        self.mine = {
            "run": uuid.uuid4().hex,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "beat": 0,
        }
        self.lost: str | None = None  # what a renewal found instead of this run's lease
        self._renewed = time.monotonic()  # when this run's lease was last written
        self._stop = threading.Event()
        self._beating = threading.Thread(target=self._renew, name="docembed-lease", daemon=True)

    def take(self) -> None:
        """Claims the output, or OutputError naming the run that holds it; then renews the claim from a thread."""
        with failing_at(f"output {self.output}"):
            held = self._read()
            if held is not None and not _dead(held):
                held = self._watch(held)
            if held is not None:
                log.info("docembed: taking over %s from a run that stopped (%s)", redact(self.output), _who(held))
            _HELD_HERE.add(self.mine["run"])  # from its claim on, a live run of this process
            try:
                self._claim()
            except BaseException:
                _HELD_HERE.discard(self.mine["run"])
                raise
        self._beating.start()

    def _claim(self) -> None:
        self._write()
        self._renewed = time.monotonic()
        time.sleep(self.timing.settle_s)
        held = self._read()
        if held is None or held["run"] != self.mine["run"]:
            raise OutputError(busy(self.output, held))

    def check(self) -> None:
        """OutputError when another run may have taken the output over: a renewal found another run's lease
        (or none, or failed for good), or none has succeeded for as long as a lease takes to lapse."""
        if self.lost is None and time.monotonic() - self._renewed <= self.timing.lapse_s:
            return
        why = self.lost or f"this run could not renew its lease for {self.timing.lapse_s:.0f} s, so another may take it"
        raise OutputError(
            f"output {redact(self.output)}: {why}: this run stops; rerun the same command once no other run writes "
            "there"
        )

    def release(self, *, delete: bool = True) -> None:
        """Stops renewing and, where `delete`, deletes the lease if it is still this run's, trying each request
        once. A lease left behind (`delete` False where storage is down, whose retries a delete would wait out)
        lapses: this host's next run finds its process gone. Nothing here may hide how the run ended, nor hold
        up its end."""
        self._stop.set()
        if self._beating.is_alive():
            self._beating.join(timeout=self.timing.settle_s)  # one held up in storage's retries ends by itself
        _HELD_HERE.discard(self.mine["run"])
        if not delete:
            return
        try:
            with self.fs.open_input_stream(self.path) as f:
                held = json.loads(f.read())
            if held.get("run") == self.mine["run"]:
                self.fs.delete_file(self.path)
        except Exception as e:
            log.debug("docembed: lease of %s left to lapse: %s", redact(self.output), e)

    def _watch(self, held: dict) -> dict | None:
        """Waits while `held` is renewed: OutputError as soon as it is; the lease that lapsed, or None when it
        went away."""
        log.info(
            "docembed: %s holds the lease of another run (%s): waiting up to %.0f s to see whether it is renewed",
            redact(self.output),
            _who(held),
            self.timing.lapse_s,
        )
        deadline = time.monotonic() + self.timing.lapse_s
        while time.monotonic() < deadline:
            time.sleep(min(self.timing.beat_s / 2, max(0.0, deadline - time.monotonic())))
            now = self._read()
            if now is None:
                return None
            if now != held:
                raise OutputError(busy(self.output, now))
        return held

    def _renew(self) -> None:
        while not self._stop.wait(self.timing.beat_s):
            try:
                held = self._read()
                if held is None or held["run"] != self.mine["run"]:
                    self.lost = f"another run ({_who(held)}) took it over" if held else "its lease was deleted"
                    return
                if self._stop.is_set():  # released while this renewal read: the lease may be gone already
                    return
                self.mine["beat"] += 1
                self._write()
                self._renewed = time.monotonic()
            except StorageError as e:  # perhaps passing: `check` stops the run once the lease could have lapsed
                log.debug("docembed: cannot renew the lease of %s: %s", redact(self.output), e)
            except Exception as e:  # not storage's: it would fail every renewal, so the lease is as good as lost
                self.lost = f"renewing its lease failed ({type(e).__name__}: {e})"
                return

    def _read(self) -> dict | None:
        """The lease there; None when there is none, or none that a run wrote whole."""
        held = read_json(self.fs, self.path)
        return held if isinstance(held, dict) and isinstance(held.get("run"), str) else None

    def _write(self) -> None:
        storage.put_small(self.fs, self.path, dumps(self.mine))


def _dead(held: dict) -> bool:
    """Whether the holder is known to be dead: a process of this host that is gone, or a run of this process
    that ended. Any other holder (another host's, or a reused process id) is watched instead."""
    if held.get("host") != socket.gethostname():
        return False
    if held.get("pid") == os.getpid():
        return held.get("run") not in _HELD_HERE
    try:
        os.kill(int(held["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, TypeError, ValueError):
        return False
    return False


def _who(held: dict) -> str:
    return f"on {held.get('host')}, process {held.get('pid')}, since {held.get('since')}"


def busy(output: str, held: dict | None = None) -> str:
    """Why a run is refused: another holds `output` (named by its lease `held`, where there is one)."""
    holder = f" ({_who(held)})" if held else ""
    return (
        f"output {redact(output)} is being written by another run{holder}: wait for it to end, or choose another output"
    )
