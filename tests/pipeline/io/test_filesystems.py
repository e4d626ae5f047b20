"""Reading a block's input files: contents in order, a missing file as its error in place, a refused one named."""

from __future__ import annotations

import concurrent.futures
import json
import time

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
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # no credentials looked for
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


def _no_google_credentials(monkeypatch, tmp_path):
    """An environment where Application Default Credentials find nothing: no key file, no gcloud file, not on
    Google Cloud (NO_GCE_CHECK: google-auth's own switch, so that no metadata server is asked)."""
    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")


def test_gcs_without_credentials_fails_at_once_in_one_line(monkeypatch, tmp_path):
    # google-cloud-cpp said so after its retry policy ran out: 104 s, in a 900-character line.
    _no_google_credentials(monkeypatch, tmp_path)
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"^cannot reach gs://in1: no Google Cloud credentials \(Your default"):
        filesystems.filesystem_for("gs://in1/docs/a.txt")
    assert time.monotonic() - started < 10
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(StorageError, match=r"credentials \(File .*missing\.json was not found\): set GOOGLE_APP"):
        filesystems.filesystem_for("gs://in1/docs/a.txt")


def test_gcs_with_a_key_file_gets_its_filesystem(monkeypatch, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    _no_google_credentials(monkeypatch, tmp_path)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    account = {
        "type": "service_account",
        "project_id": "p",
        "private_key_id": "k",
        "private_key": pem.decode(),
        "client_email": "docembed@p.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    (tmp_path / "key.json").write_text(json.dumps(account))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    fs, path = filesystems.filesystem_for("gs://in1/docs/a.txt")
    assert fs.type_name == "gcs" and path == "in1/docs/a.txt"
