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

# A read that finds its window full and sees no commit for this long lets one more group through: a stage
# that batches rows, waiting for rows that a full window keeps back, would otherwise wait for ever.
STALL_SECONDS = 30.0


class ListingFailed(RuntimeError):
    """The driver's listing stopped with an error; the driver reports the error itself."""


class ListingFeed:
    """How far the record has grown, and the read's window: async methods, for an async actor's event loop."""

    def __init__(self, stall_seconds: float = STALL_SECONDS):
        self.stall_seconds = stall_seconds
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

    async def room(self, started: int, window: int) -> None:
        """Waits until fewer than `window` (the driver's window, once it sent one) of the `started` groups are
        uncommitted, or until `stall_seconds` pass without a commit."""
        async with self.changed:
            while started - self.committed >= (self.window or window):
                if not await self._next_commit():
                    break

    async def _next_commit(self) -> bool:
        """Waits (holding the condition) for the next commit: False once `stall_seconds` pass without one."""
        seen = self.committed
        try:
            await asyncio.wait_for(self.changed.wait_for(lambda: self.committed != seen), self.stall_seconds)
        except TimeoutError:
            return False
        return True

    async def wait_for(self, k: int) -> bool:
        """True once part `k` is recorded; False when the listing ended before it; ListingFailed if it failed."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.parts > k or self.ended)
        if self.parts > k:
            return True
        if self.failure is not None:
            raise ListingFailed(self.failure)
        return False
