"""Listing a prefix of an S3 or GCS bucket page by page, in key order, top-level prefixes side by side.

pyarrow lists a whole tree in one call (one FileInfo per object, all in memory),
so the pages come from each store's own SDK: boto3's `list_objects_v2` (one call
per page, with its continuation token, so each page is retried on its own) and
google-cloud-storage's `list_blobs(...).pages`. fsspec's s3fs and gcsfs were
weighed: their `find`/`walk` also gather a whole prefix before returning (and
s3fs runs on aiobotocore, a second AWS stack beside pyarrow's); raw REST would
mean signing requests and parsing XML by hand.

Shape of a listing (`list_objects`): one level under the prefix is listed with a
`/` delimiter; its keys come out as they are, and each sub-prefix is listed
whole on a thread of its own, `PREFIXES_AHEAD` at a time, each into a queue of
at most `QUEUED_PAGES` pages: what is in memory is bounded by those two numbers
and the page size, however many keys one prefix holds. Sub-prefixes are
consumed in order, so the keys come out in ascending order (both stores list in
UTF-8 byte order, which is Python's `str` order). A flat prefix is its own
level: one sequential stream. For a glob, a sub-prefix whose own sub-prefixes
the glob narrows is listed as its parent is, a level at a time, so that those
the glob leaves out are never listed.

Endpoints, regions and credentials come from the environment as in
`pipeline.io.filesystems`. Each request is retried inside the SDK
(`s3_retries()`, GCS_RETRY_SECONDS) and each page again by `retrying`; what
still fails is `StorageError`, raised when the listing reaches that page.
"""

from __future__ import annotations

import collections
import functools
import os
import queue
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlparse

from pipeline.io import filesystems
from pipeline.io.retries import retrying

PREFIXES_AHEAD = 6  # sub-prefixes listed at once
QUEUED_PAGES = 4  # pages a sub-prefix's thread lists before the consumer reaches it
MAX_PAGE = 1000  # the most keys S3 and GCS return in one page

Answer = tuple[list[tuple[str, int]], list[str], "str | None"]  # (key, size) pairs, sub-prefixes, next page's token


class _S3:
    def __init__(self):
        self.client = _s3_client(filesystems.env_key("s3"))

    def page(self, bucket: str, prefix: str, delimited: bool, start_after: str | None, token, size: int) -> Answer:
        args = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": size}
        args.update({"Delimiter": "/"} if delimited else {})
        args.update({"ContinuationToken": token} if token else {"StartAfter": start_after} if start_after else {})
        answer = _sdk_call(lambda: self.client.list_objects_v2(**args))
        keys = [(o["Key"], o["Size"]) for o in answer.get("Contents", ())]
        prefixes = [p["Prefix"] for p in answer.get("CommonPrefixes", ())]
        return keys, prefixes, answer.get("NextContinuationToken") if answer.get("IsTruncated") else None


@functools.lru_cache(maxsize=8)
def _s3_client(env_key: tuple):
    # env_key is part of the cache key only; boto3 clients are thread-safe, its sessions are not.
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"max_attempts": filesystems.s3_retries(), "mode": "standard"},  # botocore's max_attempts: retries
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=PREFIXES_AHEAD + 2,
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"),
        region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        config=config,
    )


class _GCS:
    def __init__(self):
        # A client per listing thread: google-cloud-storage does not promise that one is thread-safe.
        from google.cloud import storage

        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        if emulator:
            from google.auth.credentials import AnonymousCredentials

            url = urlparse(emulator if "://" in emulator else f"http://{emulator}")
            endpoint = f"{url.scheme or 'http'}://{url.netloc}"
            self.client = storage.Client(
                project="-", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint}
            )
        else:
            self.client = _sdk_call(storage.Client)

    def page(self, bucket: str, prefix: str, delimited: bool, start_after: str | None, token, size: int) -> Answer:
        from google.cloud.storage.retry import DEFAULT_RETRY

        def call():
            blobs = self.client.list_blobs(
                bucket,
                prefix=prefix,
                delimiter="/" if delimited else None,
                start_offset=start_after,  # inclusive: the caller drops the key itself
                page_token=token,
                page_size=size,
                retry=DEFAULT_RETRY.with_timeout(filesystems.GCS_RETRY_SECONDS),
            )
            page = next(blobs.pages, None)
            if page is None:
                return [], [], None
            return [(b.name, b.size) for b in page], list(page.prefixes), blobs.next_page_token

        return _sdk_call(call)


STORES: dict[str, Callable[[], _S3 | _GCS]] = {"s3": _S3, "gs": _GCS}


def _sdk_call(fn):
    """`fn()`, with the SDK's errors as OSError, which `retrying` retries unless they say "Permanent error"."""
    from botocore.exceptions import BotoCoreError, ClientError
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    try:
        return fn()
    except ClientError as e:
        raise _os_error(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode"), e) from None
    except GoogleAPIError as e:  # a RetryError (out of time) has no status
        raise _os_error(getattr(e, "code", None), e) from None
    except (BotoCoreError, GoogleAuthError) as e:
        if "credential" in str(e).lower():
            raise _os_error(401, e) from None
        raise OSError(str(e)) from None


def _os_error(status: int | None, e: Exception) -> OSError:
    permanent = status is not None and 400 <= status < 500 and status not in (408, 429)
    return OSError(f"{'Permanent error: ' if permanent else ''}HTTP {status}: {e}")


def list_objects(
    scheme: str,
    bucket: str,
    prefix: str,
    start_after: str | None,
    page_size: int,
    wanted: Callable[[str], bool] | None = None,
    descend: Callable[[str], bool] | None = None,
) -> Iterator[tuple[str, int]]:
    """(key, size) of every object under `prefix` ("" or ending in "/"), ascending, from keys >= `start_after` on.
    Of its sub-prefixes, only those `wanted` accepts are listed (all without it); one that `descend` names is
    listed as `prefix` is, a level at a time (a glob's names still to match below it), the others whole.

    Keys ending in "/" are directory placeholders, not files: left out. Keys equal
    to `start_after` may come (GCS's start offset is inclusive): the caller drops them.
    """
    request_size = max(1, min(page_size, MAX_PAGE))
    stop = threading.Event()

    def by_level(level_prefix: str) -> Iterator[tuple[str, int]]:
        level = _level(
            _store(scheme, bucket), scheme, bucket, level_prefix, _level_start(level_prefix, start_after), request_size
        )
        if wanted is not None:
            level = (item for item in level if item[1] is not None or wanted(item[0]))
        return _in_order(level, subtree, start_after, stop, request_size + PREFIXES_AHEAD)

    def subtree(sub: str) -> Iterator[list[tuple[str, int]]]:
        if descend is not None and descend(sub):
            yield from _batched(by_level(sub), request_size)
            return
        sub_start = start_after if start_after and start_after > sub else None
        for keys, _, _ in _pages(_store(scheme, bucket), scheme, bucket, sub, False, sub_start, request_size):
            yield keys

    try:
        for key, size in by_level(prefix):
            if not key.endswith("/"):
                yield key, size
    finally:
        stop.set()


def wholly_before(prefix: str, start_after: str | None) -> bool:
    """Whether every name starting with `prefix` sorts at or before `start_after`: a subtree to skip."""
    return start_after is not None and start_after > prefix and not start_after.startswith(prefix)


def _level_start(prefix: str, start_after: str | None) -> str | None:
    """Where a delimited listing of `prefix` starts: before the sub-prefix that holds `start_after`, so that
    sub-prefix is listed too."""
    if not start_after or not start_after.startswith(prefix):
        return None  # it sorts before every key under `prefix` (one after is skipped whole: `wholly_before`)
    rel = start_after[len(prefix) :]
    return prefix + rel.split("/", 1)[0] if "/" in rel else start_after


def _batched(items: Iterator, size: int) -> Iterator[list]:
    page = []
    for item in items:
        page.append(item)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


def _store(scheme: str, bucket: str):
    return retrying(f"cannot list {scheme}://{bucket}", STORES[scheme])


def _pages(store, scheme: str, bucket: str, prefix: str, delimited: bool, start_after: str | None, size: int):
    token = None
    while True:
        keys, prefixes, token = retrying(
            f"cannot list {scheme}://{bucket}/{prefix}",
            lambda token=token: store.page(bucket, prefix, delimited, start_after, token, size),
        )
        yield keys, prefixes, token
        if not token:
            return


def _level(store, scheme: str, bucket: str, prefix: str, start_after: str | None, size: int):
    """One level under `prefix`, ascending: (key, size) for an object, (sub-prefix, None) for a sub-prefix."""
    for keys, prefixes, _ in _pages(store, scheme, bucket, prefix, True, start_after, size):
        # Within a page the two lists are each sorted; together they cover one contiguous range of names.
        yield from sorted([*keys, *((p, None) for p in prefixes)], key=lambda item: item[0])


def _in_order(level, subtree, start_after: str | None, stop: threading.Event, window_cap: int):
    """The level's keys, with each sub-prefix replaced by its listing, read ahead on threads."""
    window: collections.deque = collections.deque()
    in_flight = 0
    level = iter(level)

    def fill():
        nonlocal in_flight
        while in_flight < PREFIXES_AHEAD and len(window) < window_cap:
            item = next(level, None)
            if item is None:
                return
            name, size = item
            if size is not None:
                window.append(item)
            elif not wholly_before(name, start_after):
                window.append(_Prefetch(subtree(name), stop))
                in_flight += 1

    fill()
    while window:
        head = window.popleft()
        in_flight -= isinstance(head, _Prefetch)
        fill()
        if isinstance(head, _Prefetch):
            yield from head
        else:
            yield head


_DONE = object()


class _Prefetch:
    """One sub-prefix listed on a thread of its own into a bounded queue of pages; iterating yields its keys."""

    def __init__(self, pages: Iterator[list], stop: threading.Event):
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUED_PAGES)
        self._stop = stop
        threading.Thread(target=self._run, args=(pages,), daemon=True, name="docembed-listing").start()

    def _run(self, pages: Iterator[list]) -> None:
        try:
            for page in pages:
                if not self._put(page):
                    return
            self._put(_DONE)
        except BaseException as e:  # raised where the consumer reaches this prefix
            self._put(e)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[tuple[str, int]]:
        # Polled, not waited on: a glob's deeper level is consumed on a thread of its own (`list_objects`), which
        # must end once the listing is stopped and its producer puts nothing more.
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield from item
