"""The feed on its own, without Ray: its methods run on one event loop, in whatever order a caller's calls come."""

from __future__ import annotations

import asyncio

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
