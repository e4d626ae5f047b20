"""Reading a block's input files: contents in order, a missing file as its error in place, a refused one named."""

from __future__ import annotations

import concurrent.futures

import pytest

from pipeline.errors import StorageError
from pipeline.io import filesystems


def _no_pool(*args, **kwargs):
    raise AssertionError("local files are read without a thread pool")


def test_local_files_are_read_in_order_without_a_pool(tmp_path, monkeypatch):
    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", _no_pool)
    paths = []
    for i in range(5):
        path = tmp_path / f"n{i}.txt"
        path.write_bytes(f"note {i}".encode())
        paths.append(str(path))
    missing = str(tmp_path / "gone.txt")
    uris = [paths[0], f"file://{paths[1]}", missing, *paths[2:]]

    contents = filesystems.read_many(uris)

    assert contents[:2] == [b"note 0", b"note 1"] and contents[3:] == [b"note 2", b"note 3", b"note 4"]
    assert isinstance(contents[2], FileNotFoundError)


def test_paths_and_file_uris_are_local_other_uris_remote():
    assert filesystems._is_remote("s3://bucket/a.txt") and filesystems._is_remote("gs://bucket/a.txt")
    assert not filesystems._is_remote("/data/a.txt") and not filesystems._is_remote("file:///data/a.txt")


def test_a_hash_is_part_of_a_key_or_name_and_file_uris_are_percent_decoded(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # no region lookup: nothing is asked of it
    assert filesystems.filesystem_for("s3://bucket/dir/Report #5.pdf")[1] == "bucket/dir/Report #5.pdf"
    assert filesystems.filesystem_for("gs://bucket/C#/notes.txt")[1] == "bucket/C#/notes.txt"
    assert filesystems.filesystem_for("s3://bucket/k/tab\there\n.txt/")[1] == "bucket/k/tab\there\n.txt"
    (tmp_path / "Report #5 (final).txt").write_text("five")
    uri = f"file://{tmp_path}/Report%20%235%20(final).txt"
    assert filesystems.read_many([uri, f"file://{tmp_path}/Report #5 (final).txt"]) == [b"five", b"five"]


@pytest.mark.parametrize("type_name, scheme", [("s3", "s3"), ("gcs", "gs")])
def test_storage_failures_name_the_uri_as_the_user_writes_it(monkeypatch, type_name, scheme):
    # pyarrow's path for s3://in1/w/plain.txt is in1/w/plain.txt: each message names the URI the user knows.
    def refuse(*args, **kwargs):
        raise OSError("AWS Error ACCESS_DENIED during GetObject operation: Access Denied")

    refusing = type("Refusing", (), {"type_name": type_name, "__getattr__": lambda self, name: refuse})()
    monkeypatch.setattr(filesystems, "filesystem_for", lambda uri: (refusing, uri.split("://", 1)[1]))
    calls = {
        "read": lambda fs, path: filesystems.read_file(fs, path),
        "write": lambda fs, path: filesystems.write_file(fs, path, b"x", "in1/_staging"),
        "look up": filesystems.file_info,
        "list": filesystems.list_files,
        "delete": filesystems.delete_file,
    }
    for verb, call in calls.items():
        with pytest.raises(StorageError, match=rf"^cannot {verb} {scheme}://in1/w/plain\.txt: "):
            call(refusing, "in1/w/plain.txt")
    with pytest.raises(StorageError, match=rf"^cannot read {scheme}://in1/w/plain\.txt: "):
        filesystems.read_bytes(f"{scheme}://in1/w/plain.txt")
