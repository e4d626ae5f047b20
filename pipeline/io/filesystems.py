"""Filesystems: local paths, `file://`, `s3://` and `gs://` URIs as pyarrow filesystems, and the few
operations every reader and writer needs, each retried (`pipeline.io.retries`).

Endpoints and credentials come from the standard environment, never from a URI
(`pipeline.io.uris` refuses those that carry any):

  s3://  AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (for MinIO, moto, ...), AWS_REGION or
         AWS_DEFAULT_REGION, and the AWS SDK's default credential chain (AWS_ACCESS_KEY_ID,
         AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, profiles, instance roles)
  gs://  STORAGE_EMULATOR_HOST for an emulator (anonymous), else Google's application
         default credentials (GOOGLE_APPLICATION_CREDENTIALS, metadata server)

Other schemes that pyarrow (`FileSystem.from_uri`) or fsspec know may work; they
are not tested. Each process builds its filesystems itself from its own
environment, so Ray workers must have the same variables as the driver (a local
Ray inherits them; on a cluster set them on the nodes).

Failures: the SDKs retry each request (GCS for up to GCS_RETRY_SECONDS), and
every operation here is retried whole on top; what still fails is `StorageError`.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import os
import uuid
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from pipeline.errors import ConfigError, InputError, StorageError
from pipeline.io.retries import NOT_FOUND, retrying
from pipeline.io.uris import OBJECT_STORE_SCHEMES, check_location, is_uri, parse, redact, scheme_of

S3_RETRIES = 6  # per request, inside the AWS SDK (backoff 25ms, 50ms, ... 800ms), unless AWS_MAX_ATTEMPTS says
GCS_RETRY_SECONDS = 60  # per request, inside google-cloud-cpp

_ENV_OF_SCHEME = {
    "s3": (
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_MAX_ATTEMPTS",
    ),
    "gs": ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"),
}


def env_key(scheme: str) -> tuple:
    """The environment variables that make `scheme`'s clients: a cache key, so a changed environment gets new ones."""
    return tuple(os.environ.get(name) for name in _ENV_OF_SCHEME.get(scheme, ()))


def s3_retries() -> int:
    """Retries per S3 request inside the AWS SDK: `AWS_MAX_ATTEMPTS`, the AWS SDKs' own variable (attempts, the
    first included), less one, where set; else S3_RETRIES. boto3 (the listing) reads the variable itself, but only
    where no retries are passed; pyarrow's S3 filesystem not at all. Both take retries."""
    value = os.environ.get("AWS_MAX_ATTEMPTS")
    if value is None:
        return S3_RETRIES
    try:
        attempts = int(value)
    except ValueError:
        attempts = 0
    if attempts < 1:
        raise ConfigError(f"AWS_MAX_ATTEMPTS {value!r} is not a positive whole number")
    return attempts - 1


def filesystem_for(location: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or a URI."""
    location = str(location)
    if not is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(location)
    check_location(location)
    scheme = scheme_of(location)
    parsed = parse(location)
    if scheme == "file":  # percent-encoded, as RFC 8089 has it: file:///data/Report%20%235.pdf
        return pafs.LocalFileSystem(), os.path.abspath(unquote(parsed.path))
    if scheme in OBJECT_STORE_SCHEMES:
        # The key as written: urlparse drops tabs and newlines (as browsers do), which a key may hold.
        path = location.split("://", 1)[1].rstrip("/")
        return _object_store(scheme, parsed.netloc, env_key(scheme)), path
    return _other_filesystem(location)


@functools.lru_cache(maxsize=64)
def _object_store(scheme: str, bucket: str, env_key: tuple) -> pafs.FileSystem:
    # env_key is part of the cache key only: a changed environment gets a new filesystem.
    if scheme == "s3":
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
            retry_strategy=pafs.AwsDefaultS3RetryStrategy(max_attempts=s3_retries()),  # retries, as its doc says
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
    _check_google_credentials(bucket)
    return pafs.GcsFileSystem(retry_time_limit=retry_limit)


def _check_google_credentials(bucket: str) -> None:
    """Raises StorageError when no Google Cloud credentials are to be found.

    google-cloud-cpp, under pyarrow, says so only after its retry policy runs
    out: 104 s and a 900-character line here. Google's auth library looks for
    them the same way (Application Default Credentials: the key file that
    GOOGLE_APPLICATION_CREDENTIALS names, gcloud's file, the metadata server
    on Google Cloud) and answers at once.
    """
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        google.auth.default()
    except DefaultCredentialsError as e:
        why = str(e).split(". ", 1)[0].rstrip(".")  # "File /k.json was not found", "Your default credentials ..."
        raise StorageError(
            f"cannot reach gs://{bucket}: no Google Cloud credentials ({redact(why)}): "
            "set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, "
            "run `gcloud auth application-default login`, or run on Google Cloud"
        ) from None


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


def is_object_store(fs: pafs.FileSystem) -> bool:
    return fs.type_name in ("s3", "gcs")


def shown(fs: pafs.FileSystem, path: str) -> str:
    """`path` as the user writes it, for messages: pyarrow's object-store paths lack the scheme (s3://b/k is b/k)."""
    scheme = {"s3": "s3", "gcs": "gs"}.get(fs.type_name)
    return f"{scheme}://{path}" if scheme else path


def bucket_missing(fs: pafs.FileSystem, path: str) -> str | None:
    """The bucket of object-store `path` when it does not exist; None when it does (or `fs` is local)."""
    if not is_object_store(fs):
        return None
    bucket = path.split("/", 1)[0]
    return bucket if file_info(fs, bucket).type == pafs.FileType.NotFound else None


def file_info(fs: pafs.FileSystem, path: str) -> pafs.FileInfo:
    return retrying(f"cannot look up {shown(fs, path)}", lambda: fs.get_file_info(path))


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

    return retrying(f"cannot list {shown(fs, path)}", ls)


def makedirs(fs: pafs.FileSystem, path: str) -> None:
    """Object stores have no directories (creating one would write a marker object): local ones only."""
    if not is_object_store(fs):
        retrying(f"cannot create {path}", lambda: fs.create_dir(path, recursive=True))


def _delete(fs: pafs.FileSystem, remove, path: str) -> None:
    """`remove(path)` with retries; already gone counts as done, so a retried delete is safe."""

    def run():
        try:
            remove(path)
        except FileNotFoundError:
            pass

    retrying(f"cannot delete {shown(fs, path)}", run)


def delete_file(fs: pafs.FileSystem, path: str) -> None:
    _delete(fs, fs.delete_file, path)


def delete_tree(fs: pafs.FileSystem, path: str) -> None:
    """Deletes every file under `path` (and the directory itself on local filesystems)."""
    for info in list_files(fs, path):
        delete_file(fs, info.path)
    if not is_object_store(fs):
        _delete(fs, fs.delete_dir, path)


def read_file(fs: pafs.FileSystem, path: str) -> bytes:
    """The bytes at `path`."""

    def read():
        with fs.open_input_stream(path) as f:
            return f.read()

    return retrying(f"cannot read {shown(fs, path)}", read)


def write_file(fs: pafs.FileSystem, path: str, data: bytes, staging_dir: str) -> None:
    """Writes `data` so that `path` appears whole or not at all, and checks its size there.

    The body is written under `staging_dir`, checked, and moved into place: a
    rename locally, a server-side copy on object stores, where the object
    appears whole. Writing to `path` directly would not be all-or-nothing even
    on S3 or GCS: an output stream closed by an exception (the SystemExit of a
    worker that Ray stops mid-write) commits what it holds, down to 0 bytes.
    """

    def check(written: str) -> None:
        size = fs.get_file_info(written).size
        if size != len(data):
            raise OSError(f"{written}: wrote {len(data)} bytes but storage holds {size}")

    def stage_check_move():
        staged = f"{staging_dir}/{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}"
        try:
            if not is_object_store(fs):  # object stores have no directories to make
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

    retrying(f"cannot write {shown(fs, path)}", stage_check_move)


def put_small(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Writes `data` at `path` directly, in one request on object stores: for a small file that is read as
    absent unless whole (a lease), where `write_file`'s staging would cost a copy each time."""

    def put():
        with fs.open_output_stream(path) as f:
            f.write(data)

    retrying(f"cannot write {shown(fs, path)}", put)


def read_bytes(uri: str) -> bytes:
    """The bytes of one input file, read on a worker; FileNotFoundError etc. for a vanished file."""
    fs, path = filesystem_for(uri)
    return read_file(fs, path)


def read_many(uris: list[str]) -> list[bytes | Exception]:
    """`read_bytes` of each URI, side by side where they are remote: object storage answers each
    request in tens of ms. Local files are read one after another: they answer in microseconds, less
    than a thread pool's start and hand-offs cost (three quarters of the CPU stages' time on tiny
    files, BENCHMARKS.md).

    A file that cannot be read comes back as its exception (FileNotFoundError etc.),
    in place; a storage failure (StorageError) is raised.
    """

    def read(uri: str) -> bytes | Exception:
        try:
            return read_bytes(uri)
        except NOT_FOUND as e:
            return e

    if len(uris) <= 1 or not any(map(_is_remote, uris)):
        return [read(u) for u in uris]
    with concurrent.futures.ThreadPoolExecutor(min(len(uris), 8)) as pool:
        return list(pool.map(read, uris))


def _is_remote(location: str) -> bool:
    return is_uri(location) and scheme_of(location) != "file"
