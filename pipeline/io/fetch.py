"""Model directories in object storage, fetched once per node into a local cache and reused.

Fetching goes through the same pyarrow filesystems, credentials and retries as
the corpus, rather than smart_open, which would need boto3 and
google-cloud-storage at run time and a second way of reading credentials.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import pyarrow.fs as pafs

from pipeline.errors import InputError, StorageError
from pipeline.io.filesystems import filesystem_for, list_files
from pipeline.io.retries import retrying
from pipeline.io.uris import redact, uri_of

MODEL_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "docembed" / "models"
_FETCHED = ".docembed-fetched.json"


def fetch_dir(uri: str, cache: Path | None = None) -> Path:
    """A local copy of the directory at `uri`, fetched into this node's cache and reused.

    The cache is `DOCEMBED_MODEL_CACHE`, by default $XDG_CACHE_HOME/docembed/models
    (~/.cache/docembed/models without XDG_CACHE_HOME). It holds a listing (path,
    size, mtime) of what it fetched: while the remote listing is the same, the
    copy is reused; when it changed, it is fetched again.
    Fetching goes to a temporary directory, checks every size, and is renamed
    into place; a lock keeps the actors of one node from fetching it side by side.
    """
    cache = Path(cache or os.environ.get("DOCEMBED_MODEL_CACHE") or MODEL_CACHE)
    fs, root = filesystem_for(uri)
    files = list_files(fs, root)
    if not files:
        raise InputError(f"model directory {redact(uri)} does not exist or is empty")
    listing = sorted((f.path[len(root) :].lstrip("/"), f.size, f.mtime_ns) for f in files)
    # One copy per directory, however it is spelled: `s3://b/m/` and `s3://b/m`, `gcs://` and `gs://`.
    target = cache / hashlib.sha256(uri_of(uri, root, root).encode()).hexdigest()[:24]
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
                        raise StorageError(
                            f"fetching {redact(uri)}/{rel}: got {dest.stat().st_size} bytes, expected {size}"
                        )
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
