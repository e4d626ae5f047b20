"""Storage: local paths, `file://`, `s3://` and `gs://` URIs as pyarrow filesystems, with retries.

Endpoints and credentials come from the standard environment, never from a URI
(a URI with `user:secret@` or `?options` is refused, so that no credential can
reach a log line, an error, a doc_id, `_SUCCESS` or Parquet metadata):

  s3://  AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (for MinIO, moto, ...), AWS_REGION or
         AWS_DEFAULT_REGION, and the AWS SDK's default credential chain (AWS_ACCESS_KEY_ID,
         AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, profiles, instance roles)
  gs://  STORAGE_EMULATOR_HOST for an emulator (anonymous), else Google's application
         default credentials (GOOGLE_APPLICATION_CREDENTIALS, metadata server)

Other schemes that pyarrow (`FileSystem.from_uri`) or fsspec know may work; they
are not tested. Each process builds its filesystems itself from its own
environment, so Ray workers must have the same variables as the driver (a local
Ray inherits them; on a cluster set them on the nodes).

Failures: the SDKs retry each request (S3: the AWS SDK's default strategy, which
backs off on SlowDown, throttling and 5xx; GCS: google-cloud-cpp's policy, for up
to GCS_RETRY_SECONDS), and `retrying`
retries whole operations on top, so a connection dropped mid-object is read
again. What still fails is `StorageError`, one line with credentials scrubbed:
infrastructure failures stop the job, they never become error rows.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import fcntl
import functools
import hashlib
import json
import os
import random
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import urlparse

import pyarrow.fs as pafs

from pipeline.errors import ConfigError, InputError, StorageError

T = TypeVar("T")

OBJECT_STORE_SCHEMES = ("s3", "gs", "gcs")
S3_MAX_ATTEMPTS = 6  # per request, inside the AWS SDK (backoff 25ms, 50ms, ... 800ms)
GCS_RETRY_SECONDS = 60  # per request, inside google-cloud-cpp
ATTEMPTS = 3  # per whole operation, on top of the SDK's retries
BACKOFF_SECONDS = 0.5

_ENV_OF_SCHEME = {
    "s3": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
           "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"),
    "gs": ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"),
}
# Values never printed: scrubbed from every message this module raises.
_SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")
# A URI's query: where signed URLs carry theirs (X-Amz-Signature, X-Amz-Security-Token, ...).
_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#]*)\?[^\s#'\"]*")
# Errors that retrying cannot fix: missing things and refused credentials.
_PERMANENT = re.compile(
    r"ACCESS_DENIED|AccessDenied|SIGNATURE_DOES_NOT_MATCH|INVALID_ACCESS_KEY_ID|InvalidAccessKeyId|NO_SUCH_BUCKET|"
    r"NO_SUCH_KEY|RESOURCE_NOT_FOUND|PERMISSION_DENIED|UNAUTHENTICATED|Permanent error|HTTP status code: 40[0134]"
)
_STORAGE_CLIENT = re.compile(r"google::cloud::Status|AWS Error")
_CREDENTIALS = re.compile(r"ACCESS_DENIED|AccessDenied|SIGNATURE|INVALID_ACCESS_KEY|PERMISSION_DENIED|UNAUTHENTICATED|40[13]\b")


def redact(text: str) -> str:
    """`text` without `user:secret@` and `?query` in URIs and without the values of credential variables."""
    text = _QUERY.sub(r"\1?***", _USERINFO.sub(r"\1***@", str(text)))
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def is_uri(location: str) -> bool:
    return "://" in str(location)


def scheme_of(location: str) -> str:
    return urlparse(str(location)).scheme.lower() if is_uri(location) else ""


def check_location(location: str) -> None:
    """Refuses locations that carry credentials or options: those belong in the environment."""
    if not is_uri(location):
        return
    parsed = urlparse(location)
    if "@" in parsed.netloc:
        raise ConfigError(
            f"{redact(location)}: credentials in URIs are not accepted (they would end up in logs and outputs); "
            "set them in the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, Google default credentials)"
        )
    # Any scheme: a query is where a signed URL carries its credentials.
    if parsed.query:
        raise ConfigError(
            f"{redact(location)}: options in URIs are not accepted (a signed URL's would end up in logs and "
            "outputs); set the endpoint with AWS_ENDPOINT_URL or STORAGE_EMULATOR_HOST"
        )
    if parsed.scheme.lower() in OBJECT_STORE_SCHEMES and not parsed.netloc:
        raise ConfigError(f"{location}: no bucket named")


def _env_key(scheme: str) -> tuple:
    return tuple(os.environ.get(name) for name in _ENV_OF_SCHEME.get(scheme, ()))


def filesystem_for(location: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or a URI."""
    location = str(location)
    if not is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(location)
    check_location(location)
    scheme = scheme_of(location)
    parsed = urlparse(location)
    if scheme == "file":
        return pafs.LocalFileSystem(), os.path.abspath(parsed.path)
    if scheme in OBJECT_STORE_SCHEMES:
        family = "gs" if scheme in ("gs", "gcs") else "s3"
        path = f"{parsed.netloc}{parsed.path}".rstrip("/")
        return _object_store(family, parsed.netloc, _env_key(family)), path
    return _other_filesystem(location)


@functools.lru_cache(maxsize=64)
def _object_store(family: str, bucket: str, env_key: tuple) -> pafs.FileSystem:
    # env_key is part of the cache key only: a changed environment gets a new filesystem.
    if family == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region is None and endpoint is None:
            try:
                region = pafs.resolve_s3_region(bucket)
            except (OSError, ValueError):
                region = "us-east-1"
        return pafs.S3FileSystem(
            region=region or "us-east-1",
            endpoint_override=endpoint,
            retry_strategy=pafs.AwsDefaultS3RetryStrategy(max_attempts=S3_MAX_ATTEMPTS),
            connect_timeout=10,
            request_timeout=60,
        )
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    retry_limit = datetime.timedelta(seconds=GCS_RETRY_SECONDS)
    if emulator:
        url = urlparse(emulator if "://" in emulator else f"http://{emulator}")
        return pafs.GcsFileSystem(
            anonymous=True, endpoint_override=url.netloc, scheme=url.scheme or "http", retry_time_limit=retry_limit
        )
    return pafs.GcsFileSystem(retry_time_limit=retry_limit)


def _other_filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    try:
        fs, path = pafs.FileSystem.from_uri(location)
        return fs, path.rstrip("/")
    except (OSError, ValueError):
        pass
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        fs, path = fsspec.core.url_to_fs(location)
        return PyFileSystem(FSSpecHandler(fs)), path.rstrip("/")
    except (ImportError, OSError, ValueError) as e:
        raise InputError(f"cannot open {redact(location)}: no filesystem for it ({redact(e)})") from None


def uri_of(location: str, fs_path: str, base_path: str) -> str:
    """The URI a user would write for `fs_path`, found under `location` (whose path is `base_path`)."""
    scheme = scheme_of(location)
    if scheme in ("", "file"):
        return fs_path
    if scheme in OBJECT_STORE_SCHEMES:
        return f"{scheme}://{fs_path}"
    rel = fs_path[len(base_path):].lstrip("/") if fs_path.startswith(base_path) else ""
    return location.rstrip("/") + ("/" + rel if rel else "")


def is_object_store(fs: pafs.FileSystem) -> bool:
    return fs.type_name in ("s3", "gcs")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def describe(e: BaseException) -> str:
    """One redacted line for a storage exception, with a hint when credentials look wrong."""
    line = redact(_first_line(e))
    if _CREDENTIALS.search(str(e)):
        line += " (check the credentials in the environment)"
    return line


def is_transient(e: BaseException) -> bool:
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)):
        return False
    return isinstance(e, OSError) and not _PERMANENT.search(str(e))


def retrying(what: str, fn: Callable[[], T], *, attempts: int = ATTEMPTS) -> T:
    """`fn()`, retried with backoff on transient storage errors; `StorageError` when it keeps failing.

    Missing files are not storage failures: FileNotFoundError and friends pass through.
    """
    for attempt in range(attempts):
        try:
            return fn()
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError):
            raise
        except ValueError as e:
            # pyarrow reports some refusals of a storage service as ArrowInvalid (a ValueError)
            if not _STORAGE_CLIENT.search(str(e)):
                raise
            raise StorageError(f"{redact(what)}: {describe(e)}") from None
        except OSError as e:
            if not is_transient(e):
                raise StorageError(f"{redact(what)}: {describe(e)}") from None
            if attempt == attempts - 1:
                raise StorageError(f"{redact(what)}: still failing after {attempts} attempts: {describe(e)}") from None
            time.sleep(BACKOFF_SECONDS * 2**attempt * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


# --- small operations every writer needs, the same on every filesystem -------------------------


def file_info(fs: pafs.FileSystem, path: str) -> pafs.FileInfo:
    return retrying(f"cannot look up {path}", lambda: fs.get_file_info(path))


def exists(fs: pafs.FileSystem, path: str) -> bool:
    return file_info(fs, path).type != pafs.FileType.NotFound


def list_files(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    """Every file under directory `path`, recursively; [] when there is none."""

    def ls():
        try:
            infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
        return [i for i in infos if i.type == pafs.FileType.File]

    return retrying(f"cannot list {path}", ls)


def makedirs(fs: pafs.FileSystem, path: str) -> None:
    """Object stores have no directories (creating one would write a marker object): local ones only."""
    if not is_object_store(fs):
        retrying(f"cannot create {path}", lambda: fs.create_dir(path, recursive=True))


def _delete(remove, path: str) -> None:
    """`remove(path)` with retries; already gone counts as done, so a retried delete is safe."""

    def run():
        try:
            remove(path)
        except FileNotFoundError:
            pass

    retrying(f"cannot delete {path}", run)


def delete_file(fs: pafs.FileSystem, path: str) -> None:
    _delete(fs.delete_file, path)


def delete_tree(fs: pafs.FileSystem, path: str) -> None:
    """Deletes every file under `path` (and the directory itself on local filesystems)."""
    for info in list_files(fs, path):
        delete_file(fs, info.path)
    if not is_object_store(fs):
        _delete(fs.delete_dir, path)


def read_file(fs: pafs.FileSystem, path: str) -> bytes:
    def read():
        with fs.open_input_stream(path) as f:
            return f.read()

    return retrying(f"cannot read {path}", read)


def write_file(fs: pafs.FileSystem, path: str, data: bytes, staging_dir: str) -> None:
    """Writes `data` so that `path` appears whole or not at all, and checks its size there.

    On object stores one PUT of the whole body is already all-or-nothing; a local
    file is written under `staging_dir`, checked, and renamed into place.
    """

    def check(written: str) -> None:
        size = fs.get_file_info(written).size
        if size != len(data):
            raise OSError(f"{written}: wrote {len(data)} bytes but storage holds {size}")

    if is_object_store(fs):
        def put():
            with fs.open_output_stream(path) as f:
                f.write(data)
            check(path)

        retrying(f"cannot write {path}", put)
        return

    def stage_check_move():
        staged = f"{staging_dir}/{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}"
        try:
            fs.create_dir(staging_dir, recursive=True)
            with fs.open_output_stream(staged) as f:
                f.write(data)
            check(staged)
            fs.move(staged, path)
        except BaseException:
            try:
                fs.delete_file(staged)
            except (OSError, ValueError):
                pass  # swept with the staging dir on the next run
            raise

    retrying(f"cannot write {path}", stage_check_move)


# --- reading a document's bytes on a worker ----------------------------------------------------


def read_bytes(uri: str) -> bytes:
    """The bytes of one input file, read on a worker; FileNotFoundError etc. for a vanished file."""
    fs, path = filesystem_for(uri)
    return read_file(fs, path)


def read_many(uris: list[str]) -> list[bytes | Exception]:
    """`read_bytes` of each URI, side by side: object storage answers each request in tens of ms.

    A file that cannot be read comes back as its exception (FileNotFoundError etc.),
    in place; a storage failure (StorageError) is raised.
    """

    def read(uri: str) -> bytes | Exception:
        try:
            return read_bytes(uri)
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
            return e

    if len(uris) <= 1:
        return [read(u) for u in uris]
    with concurrent.futures.ThreadPoolExecutor(min(len(uris), 8)) as pool:
        return list(pool.map(read, uris))


# --- model directories from storage, fetched once per node ---------------------------------------

MODEL_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "docembed" / "models"
_FETCHED = ".docembed-fetched.json"


def fetch_dir(uri: str, cache: Path | None = None) -> Path:
    """A local copy of the directory at `uri`, fetched into this node's cache and reused.

    The cache is `DOCEMBED_MODEL_CACHE`, by default ~/.cache/docembed/models. It
    holds a listing (path, size, mtime) of what it fetched: while the remote
    listing is the same, the copy is reused; when it changed, it is fetched again.
    This goes through the same pyarrow filesystems, credentials and retries as
    the corpus, rather than smart_open, which would need boto3 and
    google-cloud-storage at run time and a second way of reading credentials. Fetching goes to a temporary directory, checks every size, and is renamed
    into place; a lock keeps the actors of one node from fetching it side by side.
    """
    cache = Path(cache or os.environ.get("DOCEMBED_MODEL_CACHE") or MODEL_CACHE)
    fs, root = filesystem_for(uri)
    files = list_files(fs, root)
    if not files:
        raise InputError(f"model directory {redact(uri)} does not exist or is empty")
    listing = sorted((f.path[len(root):].lstrip("/"), f.size, f.mtime_ns) for f in files)
    target = cache / hashlib.sha256(uri.encode()).hexdigest()[:24]
    cache.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _cached_listing(target) == listing:
                return target
            tmp = cache / f".tmp-{uuid.uuid4().hex}"
            try:
                for rel, size, _ in listing:
                    dest = tmp / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    _fetch_file(fs, f"{root}/{rel}", dest, uri, rel)
                    if dest.stat().st_size != size:
                        raise StorageError(f"fetching {redact(uri)}/{rel}: got {dest.stat().st_size} bytes, expected {size}")
                (tmp / _FETCHED).write_text(json.dumps({"uri": redact(uri), "files": listing}))
                if target.exists():
                    shutil.rmtree(target)
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            return target
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cached_listing(target: Path) -> list | None:
    try:
        files = json.loads((target / _FETCHED).read_text())["files"]
    except (OSError, ValueError, KeyError):
        return None
    return sorted(tuple(f) for f in files)


def _fetch_file(fs: pafs.FileSystem, path: str, dest: Path, uri: str, rel: str) -> None:
    def copy():
        with fs.open_input_stream(path) as src, open(dest, "wb") as out:
            while block := src.read(8 << 20):
                out.write(block)

    retrying(f"cannot fetch {uri}/{rel}", copy)
