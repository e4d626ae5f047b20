"""Listing the job's inputs: files and directories, local or any pyarrow filesystem URI.

The driver only lists names and sizes here; document bytes are read by the
workers, through `open_input`.
"""

from __future__ import annotations

import dataclasses
import os
from urllib.parse import urlparse

import pyarrow.fs as pafs

from pipeline.errors import InputError
from pipeline.extract import kind_of


@dataclasses.dataclass(frozen=True)
class InputFile:
    uri: str  # what the user would write to name this file; also its doc_id
    kind: str  # "pdf" or "text"
    size: int


def _is_uri(location: str) -> bool:
    return "://" in location


def filesystem_for(location: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or a URI."""
    if not _is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(location)
    try:
        return pafs.FileSystem.from_uri(location)
    except (OSError, ValueError) as e:  # pyarrow.ArrowInvalid is a ValueError
        raise InputError(f"cannot open {location}: {e}") from None


def _uri_of(location: str, fs_path: str) -> str:
    if not _is_uri(location):
        return fs_path
    scheme = urlparse(location).scheme
    return fs_path if scheme == "file" else f"{scheme}://{fs_path}"


def list_inputs(locations: list[str]) -> tuple[list[InputFile], int]:
    """All readable documents under `locations`, sorted by URI, and how many files were skipped.

    A location may be a file or a directory (searched recursively). Files whose
    extension the pipeline does not read are skipped and counted.
    """
    found: dict[str, InputFile] = {}
    skipped = 0
    for location in locations:
        fs, path = filesystem_for(location)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise InputError(f"input {location} does not exist")
        infos = [info] if info.type == pafs.FileType.File else fs.get_file_info(pafs.FileSelector(path, recursive=True))
        for entry in infos:
            if entry.type != pafs.FileType.File:
                continue
            kind = kind_of(entry.path)
            if kind is None:
                skipped += 1
                continue
            uri = _uri_of(location, entry.path)
            found[uri] = InputFile(uri=uri, kind=kind, size=entry.size)
    return [found[uri] for uri in sorted(found)], skipped


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem_for(uri)
    with fs.open_input_stream(path) as f:
        return f.read()
