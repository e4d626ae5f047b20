"""URIs as the user writes them: their scheme, their checks, and their redaction.

Endpoints and credentials come from the standard environment, never from a URI:
a URI with `user:secret@` or `?options` is refused, so that no credential can
reach a log line, an error, a doc_id, `_SUCCESS` or Parquet metadata; and every
message that may hold one goes through `redact`.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlparse

from pipeline.errors import ConfigError

# Schemes of the object stores the pipeline is tested against.
OBJECT_STORE_SCHEMES = ("s3", "gs")
# Other spellings pyarrow accepts for them: each URI docembed makes has the first, so that two spellings of one
# place compare equal (the output's own files, left out of an input that holds it; doc_ids).
_SCHEME_ALIASES = {"gcs": "gs"}

# Values never printed: scrubbed from every message the storage layer raises.
_SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# `user:secret@`: up to the first "/" as RFC 3986 has it, or, where that first segment holds a ":" (which no
# bucket name can), up to the last "@": AWS secrets may hold a "/" (`s3://AKIA...:wJalr/XUtn...@bucket/key`).
# Elsewhere that ":" may be a port's, and the "@" in the path: redacting too much is the safe side.
_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?:[^/@\s]*@|[^/@\s:]*:\S*@)")
# A URI's query: where signed URLs carry theirs (X-Amz-Signature, X-Amz-Security-Token, ...).
_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#]*)\?[^\s#'\"]*")


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
    """The scheme of a URI, lowercase and as docembed spells it ("gs" for "gcs"); "" for a local path."""
    scheme = urlparse(str(location)).scheme.lower() if is_uri(location) else ""
    return _SCHEME_ALIASES.get(scheme, scheme)


def parse(location: str):
    """`urlparse` without fragments: "#" is part of an object's key (`s3://b/Report #5.pdf`) or of a file's
    name, never a fragment docembed would drop."""
    return urlparse(str(location), allow_fragments=False)


def check_location(location: str) -> None:
    """Refuses locations that carry credentials or options (those belong in the environment), or that name a key
    docembed cannot read."""
    if not is_uri(location):
        return
    scheme, parsed = scheme_of(location), parse(location)
    # A secret may hold a "/", which ends the netloc; a bucket name holds no ":", so an "@" after one ends a secret.
    secret_with_slash = scheme in OBJECT_STORE_SCHEMES and ":" in parsed.netloc and "@" in parsed.path
    if "@" in parsed.netloc or secret_with_slash:
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
    if scheme in OBJECT_STORE_SCHEMES and not parsed.netloc:
        raise ConfigError(f"{location}: no bucket named")
    if unreadable := unreadable_key(location):
        raise ConfigError(f"{redact(location)}: {unreadable}")


def unreadable_key(location: str) -> str | None:
    """Why an object-store URI names a key that pyarrow cannot read, if it does; a trailing "/" (a prefix) is fine.

    pyarrow refuses a path with an empty segment (`w//a.txt`, a key that starts with "/", `k/http://x`); on S3
    the AWS SDK resolves "." and ".." segments, so it would ask for another key than the one named, and S3
    answers with a signature mismatch (GCS reads such keys as they are).
    """
    scheme = scheme_of(location)
    if scheme not in OBJECT_STORE_SCHEMES:
        return None
    # The key as written, as `filesystem_for` reads it (urlparse would drop a tab): "b/w//a.txt" -> ["w", "", "a.txt"].
    segments = location.split("://", 1)[1].removesuffix("/").split("/")[1:]
    if "" in segments:
        return "its path holds an empty segment ('//'), which docembed's storage client (pyarrow) cannot open"
    if scheme == "s3" and {".", ".."} & set(segments):
        return "its path holds a '.' or '..' segment, which the AWS SDK resolves, so S3 would be asked for another key"
    return None


def doc_id_of(uri: str) -> str:
    """A file's doc_id: its URI (or path) with "%" and "#" percent-encoded, and nothing else.

    A shard's row is `<the shard's doc_id>#<id>`, so the first "#" of a doc_id is where a row's id starts, as a
    URI reader takes a fragment: a file named `col.jsonl#x.txt` is not the row `x.txt` of `col.jsonl`, nor one
    named `a%23b.txt` the file `a#b.txt`. `urllib.parse.unquote` gives the URI back.
    """
    return uri.replace("%", "%25").replace("#", "%23")


def uri_of(location: str, fs_path: str, base_path: str) -> str:
    """The URI a user would write for `fs_path`, found under `location` (whose path is `base_path`)."""
    scheme = scheme_of(location)
    if scheme in ("", "file"):
        return fs_path
    if scheme in OBJECT_STORE_SCHEMES:
        return f"{scheme}://{fs_path}"
    rel = fs_path[len(base_path) :].lstrip("/") if fs_path.startswith(base_path) else ""
    return location.rstrip("/") + ("/" + rel if rel else "")
