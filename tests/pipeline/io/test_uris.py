"""URIs: credentials refused and redacted; local paths and file:// URIs alike."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.io import uris
from pipeline.io.listing import list_inputs, list_pages


def test_redact_scrubs_userinfo_and_credential_values(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-xyz")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY")
    text = uris.redact(
        "s3://AKIA:pw@bucket/x failed; key AKIAEXAMPLEKEY secret s3cr3t-value-xyz; "
        "https://bucket.s3.amazonaws.com/y?X-Amz-Credential=AKIAQUERY&X-Amz-Signature=f00d failed"
    )
    assert "pw" not in text and "AKIAEXAMPLEKEY" not in text and "s3cr3t-value-xyz" not in text
    assert "AKIAQUERY" not in text and "f00d" not in text
    assert "s3://***@bucket/x" in text and "https://bucket.s3.amazonaws.com/y?*** failed" in text


@pytest.mark.parametrize(
    "location, message",
    [
        ("s3://key:secret@bucket/docs", "credentials in URIs are not accepted"),
        ("s3://key:sec/ret/secret@bucket/docs", "credentials in URIs are not accepted"),
        ("gs://key:secret/x@bucket/docs", "credentials in URIs are not accepted"),
        ("gs://bucket/docs?endpoint_override=x", "options in URIs are not accepted"),
        ("file:///docs?X-Amz-Signature=secret", "options in URIs are not accepted"),
        ("s3:///docs", "no bucket"),
        ("s3://bucket//docs", "empty segment"),
        ("gs://bucket/docs//x.txt", "empty segment"),
        ("s3://bucket/docs/../x.txt", "'.' or '..' segment"),
    ],
)
def test_locations_with_credentials_options_or_unreadable_keys_are_refused(location, message):
    with pytest.raises(ConfigError, match=message) as e:
        uris.check_location(location)
    assert "secret" not in str(e.value)


@pytest.mark.parametrize("glob", ["s3://bucket/docs/?.txt", "gs://bucket/docs/*.pdf?X-Amz-Signature=secret"])
def test_a_glob_carries_no_query_past_the_check(glob):
    """A URI's "?" begins its query (a signed URL's credentials), before it could be a glob's wildcard."""
    with pytest.raises(ConfigError, match="options in URIs are not accepted") as e:
        list_pages([glob])
    assert "secret" not in str(e.value)


def test_a_secret_with_a_slash_is_refused_and_never_shown(tmp_path, capsys):
    """AWS secrets may hold a "/", which ends a URI's netloc: --input, --output and --model refuse it in one line."""
    from pipeline.cli.embed import main

    uri = "s3://AKIAEXAMPLEKEY:wJalrXUtn/FEMIK7MDENG/bPxRfiCYSECRET@in1/w"
    assert uris.redact(f"cannot read {uri}: denied") == "cannot read s3://***@in1/w: denied"
    assert uris.redact("s3://b/k:x@y.txt https://host:80/a") == "s3://b/k:x@y.txt https://host:80/a"
    local = str(tmp_path / "x")
    for args in (
        ["--input", uri, "--output", local],
        ["--input", local, "--output", uri],
        ["--input", local, "--output", local, "--model", uri],
    ):
        assert main(args) == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and "credentials in URIs are not accepted" in err, err
        assert "s3://***@in1/w" in err and "AKIAEXAMPLEKEY" not in out + err and "FEMIK7" not in out + err


def test_a_typed_uri_with_an_empty_segment_is_one_config_error_wherever_it_is_read(tmp_path):
    from pipeline.io.fetch import fetch_dir

    for read in (lambda: list_pages(["s3://in1//w"]), lambda: fetch_dir("gs://models//minilm", tmp_path)):
        with pytest.raises(ConfigError, match="empty segment"):
            read()
    for fine in ("s3://bucket/docs/", "gs://bucket/w/../x.txt", "file:///data//x", "https://host/a//b"):
        uris.check_location(fine)


def test_gcs_is_spelled_gs_in_every_uri_docembed_makes():
    """So that the output's own files, under an input of the other spelling, are known as its own."""
    from pipeline.output.layout import own_files

    assert uris.scheme_of("GCS://b/w") == uris.scheme_of("gs://b/w") == "gs"
    listed = uris.uri_of("gcs://b/w", "b/w/out/_inputs/part-000000.parquet", "b/w")
    assert listed == "gs://b/w/out/_inputs/part-000000.parquet"
    assert listed.startswith(own_files(uris.uri_of("gs://b/w/out", "b/w/out/", "b/w/out")))


def test_local_and_file_uris_name_the_same_files(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "s.jsonl").write_text("{}")
    (tmp_path / "skip.png").write_bytes(b"x")
    by_path, skipped = list_inputs([str(tmp_path)])
    by_uri, _ = list_inputs([f"file://{tmp_path}"])
    assert by_path == by_uri and skipped == 1
    assert [(f.uri, f.kind) for f in by_path] == [
        (str(tmp_path / "a.txt"), "text"),
        (str(tmp_path / "s.jsonl"), "jsonl"),
    ]
