"""The feed on its own, without Ray: its methods run on one event loop, in whatever order a caller's calls come."""

from __future__ import annotations

import asyncio
import time

from pipeline.run.listing_feed import ListingFeed


def test_a_stale_commit_run_late_moves_neither_the_count_nor_the_window_back():
    """The driver sends its commits without waiting: an async actor may run an older one after a newer one."""

    async def commits() -> ListingFeed:
        feed = ListingFeed()
        await feed.commit(5, 3)
        await feed.commit(2, 8)
        return feed

    feed = asyncio.run(commits())
    assert (feed.committed, feed.window) == (5, 3)


class _Starved(ListingFeed):
    """A feed whose stages starve (no stage holds the rows its call waits for) until `fed` work rows came."""

    def __init__(self, fed: int):
        super().__init__(stall_seconds=600)
        self.fed = fed

    def starved(self, yielded: int) -> bool:
        return yielded < self.fed


def test_a_window_the_stages_starve_behind_grows_at_once_and_keeps_what_it_grew():
    """Nothing commits while every stage waits for rows: the window doubles what it grew by, at once, not a
    group per 30-second stall."""

    async def read() -> tuple[_Starved, float]:
        feed, started_at = _Starved(fed=7), time.monotonic()
        for started in range(7):  # a group of one work row each, a window of 2
            await feed.room(started, 2, yielded=started)
        return feed, time.monotonic() - started_at

    feed, seconds = asyncio.run(read())
    assert feed.read_window() == {"groups": 2 + 8, "grown": 8, "starved": 4, "stalled": 0}
    assert seconds < 10


def test_a_full_window_whose_stages_are_not_starved_waits_for_the_stall():
    async def read() -> ListingFeed:
        feed = ListingFeed(stall_seconds=0.3)
        for started in range(3):
            await feed.room(started, 2)
        return feed

    assert asyncio.run(read()).read_window() == {"groups": 2, "grown": 0, "starved": 0, "stalled": 1}
