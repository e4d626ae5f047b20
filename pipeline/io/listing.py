"""Listing the job's inputs as a stream of pages, in URI order, without holding the corpus.

Inputs are local paths, `file://`, `s3://` or `gs://` URIs (see `pipeline.io.filesystems`):
files, or directories and prefixes searched recursively. `.pdf`, `.txt` and `.md`
files are one document each; JSON Lines (`.jsonl`, or compressed: `pipeline.kinds`) and `.parquet` files are
shards of many (see `pipeline.io.shards`). The driver only lists names and sizes
here; document bytes are read by the workers.

`list_pages` merges one sorted stream per location (`heapq.merge`), so the pages
come in strictly ascending URI order, a file reached from two overlapping
locations once, and what is in memory is a few pages per location whatever the
corpus holds. Each location's stream comes from one dispatch point (`_entries`):
a walk of local directories that sorts one directory at a time, and for S3 and GCS
the SDKs' paged listings (`pipeline.io.object_listing`). `start_after` continues
an interrupted listing: only URIs after it come, and the stores are asked to
start there.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import os
import re
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.fs as pafs

from pipeline.errors import InputError
from pipeline.io.filesystems import bucket_missing, file_info, filesystem_for, is_object_store, list_files
from pipeline.io.object_listing import STORES, list_objects, wholly_before
from pipeline.io.retries import failing_at
from pipeline.io.uris import check_location, is_uri, redact, scheme_of, unreadable_key, uri_of
from pipeline.kinds import SKIPPED_HINTS, described, kind_of
from pipeline.schemas import is_utf8

log = logging.getLogger("docembed")
SAID_SUFFIXES = 10  # kinds of skipped file named in warnings, at most

LISTING_SCHEMA = pa.schema([("uri", pa.string()), ("kind", pa.string()), ("size", pa.int64())])


@dataclasses.dataclass(frozen=True)
class Page:
    entries: pa.RecordBatch  # LISTING_SCHEMA: readable inputs only, in ascending URI order
    skipped: int  # files on this page whose kind docembed does not read


@dataclasses.dataclass(frozen=True)
class InputFile:
    uri: str  # what the user would write to name this file
    kind: str  # "pdf" or "text" (one document), "jsonl" or "parquet" (a shard of many)
    size: int


def list_pages(
    locations: list[str],
    *,
    start_after: str | None = None,
    page_size: int = 1000,
    leave_out: Callable[[str], bool] = lambda uri: False,
) -> Iterator[Page]:
    """Pages of at most `page_size` readable inputs under `locations`, in strictly ascending URI order.

    A location may be a file or a directory (searched recursively). Every location
    is checked here, before the first page: one that does not exist, or is neither
    a file nor a directory, is `InputError`. Files whose extension the pipeline does
    not read, local files whose name is not UTF-8 (which no doc_id can hold), local
    entries that are not regular files (a broken symbolic link, a pipe) and
    objects whose key holds a "?" (which no URI docembed reads may hold) are counted
    in `Page.skipped` (a page may hold only those). Only URIs after
    `start_after` come; none that `leave_out` names (docembed's outputs under an
    input, `pipeline.output.layout.left_out`).
    A storage failure, even pages in, is `StorageError`.
    """
    if page_size < 1:
        raise ValueError(f"page_size must be at least 1, not {page_size}")
    streams = [_location(location, start_after, page_size) for location in locations]
    return _paged(heapq.merge(*streams), start_after, page_size, leave_out)


def list_inputs(
    locations: list[str], leave_out: Callable[[str], bool] = lambda uri: False
) -> tuple[list[InputFile], int]:
    """All readable inputs under `locations` in memory, sorted by URI, and how many files were skipped.

    For callers that need a small list (tests); a job streams `list_pages`, a sample takes `sample_inputs`.
    """
    inputs, skipped = [], 0
    for page in list_pages(locations, leave_out=leave_out):
        skipped += page.skipped
        inputs += _input_files(page.entries)
    return inputs, skipped


def sample_inputs(
    locations: list[str], k: int, leave_out: Callable[[str], bool] = lambda uri: False
) -> tuple[list[InputFile], int]:
    """At most `k` inputs spread evenly over the listing of `locations` (from the first), and how many inputs it
    has. The listing streams: every `step`-th entry is kept, and where that makes 2k the step doubles and
    every other one kept goes, so at most 2k entries and a page are held however long the listing."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    kept, step, seen = [], 1, 0
    for page in list_pages(locations, leave_out=leave_out):
        kept += _input_files(page.entries.take(pa.array(range(-seen % step, page.entries.num_rows, step), pa.int64())))
        seen += page.entries.num_rows
        while len(kept) >= 2 * k:
            kept, step = kept[::2], step * 2
    return (kept if len(kept) <= k else [kept[i * len(kept) // k] for i in range(k)]), seen


def _input_files(entries: pa.RecordBatch) -> list[InputFile]:
    columns = entries.to_pydict()
    return list(map(InputFile, columns["uri"], columns["kind"], columns["size"]))


def _paged(
    entries: Iterator[tuple[str, int | None]], start_after: str | None, page_size: int, leave_out: Callable[[str], bool]
) -> Iterator[Page]:
    uris, kinds, sizes, skipped, last = [], [], [], 0, start_after
    said: set[str] = set()  # the suffixes of skipped files said so far: once each, a few at most
    for uri, size in entries:
        if last is not None and uri <= last:
            continue  # the same file from another location, or at or before start_after
        last = uri
        if leave_out(uri):
            continue
        unnamed = _unnamed(uri, size)
        kind = None if unnamed else kind_of(uri)
        if kind is None:
            skipped += 1
            if unnamed:
                log.warning("docembed: skipped %s", unnamed)
            elif (suffix := _suffix(uri)) and suffix not in said and len(said) < SAID_SUFFIXES:
                said.add(suffix)
                hint = f"; {SKIPPED_HINTS[suffix]}" if suffix in SKIPPED_HINTS else ""
                log.warning(
                    "docembed: skipped %s, and any other *%s: docembed reads %s%s",
                    redact(uri),
                    suffix,
                    described(),
                    hint,
                )
            continue
        uris.append(uri)
        kinds.append(kind)
        sizes.append(size)
        if len(uris) == page_size:
            yield Page(pa.RecordBatch.from_arrays([uris, kinds, sizes], schema=LISTING_SCHEMA), skipped)
            uris, kinds, sizes, skipped = [], [], [], 0
    if uris or skipped:
        yield Page(pa.RecordBatch.from_arrays([uris, kinds, sizes], schema=LISTING_SCHEMA), skipped)


def _suffix(uri: str) -> str:
    """A file name's suffix, to say which kinds of file were skipped: '.csv'; '' for README, _SUCCESS and the
    like, which lie beside documents and are skipped without a word."""
    return os.path.splitext(uri.rsplit("/", 1)[-1])[1].lower()


def _unnamed(uri: str, size: int | None) -> str | None:
    """Why a listed file cannot be read, or named by a doc_id that reads it back, if it cannot."""
    if size is None:
        return f"{redact(uri)}: not a regular file (a broken symbolic link, a pipe, a device)"
    if not is_utf8(uri):
        return f"{os.fsencode(uri)!r}: its name is not UTF-8, which a doc_id must be"
    if "?" in uri and is_uri(uri):
        return f"{uri!r}: its key holds a '?', which docembed refuses in a URI (where a signed URL has its query)"
    if unreadable := unreadable_key(uri):
        return f"{uri!r}: {unreadable}"
    return None


def _location(
    location: str, start_after: str | None, page_size: int, folders: Folders | None = None
) -> Iterator[tuple[str, int | None]]:
    """(uri, size) of every file under `location`, ascending; checks now that it exists, lists when iterated.
    A location with a wildcard (`glob_of`) is the files under its fixed part that the pattern matches, and only
    the folders whose names can lead to a match are listed."""
    if not str(location).strip():
        raise InputError("an input is an empty string (which would name the current directory)")
    check_location(location)  # first: a URI's "?" begins a query (a signed URL's credentials), never a wildcard
    if (found := glob_of(location)) and not _as_written(location):
        fixed, glob = found
        base = tree(fixed)
        under = _location(fixed, start_after, page_size, _folders(base, glob))  # checked now, as any location
        return _matched(location, re.compile(re.escape(base) + _translated(glob) + "(?:/.*)?"), under)
    fs, path = filesystem_for(location)
    with failing_at(f"input {location}"):
        info = file_info(fs, path)
    if info.type == pafs.FileType.NotFound:
        raise InputError(f"input {redact(location)} does not exist{_missing_bucket(fs, path)}")
    # On object stores an object and a prefix may share a name ("rep.txt", "rep.txt/a.txt"): a trailing "/" names
    # the prefix, as it does a directory.
    prefix = str(location).endswith("/") and is_object_store(fs)
    if info.type == pafs.FileType.File and not prefix:
        return iter([(uri_of(location, info.path, path), info.size)])
    if info.type not in (pafs.FileType.Directory, pafs.FileType.File):
        raise InputError(f"input {redact(location)} is neither a file nor a directory")
    return _failing_at(location, _entries(location, fs, path, start_after, page_size, folders))


def glob_of(location: str) -> tuple[str, str] | None:
    """For a location with wildcards in a name (`docs/*.pdf`, `s3://b/crawl/**/*.pdf`, `d/202[45]-*/`): the
    location of the directory above the first such name, and the glob that follows it (`crawl/**/*.pdf`
    gives `s3://b/crawl` and `**/*.pdf`). `*` and `?` (in a local path: in a URI it begins a query, refused) stay
    within a name, `**` spans any folders, `[...]` is a set of characters (`[!...]` its complement). None for a
    location without them."""
    head, sep, rest = location.partition("://")
    path = rest if sep else head
    names = path.split("/")
    first = next((i for i, name in enumerate(names) if any(c in name for c in "*?[")), None)
    if first is None or sep and first == 0:  # no bucket's name holds one: left to the bucket's check to refuse
        return None
    fixed = "/".join(names[:first]) or ("/" if path.startswith("/") else ".")
    return (f"{head}://{fixed}" if sep else fixed), "/".join(names[first:]).rstrip("/")


def _as_written(location: str) -> bool:
    """Whether a file, folder, object or prefix is named by `location` as written: a name may hold `*` or `[`,
    and then it is no glob."""
    if not is_uri(location):
        return os.path.exists(location)
    fs, path = filesystem_for(location)
    with failing_at(f"input {location}"):
        return file_info(fs, path).type != pafs.FileType.NotFound


@dataclasses.dataclass(frozen=True)
class Folders:
    """Which folders under `base` a glob that follows it lists: those whose names below `base` each match the
    glob's name at their depth, until the glob's names are all matched (a folder matched gives the files under
    it) or one holds `**`, which spans folders. Folders are named by their URIs, ending in "/"."""

    base: str
    names: tuple[re.Pattern | None, ...]  # the glob's, one per depth; None for one holding `**`

    def _depth(self, folder: str) -> int | None:
        """How many of the glob's names the folder's matched, all of them (or up to a `**`) counting as
        every one; None where one did not."""
        names = folder[len(self.base) :].rstrip("/").split("/")
        for name, pattern in zip(names, self.names):
            if pattern is None:
                return len(self.names)
            if not pattern.fullmatch(name):
                return None
        return len(names)

    def may_hold(self, folder: str) -> bool:
        """Whether `folder` may hold a file the glob matches."""
        return self._depth(folder) is not None

    def narrows_below(self, folder: str) -> bool:
        """Whether the glob still leaves out some of `folder`'s sub-folders: it has a name for their depth, without
        `**`."""
        depth = self._depth(folder)
        return depth is not None and depth < len(self.names) and self.names[depth] is not None


def _folders(base: str, glob: str) -> Folders | None:
    """The folders under `base` that `glob` lists; None (every folder) for a glob with a set holding "/", whose
    names cannot be told apart."""
    if re.search(r"\[[^]]*/", glob):
        return None
    return Folders(base, tuple(None if "**" in name else re.compile(_translated(name)) for name in glob.split("/")))


def _translated(glob: str) -> str:
    """A glob's regular expression, its wildcards as `glob_of` reads them."""
    pattern = ""
    for part in re.split(r"(\*\*/?|\*|\?|\[!?\]?[^]]*\])", glob):
        if part.startswith("**"):
            pattern += "(?:.*/)?" if part.endswith("/") else ".*"
        elif part == "*":
            pattern += "[^/]*"
        elif part == "?":
            pattern += "[^/]"
        elif part.startswith("[") and len(part) > 2:
            pattern += "[" + ("^" + part[2:-1] if part[1] == "!" else part[1:-1]) + "]"
        else:
            pattern += re.escape(part)
    return pattern


def _matched(
    location: str, pattern: re.Pattern, entries: Iterator[tuple[str, int | None]]
) -> Iterator[tuple[str, int | None]]:
    """The `entries` whose URI `pattern` matches whole (a folder's name matched takes the files under it); a
    pattern that matched none is said once its listing is done, not an error: other inputs may hold files."""
    found = False
    for uri, size in entries:
        if pattern.fullmatch(uri):
            found = True
            yield uri, size
    if not found:
        log.warning("docembed: input %s matches no file", redact(location))


def tree(location: str) -> str:
    """What the URI of every file under the directory `location` starts with: the same for `dir`, `./dir/`
    and `file:///abs/dir`."""
    _, path = filesystem_for(location)
    return uri_of(location, f"{path.rstrip('/')}/", path)


def _failing_at(location: str, entries: Iterator[tuple[str, int | None]]) -> Iterator[tuple[str, int | None]]:
    with failing_at(f"input {location}"):
        yield from entries


def _entries(
    location: str, fs: pafs.FileSystem, path: str, start_after: str | None, page_size: int, folders: Folders | None
) -> Iterator[tuple[str, int | None]]:
    """The one dispatch point: (uri, size) of every file under directory `path`, ascending by URI, leaving out
    the folders that `folders` refuses."""
    scheme = scheme_of(location)
    base = tree(location)
    if wholly_before(base, start_after):
        return
    within = start_after if start_after and start_after.startswith(base) else None
    if scheme in ("", "file"):
        yield from _walk(base, within, folders)
    elif scheme in STORES:
        bucket, _, prefix = path.partition("/")
        prefix = f"{prefix}/" if prefix else ""
        key_start = within[len(base) - len(prefix) :] if within else None
        uri = lambda sub: uri_of(location, f"{bucket}/{sub}", path)  # noqa: E731
        wanted = folders and (lambda sub: folders.may_hold(uri(sub)))
        descend = folders and (lambda sub: folders.narrows_below(uri(sub)))
        for key, size in list_objects(scheme, bucket, prefix, key_start, page_size, wanted, descend):
            yield uri_of(location, f"{bucket}/{key}", path), size
    else:  # other filesystems pyarrow or fsspec know (untested): listed whole, as they offer no pages
        yield from sorted((uri_of(location, i.path, path), i.size) for i in list_files(fs, path))


def _walk(
    directory: str, start_after: str | None, folders: Folders | None, above: frozenset = frozenset()
) -> Iterator[tuple[str, int | None]]:
    """(path, size) of the files under `directory` (ending in "/"), ascending: one directory's names sorted at a time;
    size None for an entry that is neither a regular file nor a directory.

    A directory sorts as its name followed by "/", as its files' paths do: `a-b`
    comes before `a/x`, which comes before `a0`. Symbolic links are followed,
    except one to a directory the walk is already inside (`above`: their device
    and inode), which would list its files again, deeper each time, until the
    path is too long.
    """
    try:
        here = os.stat(directory)
        with os.scandir(directory) as it:
            named = sorted((e.name + "/" if _is(e.is_dir) else e.name, e) for e in it)
    except FileNotFoundError:
        return  # removed while the walk went on: nothing is under it
    except OSError as e:  # unreadable: its files cannot be embedded, and leaving them out would be silent
        raise InputError(f"input directory {redact(directory)} cannot be listed: {e.strerror or e}") from None
    above = above | {(here.st_dev, here.st_ino)}
    for name, entry in named:
        path = directory + name
        try:
            if name.endswith("/"):
                inside = entry.stat()
                if (inside.st_dev, inside.st_ino) not in above and not wholly_before(path, start_after):
                    if folders is None or folders.may_hold(path):
                        yield from _walk(path, start_after, folders, above)
            elif start_after is None or path > start_after:
                # Not a regular file (a broken symbolic link, a loop of them, a pipe, a device): listed to be
                # skipped and counted, never read (a pipe's read would wait forever).
                yield path, entry.stat().st_size if _is(entry.is_file) else None
        except FileNotFoundError:
            continue  # removed since the directory was read


def _is(test: Callable[[], bool]) -> bool:
    """An entry's is_dir or is_file, False where it cannot be told (a loop of symbolic links): that entry is then
    skipped and counted, not the whole directory's listing failed."""
    try:
        return test()
    except OSError:
        return False


def _missing_bucket(fs: pafs.FileSystem, path: str) -> str:
    bucket = bucket_missing(fs, path) if "/" in path else None
    return f" (there is no bucket {bucket})" if bucket else ""
