"""Busy time and counts per pipeline stage, so a run can name the stage that holds the others back.

Every worker times its own calls of a stage with a `StageClock` and hands what
it timed, as one `Increment`, to the one callable it was given (`Record`): in a
job, a message to the run's `RunTally` actor (pipeline.run.job); in this process
(the capacity planner, benchmarks), `RunTally.record` itself. The stages know
only that callable, never Ray.

Every stage names its calls by what they took (`begin`), and their increments
with them: Ray retries a call whose actor died, and the retry's increment
replaces the first attempt's, so every file, document and batch counts once
(an increment without a name is added as it comes). A retry that takes other
rows is another call: a shard whose first read failed partway hands the chunk
stage other batches than its second, and the first attempt's counts stay. An
encoder call's increment carries its encoder counts too. `StageTable` adds the
stages up. A stage's utilisation is its busy time over its workers' share of
the wall time: the stage nearest 100% is the bottleneck, and the others wait on
it (their rate per busy second says how much headroom they have).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator

from pipeline.encode.batching import EncodeStats

# In data-flow order, with the unit each one's rate is quoted in.
STAGE_UNITS = {
    "read": "docs",
    "extract": "pages",
    "tokenise": "tokens",
    "chunk": "chunks",
    "encode": "tokens",
    "write": "rows",
}


@dataclasses.dataclass
class StageTotals:
    busy_s: float = 0.0
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    workers: set[str] = dataclasses.field(default_factory=set)
    # Wall-clock (time.time) start of the first call and end of the last one.
    first: float = math.inf
    last: float = -math.inf

    def add(self, other: StageTotals) -> None:
        self.busy_s += other.busy_s
        self.counts.update(other.counts)
        self.workers |= other.workers
        self.first, self.last = min(self.first, other.first), max(self.last, other.last)

    def rate(self, unit: str) -> float:
        """`unit`s per busy second: what one worker of the stage does when it is not waiting."""
        return self.counts[unit] / max(self.busy_s, 1e-9)

    @property
    def span_s(self) -> float:
        """From the stage's first call to its last: its steady-state window."""
        return max(self.last - self.first, 0.0)


@dataclasses.dataclass(frozen=True)
class EncoderCall:
    """One encoder call's counts, and the state of the encoder that made them."""

    stats: EncodeStats
    compiled_shapes: tuple[tuple[int, int], ...]  # every shape this encoder has compiled so far
    compile_cache: dict[str, int]  # this process's persistent-cache hits and misses so far
    # Wall-clock (time.time) start and end of this encoder's load: weights, devices, compile cache.
    loaded: tuple[float, float] = (math.nan, math.nan)
    ran: dict = dataclasses.field(default_factory=dict)  # what the encoder runs: `Encoder.ran`


@dataclasses.dataclass(frozen=True)
class Increment:
    """What a worker timed since its last send: the one message a stage sends."""

    worker: str  # "host:pid"
    stages: dict[str, StageTotals]
    # Identity of the call that this is all of: a retried call sends the same, and its
    # increment replaces the first attempt's. None: added as it comes.
    call: str | None = None
    encoder: EncoderCall | None = None
    # Where the worker runs, filled in by the job's sender: node id and actor handle (tests find encoders by it).
    where: dict = dataclasses.field(default_factory=dict)


Record = Callable[[Increment], None]


class StageClock:
    """One worker's timer: `with clock.timing("extract") as counts: ...; counts["pages"] += n`.

    `record` is where `send()` hands what was timed since the last send; None drops it.
    """

    def __init__(self, record: Record | None = None):
        self.record = record
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.pending: dict[str, StageTotals] = {}
        self.call: str | None = None  # the call being timed (`begin`)
        self.sent = 0  # increments sent for it

    def begin(self, call: str) -> None:
        """Starts timing a call, named by what it took (its rows' keys, digested): the same rows, the same name,
        however often Ray retries it. Its sends are named `call/0`, `call/1`, ... in turn, and hold its own
        timing alone: what a call that raised left unsent is dropped (the job fails with it)."""
        self.call, self.sent, self.pending = call, 0, {}

    @contextlib.contextmanager
    def timing(self, stage: str) -> Iterator[collections.Counter]:
        counts: collections.Counter = collections.Counter()
        wall, started = time.time(), time.perf_counter()
        try:
            yield counts
        finally:
            busy = time.perf_counter() - started
            call = StageTotals(busy, counts, {self.worker}, wall, wall + busy)
            self.pending.setdefault(stage, StageTotals()).add(call)

    def count(self, stage: str, **counts: int) -> None:
        """Counts without a time: the rows a stage's call took and handed on (`Flow`), known once it is done."""
        self.pending.setdefault(stage, StageTotals()).add(StageTotals(counts=collections.Counter(counts)))

    def send(self, *, encoder: EncoderCall | None = None) -> None:
        if self.record is not None and (self.pending or encoder is not None):
            call = None if self.call is None else f"{self.call}/{self.sent}"
            self.record(Increment(self.worker, self.pending, call, encoder))
            self.sent += 1
        self.pending = {}


@dataclasses.dataclass(frozen=True)
class Flow:
    """The job's stages in data-flow order, each with the rows its calls wait for: Ray Data starts a call only
    once that many rows are queued in front of the stage, or its input has ended (`map_batches`' batch_size;
    the extraction, fused with the chunk stage, bundles the chunk stage's batch of work rows).

    Each stage's worker counts `rows_in` and `rows_out` per call, sent when the call is done, so the rows
    queued in front of a stage, those still in its running calls included, are what the stage before it
    handed on less what it took. When no stage holds as many as its call waits for, none can start one:
    only more input moves the job on (`RunCoordinator.starved`).
    """

    waits: tuple[tuple[str, int], ...]  # (stage, rows its call waits for)

    def starved(self, table: StageTable, yielded: int) -> bool:
        """Whether no stage can start a call, given the rows the read has `yielded`."""
        handed = yielded
        for stage, rows in self.waits:
            counts = table.stages[stage].counts if stage in table.stages else collections.Counter()
            if handed - counts["rows_in"] >= rows:
                return False
            handed = counts["rows_out"]
        return True


class StageTable:
    """The run's sum of every worker's stage clocks."""

    def __init__(self):
        self.stages: dict[str, StageTotals] = {}

    def add(self, increments: dict[str, StageTotals]) -> None:
        for stage, totals in increments.items():
            self.stages.setdefault(stage, StageTotals()).add(totals)

    def subtract(self, stage: str, busy_s: float, counts: dict[str, int]) -> None:
        """Takes back what a call added to `stage`. Its worker stays among the stage's workers, and its start and
        end in its span: it ran the call. A stage left with nothing leaves the table."""
        totals = self.stages[stage]
        totals.busy_s = max(0.0, totals.busy_s - busy_s)  # not -1e-17 from the floats' rounding
        totals.counts.subtract(counts)
        if totals.busy_s < 1e-9 and not any(totals.counts.values()):
            del self.stages[stage]

    def utilisation(self, stage: str, wall_s: float) -> float:
        """Busy time over the time its workers had: 1.0 is a stage that never waited."""
        totals = self.stages[stage]
        return totals.busy_s / max(wall_s * len(totals.workers), 1e-9)

    def bottleneck(self, wall_s: float) -> str | None:
        return max(self.stages, key=lambda s: self.utilisation(s, wall_s), default=None)

    def to_json(self, wall_s: float) -> dict:
        out = {}
        for stage in sorted(self.stages, key=_flow_order):
            totals = self.stages[stage]
            unit = STAGE_UNITS.get(stage, "calls")
            out[stage] = {
                "workers": len(totals.workers),
                "busy_s": _significant(totals.busy_s),
                "span_s": _significant(totals.span_s),
                "utilisation": _significant(self.utilisation(stage, wall_s)),
                f"{unit}_per_busy_s": round(totals.rate(unit), 1),
                **dict(totals.counts),
            }
        return out

    def line(self, wall_s: float) -> str:
        """'read 2%, extract 61%, ... encode 93% busy; bottleneck encode' for the progress line."""
        if not self.stages:
            return "stages: none started"
        busy = ", ".join(f"{s} {self.utilisation(s, wall_s):.0%}" for s in sorted(self.stages, key=_flow_order))
        return f"stages busy: {busy}; bottleneck {self.bottleneck(wall_s)}"


def _significant(x: float) -> float:
    """x to 4 significant digits: a stage busy for a millisecond of a long run (local files read) is still
    above 0 in the report, where rounding to fixed decimals would say it never ran."""
    return float(f"{x:.4g}")


def _flow_order(stage: str) -> int:
    order = list(STAGE_UNITS)
    return order.index(stage) if stage in order else len(order)


@dataclasses.dataclass
class EncoderTotals:
    """One encoder process's counts over the run, and its latest state."""

    stats: EncodeStats
    compiled_shapes: tuple[tuple[int, int], ...]
    compile_cache: dict[str, int]
    where: dict
    loaded: tuple[float, float]
    ran: dict = dataclasses.field(default_factory=dict)

    @property
    def pid(self) -> int:
        return int(self.where["worker"].rsplit(":", 1)[1])


# A worker's calls whose shares are kept for a retry. Ray retries the calls of a worker that died: those it was
# running and those whose output was lost with its node, not yet taken by the stage after it (a few per worker:
# Ray Data sends an actor a handful of calls at a time, and takes their outputs as they come). A dead worker
# makes no more calls, so its last shares stay until the run ends.
RETRY_WINDOW = 256


@dataclasses.dataclass(frozen=True, slots=True)
class _Share:
    """What one keyed call added to the run's sums: as little as lets a retry of it take it back."""

    worker: str
    stages: tuple[tuple[str, float, tuple[tuple[str, int], ...]], ...]  # (stage, busy_s, counts)
    stats: EncodeStats | None

    @classmethod
    def of(cls, increment: Increment) -> _Share:
        # Names interned: each increment arrives unpickled with strings of its own, which the shares would keep.
        stages = tuple(
            (sys.intern(name), t.busy_s, tuple((sys.intern(unit), n) for unit, n in t.counts.items()))
            for name, t in increment.stages.items()
        )
        return cls(increment.worker, stages, increment.encoder and increment.encoder.stats)


class RunTally:
    """The run's account of every `Increment`: stages summed, encoder calls counted once each.

    The sums grow as increments come, so a query (`stages`, `encoders`, asked every quarter second while
    the read waits for room) costs the same an hour into a run as at its start; rebuilt from every call,
    it took a third of a second at 100,000 encoder calls. A call is kept only as its share of the sums
    (`_Share`, about a quarter of its increment), which a retry of the call takes back before adding its own,
    and only while a retry may come: its worker process's last RETRY_WINDOW calls. The rest of an encoder's
    increment (its compiled shapes, cache counts, where it runs) is kept as that encoder's latest. So the
    tally holds at most RETRY_WINDOW shares per worker process, whatever the number of calls.

    The job runs it as a Ray actor (pipeline.run.job); the capacity planner in its own process.
    """

    def __init__(self):
        self.table = StageTable()
        self.shares: dict[str, _Share] = {}  # per call a retry may still replace, what it added
        self.recent: dict[str, collections.deque] = {}  # per worker, its last RETRY_WINDOW (call, share)
        self.encoded: dict[str, EncodeStats] = {}  # per encoder worker, its calls' counts
        self.latest: dict[str, Increment] = {}  # per encoder worker, its last increment
        self.recorded_at = time.monotonic()  # when the last increment came

    def record(self, increment: Increment) -> None:
        self.recorded_at = time.monotonic()
        if increment.call is not None:
            replaced = self.shares.pop(increment.call, None)
            if replaced is not None:
                self._take_back(replaced)
            share = self.shares[increment.call] = _Share.of(increment)
            recent = self.recent.setdefault(increment.worker, collections.deque())
            recent.append((increment.call, share))
            if len(recent) > RETRY_WINDOW:
                call, old = recent.popleft()
                if self.shares.get(call) is old:  # not since replaced by a retry
                    del self.shares[call]
        self.table.add(increment.stages)
        if increment.encoder is not None:
            self.encoded.setdefault(increment.worker, EncodeStats()).add(increment.encoder.stats)
            self.latest[increment.worker] = increment

    def _take_back(self, share: _Share) -> None:
        """Subtracts a replaced call's share from the sums."""
        for name, busy_s, counts in share.stages:
            self.table.subtract(name, busy_s, dict(counts))
        if share.stats is not None:
            self.encoded[share.worker].subtract(share.stats)

    def stages(self) -> StageTable:
        """A copy of the sums, which go on growing."""
        table = StageTable()
        table.add(self.table.stages)
        return table

    def encoders(self) -> dict[str, EncoderTotals]:
        """Per encoder process ("host:pid"; a restarted actor is a new one): its batches, counted once."""
        return {
            worker: EncoderTotals(
                dataclasses.replace(self.encoded[worker]),
                last.encoder.compiled_shapes,
                last.encoder.compile_cache,
                {**last.where, "worker": worker},
                last.encoder.loaded,
                last.encoder.ran,
            )
            for worker, last in self.latest.items()
        }
