"""The streamed listing on moto's S3 server and the GCS emulator: order, dedup, resuming, a store failing mid-listing,
and names: keys pyarrow cannot read, a prefix that shares an object's name, a key with a tab, an output over an object.

Requests go through the fault proxies, as the jobs' do. moto pages as S3 does
(MaxKeys, StartAfter); the GCS emulator ignores maxResults and startOffset and
answers each listing in one page, so on it the pages are the listing's own and
`start_after` is honoured by the client alone.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from pipeline.errors import ConfigError, InputError, OutputError, StorageError
from pipeline.io import filesystems, listing, object_listing, retries
from pipeline.io.listing import list_inputs, list_pages
from pipeline.kinds import kind_of
from pipeline.output.sink import check_writable

BUCKET = "listing"
# More top-level prefixes than are listed at once (object_listing.PREFIXES_AHEAD), names that sort
# differently as keys than as a tree ("-" and "." before "/"), a flat prefix, skipped kinds, a directory marker.
KEYS = sorted(
    [f"tree/p{p:02d}/f{i}.txt" for p in range(10) for i in range(4)]
    + [f"tree/p03/deep/er/g{i}.md" for i in range(5)]
    + ["tree/a.txt", "tree/a-b.txt", "tree/a/x.pdf", "tree/a0.jsonl", "tree/é/ü.txt", "tree/z.png", "tree/b/x.bin"]
    + ["tree/dir/", "tree/p01/skip.bin", "tree/br[a]ck.txt"]  # a key with a glob's brackets, as written
    + [f"flat/n{i:03d}.txt" for i in range(40)]
)


# Put with the stores' own SDKs, which write any key; docembed reads them through pyarrow, as a job does.
NAMES_BUCKET = "names"
NAMES = [
    "w/plain.txt",
    "w//double.txt",  # an empty segment: pyarrow's "Empty path component"
    "/lead.txt",
    "w/http://x.txt",
    "w/x/./dot.txt",  # resolved by the AWS SDK; GCS reads it as it is
    "w/x/../dotdot.txt",  # S3 only: the GCS emulator drops the connection of its upload
    "w/tab\there.txt",
    "rep.txt",  # an object, and a prefix of the same name
    "rep.txt/inner.txt",
    "rep.txt/inner2.md",
]


def gcs_direct(servers) -> storage.Client:
    return storage.Client(
        project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": servers.gcs.url}
    )


@pytest.fixture(scope="module")
def buckets(servers):
    """KEYS in s3://listing and gs://listing, written directly to the servers."""
    servers.make_bucket("s3", BUCKET)
    servers.make_bucket("gs", BUCKET)
    gcs = gcs_direct(servers).bucket(BUCKET)
    for key in KEYS:
        servers.s3.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
        gcs.blob(key).upload_from_string(key.encode())
    servers.make_bucket("s3", NAMES_BUCKET)
    servers.make_bucket("gs", NAMES_BUCKET)
    gcs = gcs_direct(servers).bucket(NAMES_BUCKET)
    for key in NAMES:
        servers.s3.put_object(Bucket=NAMES_BUCKET, Key=key, Body=key.encode())
        if ".." not in key:
            gcs.blob(key).upload_from_string(key.encode())
    return KEYS


@pytest.fixture(params=["s3", "gs"])
def scheme(request, buckets, servers, tmp_path, monkeypatch):
    for name, value in servers.env(tmp_path).items():
        monkeypatch.setenv(name, value)
    servers.reset_faults()
    yield request.param
    servers.reset_faults()
    object_listing._s3_client.cache_clear()  # drops clients made with a patched retry count


def expected(scheme: str, under: str = "") -> tuple[list[tuple[str, str, int]], int]:
    files = [k for k in KEYS if k.startswith(under) and not k.endswith("/")]
    readable = sorted((f"{scheme}://{BUCKET}/{k}", kind_of(k), len(k.encode())) for k in files if kind_of(k))
    return readable, len(files) - len(readable)


def listed(locations, **kwargs) -> tuple[list[tuple[str, str, int]], int, int]:
    rows, skipped, pages = [], 0, 0
    for page in list_pages(locations, **kwargs):
        d = page.entries.to_pydict()
        rows += zip(d["uri"], d["kind"], d["size"])
        skipped += page.skipped
        pages += 1
    return rows, skipped, pages


def test_object_store_listing_is_sorted_deduplicated_and_paged(scheme, servers):
    base = f"{scheme}://{BUCKET}"
    locations = [f"{base}/tree", f"{base}/tree/p03", f"{base}/flat", f"{base}/tree/a.txt", f"{base}/flat/n007.txt"]
    rows, skipped, pages = listed(locations, page_size=3)
    want_tree, skipped_tree = expected(scheme, "tree/")
    want_flat, _ = expected(scheme, "flat/")
    assert rows == sorted(want_tree + want_flat) and skipped == skipped_tree == 3
    assert pages == -(-len(rows) // 3)
    assert listed([base], page_size=1000)[:2] == expected(scheme)
    if scheme == "s3":  # moto pages as S3 does: three keys a request
        assert servers.proxies["s3"].counts["requests"] > len(KEYS) // 3


def test_start_after_gives_the_tail(scheme):
    base = f"{scheme}://{BUCKET}"
    full, _, _ = listed([base], page_size=4)
    uris = [r[0] for r in full]
    points = [*uris[::12], uris[-1], f"{base}/tree/p03", f"{base}/tree/p03/", f"{base}/tree/p03/deep/er/g2.md0"]
    points += [f"{base}/tree/a", f"{base}/tree/p99", f"{base}/flat0", f"{base}/", f"{scheme}://", f"{base}0"]
    for point in points:
        rows, _, _ = listed([base, f"{base}/tree/p05"], start_after=point, page_size=4)
        assert rows == [r for r in full if r[0] > point], point


@pytest.mark.parametrize(
    "glob, matches",
    [
        # No "?": in a URI it begins a query, refused (test_uris).
        ("tree/p0*/f[13].txt", lambda k: re.fullmatch(r"tree/p0[^/]*/f[13]\.txt", k)),
        ("tree/**/*.md", lambda k: k.startswith("tree/") and k.endswith(".md")),
        ("*/a*", lambda k: re.match(r"[^/]+/a", k)),  # a folder's name matched takes the files under it
    ],
)
def test_a_glob_is_the_files_it_matches_under_its_fixed_part(scheme, glob, matches):
    rows, _, _ = listed([f"{scheme}://{BUCKET}/{glob}"], page_size=4)
    want, _ = expected(scheme)
    assert rows == [r for r in want if matches(r[0].removeprefix(f"{scheme}://{BUCKET}/"))] and rows
    literal = f"{scheme}://{BUCKET}/tree/br[a]ck.txt"  # a key that exists as written is no glob
    assert [r[0] for r in listed([literal])[0]] == [literal]


PREFIXES = [f"tree/p{p:02d}/" for p in range(10)]


@pytest.mark.parametrize(
    "glob, listings",
    [
        # The glob names each level: every prefix that can match is listed a level at a time (True), and
        # tree/a/, tree/b/, tree/dir/, tree/é/ and tree/p03/deep/ never.
        ("tree/p0*/f[13].txt", [("tree/", True), *((p, True) for p in PREFIXES)]),
        (
            "tree/p0*/deep/er/g[12].md",
            [("tree/", True), *((p, True) for p in PREFIXES), ("tree/p03/deep/", True), ("tree/p03/deep/er/", True)],
        ),
        # Below a `**` nothing is left out: each prefix that can match is listed whole (False).
        ("tree/p0*/**/g1.md", [("tree/", True), *((p, False) for p in PREFIXES)]),
    ],
)
def test_a_glob_lists_only_the_prefixes_that_can_hold_a_match(scheme, monkeypatch, glob, listings):
    requested, pages = [], object_listing._pages
    monkeypatch.setattr(object_listing, "_pages", lambda *a: requested.append(a[3:5]) or pages(*a))
    rows, _, _ = listed([f"{scheme}://{BUCKET}/{glob}"], page_size=4)
    want, _ = expected(scheme)
    pattern = re.compile(listing._translated(glob) + "(?:/.*)?")
    assert [r[0] for r in rows] == [r[0] for r in want if pattern.fullmatch(r[0].removeprefix(f"{scheme}://{BUCKET}/"))]
    assert rows and sorted(requested) == sorted(listings)
    base = f"{scheme}://{BUCKET}/tree/p0"
    for point in [rows[0][0], rows[len(rows) // 2][0], f"{base}3/", f"{base}3/deep/er/g1", f"{base}5", f"{base}9/z"]:
        after, _, _ = listed([f"{scheme}://{BUCKET}/{glob}"], start_after=point, page_size=4)
        assert after == [r for r in rows if r[0] > point], point


def test_a_glob_listing_stopped_midway_leaves_no_listing_thread(scheme, monkeypatch):
    """A level listed a level at a time below `tree/p0*/` is consumed on a listing thread of its own. Stopped while
    a deeper level waits on its store, the listing must end every thread, not leave one waiting for pages that
    the stopped producer will never put."""
    real_pages = object_listing._pages

    def slow_pages(*args):
        for i, page in enumerate(real_pages(*args)):
            if i and args[3] == "tree/p03/deep/er/":
                time.sleep(0.5)  # a store's request, still out when the listing is stopped
            yield page

    def listing_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "docembed-listing"}

    monkeypatch.setattr(object_listing, "_pages", slow_pages)
    before = listing_threads()
    pages = list_pages([f"{scheme}://{BUCKET}/tree/p0*/deep/er/g[12].md"], page_size=1)
    assert next(pages).entries.column("uri").to_pylist() == [f"{scheme}://{BUCKET}/tree/p03/deep/er/g1.md"]
    pages.close()
    deadline = time.monotonic() + 10
    while listing_threads() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not listing_threads() - before


def test_missing_buckets_and_prefixes(scheme):
    with pytest.raises(InputError, match="there is no bucket nobucket"):
        list_pages([f"{scheme}://nobucket/x"])
    with pytest.raises(InputError, match="does not exist$"):
        list_pages([f"{scheme}://{BUCKET}/nothing-here"])


def test_storage_failing_mid_listing_is_a_storage_error_and_a_later_listing_completes(scheme, servers, monkeypatch):
    monkeypatch.setattr(filesystems, "S3_RETRIES", 1)
    monkeypatch.setattr(filesystems, "GCS_RETRY_SECONDS", 1)
    monkeypatch.setattr(retries, "BACKOFF_SECONDS", 0.01)
    object_listing._s3_client.cache_clear()
    location = f"{scheme}://{BUCKET}/tree"
    pages = list_pages([location], page_size=2)
    first = next(pages)
    # The prefixes after the first PREFIXES_AHEAD + 1 are listed once the first is consumed: after this.
    servers.proxies[scheme].down = True
    seen = first.entries.num_rows
    with pytest.raises(StorageError, match=f"input {location}: cannot list {scheme}://{BUCKET}/tree/"):
        for page in pages:
            seen += page.entries.num_rows
    assert 0 < seen < len(expected(scheme, "tree/")[0])
    servers.proxies[scheme].down = False
    assert listed([location])[:2] == expected(scheme, "tree/")


def test_aws_max_attempts_sets_the_attempts_of_each_s3_request(buckets, servers, tmp_path, monkeypatch):
    """AWS_MAX_ATTEMPTS, the AWS SDKs' own variable, is the SDK's attempts per request, the first included, for the
    listing (boto3) and for reads (pyarrow): a store that is down is asked that often for each of docembed's own
    attempts at the operation."""
    for name, value in servers.env(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(retries, "BACKOFF_SECONDS", 0.01)
    proxy = servers.proxies["s3"]
    asked = {}
    for attempts in ("1", "2"):
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", attempts)
        for what, call in (
            ("listing", lambda: list(list_pages([f"s3://{BUCKET}/flat"]))),
            ("read", lambda: filesystems.read_bytes(f"s3://{BUCKET}/flat/n000.txt")),
        ):
            proxy.reset()
            proxy.down = True
            with pytest.raises(StorageError, match="still failing after 3 attempts"):
                call()
            asked[what, attempts] = proxy.counts["failed"]
    proxy.reset()
    object_listing._s3_client.cache_clear()  # the clients of this test's attempt counts
    assert asked == {(what, n): int(n) * retries.ATTEMPTS for what in ("listing", "read") for n in ("1", "2")}
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "none")
    with pytest.raises(ConfigError, match="AWS_MAX_ATTEMPTS 'none' is not a positive whole number"):
        filesystems.read_bytes(f"s3://{BUCKET}/flat/n000.txt")


def test_keys_pyarrow_cannot_read_are_skipped_and_the_rest_read_back(scheme, caplog):
    inputs, skipped = list_inputs([f"{scheme}://{NAMES_BUCKET}"])
    uris = [f.uri for f in inputs]
    readable = ["w/plain.txt", "w/tab\there.txt", "rep.txt", "rep.txt/inner.txt", "rep.txt/inner2.md"]
    readable += ["w/x/./dot.txt"] if scheme == "gs" else []
    stored = NAMES if scheme == "s3" else [k for k in NAMES if ".." not in k]
    assert uris == sorted(f"{scheme}://{NAMES_BUCKET}/{key}" for key in readable)
    assert skipped == len(stored) - len(readable) and "empty segment" in caplog.text
    assert filesystems.read_many(uris) == [uri.split(f"{NAMES_BUCKET}/", 1)[1].encode() for uri in uris]


def test_a_trailing_slash_names_the_prefix_that_shares_an_objects_name(scheme):
    base = f"{scheme}://{NAMES_BUCKET}/rep.txt"
    assert [f.uri for f in list_inputs([base])[0]] == [base]
    assert [f.uri for f in list_inputs([f"{base}/"])[0]] == [f"{base}/inner.txt", f"{base}/inner2.md"]


def test_an_output_over_an_object_is_refused(scheme):
    # As a local output over a file is: the run would write beside the object, and its name would mean both.
    with pytest.raises(OutputError, match="rep.txt is not writable: it is an object, not a prefix"):
        check_writable(f"{scheme}://{NAMES_BUCKET}/rep.txt")
    check_writable(f"{scheme}://{NAMES_BUCKET}/rep.txt/out")
