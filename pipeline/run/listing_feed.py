"""The feed: where the driver's listing and the stages' read meet, so the read waits instead of polling storage.

It holds how many parts of the listing are recorded, whether the listing ended
or failed, and how many groups the driver has committed; the read
(`pipeline.run.feed.RecordedInputs`) waits on it. A job runs it inside the
run's one actor on the driver's node (`pipeline.run.tally.RunCoordinator`),
beside the stages' tally. It lives in a module of its own, without Ray: the
read's module imports Ray Data, which would triple the time the
coordinator's process takes to start and more than double its memory (1.8 s
and 177 MB against 0.6 s and 71 MB to import, on the project's AMD EPYC).
"""

from __future__ import annotations

import asyncio
import time

# A read that finds its window full and sees no commit for this long lets one more group through: the last
# resort, should the stages' counts (`starved`) miss a stage that waits for rows the window keeps back.
STALL_SECONDS = 30.0
# How often a read waiting for room asks whether the stages are starved.
POLL_SECONDS = 0.25


class ListingFailed(RuntimeError):
    """The driver's listing stopped with an error; the driver reports the error itself."""


class ListingFeed:
    """How far the record has grown, and the read's window: async methods, for an async actor's event loop."""

    def __init__(self, stall_seconds: float = STALL_SECONDS):
        self.stall_seconds = stall_seconds
        self.grown = 0  # groups the window grew by, each time the stages starved behind it
        self.last_groups: int | None = None
        self.starvations = self.stalls = 0
        self.parts = 0
        self.ended = False
        self.failure: str | None = None
        self.committed = 0  # groups done, those a rerun kept included
        self.window: int | None = None  # the driver's window once groups have committed (`commit`), for any group
        self.changed = asyncio.Condition()

    async def recorded(self, parts: int) -> None:
        """`parts` are recorded. Counts only grow: an async actor may run one caller's calls out of order."""
        async with self.changed:
            self.parts = max(self.parts, parts)
            self.changed.notify_all()

    async def end(self, failure: str | None = None) -> None:
        async with self.changed:
            self.ended, self.failure = True, failure
            self.changed.notify_all()

    async def commit(self, groups: int, window: int | None = None) -> None:
        """`groups` are committed; `window`: the driver's window, sized from what the committed groups held.

        Counts only grow, as in `recorded`: a stale call run late keeps neither its count nor its window.
        """
        async with self.changed:
            if groups >= self.committed:
                self.committed, self.window = groups, window or self.window
                self.changed.notify_all()

    async def room(self, started: int, window: int, yielded: int = 0) -> None:
        """Waits until fewer than `window` (the driver's window, once it sent one, and what it grew by) of the
        `started` groups are uncommitted, the read having handed on `yielded` work rows.

        A window sized from what groups held so far can be too small for what comes: groups of scanned PDFs,
        whose error rows make a sixteenth of a pack each, or one-line shards, a group each. Then every stage
        waits for rows that the window keeps back and nothing commits; the window doubles what it grew by,
        at once, and keeps it. After `stall_seconds` without a commit the next group goes through anyway.
        """
        async with self.changed:
            stall_at = time.monotonic() + self.stall_seconds
            while started - self.committed >= self._groups(window):
                if await self._commit_within(POLL_SECONDS):
                    stall_at = time.monotonic() + self.stall_seconds
                elif self.starved(yielded):
                    self.grown, self.starvations = max(1, 2 * self.grown), self.starvations + 1
                elif time.monotonic() >= stall_at:
                    self.stalls += 1
                    break

    async def _commit_within(self, seconds: float) -> bool:
        """Waits (holding the condition) up to `seconds` for the next commit: whether one came."""
        seen = self.committed
        try:
            await asyncio.wait_for(self.changed.wait_for(lambda: self.committed != seen), seconds)
        except TimeoutError:
            return False
        return True

    def starved(self, yielded: int) -> bool:
        """Whether no stage can start a call until the read hands on more than its `yielded` work rows: never,
        here; the run's coordinator knows from the stages' counts (`RunCoordinator.starved`)."""
        return False

    def _groups(self, window: int) -> int:
        self.last_groups = (self.window or window) + self.grown
        return self.last_groups

    def read_window(self) -> dict:
        """For the run's report: the window in groups as last asked, what it grew by, how often the stages
        starved behind it and how often the read went on after a stall."""
        return {"groups": self.last_groups, "grown": self.grown, "starved": self.starvations, "stalled": self.stalls}

    async def wait_for(self, k: int) -> bool:
        """True once part `k` is recorded; False when the listing ended before it; ListingFailed if it failed."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.parts > k or self.ended)
        if self.parts > k:
            return True
        if self.failure is not None:
            raise ListingFailed(self.failure)
        return False
