"""Hostile names and known fake credentials: nothing is written outside `--output`, and nothing leaks.

Document ids from shard rows and names of files on disk are data: they reach
doc_ids verbatim (a file's name with "%" and "#" percent-encoded, so that its
doc_id is no row's) and never a path (parts are named by group hashes). Known fake
credentials sit in the environment of the driver and of every Ray worker, and
in signed-URL query strings of refused inputs; none may appear in any output
file, error row, `_SUCCESS`, the job's stdout/stderr, Ray's session logs, or the
output of the notebook opened on the result.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs.embed import main
from pipeline import JobConfig, run_job
from pipeline.io.uris import doc_id_of

import scenarios
from support import REPO, assert_no_secrets, execute_notebook, notebook_outputs_text, ray_log_files

HOSTILE_IDS = ["../../escape", "/abs/path", "..%2F..%2Fx", "%2e%2e/", "..\\..\\win", "./../dot", "a/../../b"]
HOSTILE_NAMES = ["..%2F..%2Fescape.txt", "%2e%2e%2f%2e%2e%2fx.md", "..\\..\\win.txt", "...txt", "#frag?q=1.txt"]

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKEFAULTSUITE01",
    "AWS_SECRET_ACCESS_KEY": "fake-secret-kP3vXq9Lw2Zr8TnY5Hb0",
    "AWS_SESSION_TOKEN": "fake-session-token-Jm4Wc7Rd1Qs6Vx2E",
}
SIGNED_QUERY = (
    "X-Amz-Credential=AKIAFAKEQUERYCRED01%2F20261130&X-Amz-Security-Token=fake-query-token-u8Hn"
    "&X-Amz-Signature=5eedfacec0ffee0ddba11"
)
SECRETS = [*FAKE_ENV.values(), "AKIAFAKEQUERYCRED01", "fake-query-token-u8Hn", "5eedfacec0ffee0ddba11"]


@pytest.fixture(scope="module")
def ray_with_fake_credentials():
    """A local Ray whose driver and workers all hold the fake credentials in their environment."""
    saved = dict(os.environ)
    os.environ.update(FAKE_ENV)
    try:
        with scenarios.local_ray():
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def snapshot(root: Path, skip: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in root.rglob("*") if skip not in p.parents and p != skip}


def test_hostile_ids_and_names_stay_data_and_write_nothing_outside_the_output(ray_with_fake_credentials, tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "names").mkdir(parents=True)
    for name in HOSTILE_NAMES:
        (corpus / "names" / name).write_text(f"A document stored under the file name {name!r}.")
    planted = tmp_path / "planted"  # an absolute id pointing next to the output
    rows = [{"id": i, "text": f"A row whose id is {i!r}."} for i in [*HOSTILE_IDS, str(planted)]]
    (corpus / "ids.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out"
    before = snapshot(tmp_path, out)

    report = run_job(JobConfig(inputs=(str(corpus),), output=str(out), compile_cache=str(tmp_path / "cache")))

    after = snapshot(tmp_path, out)
    written = {p: s for p, s in after.items() if p not in before and not p.startswith(str(tmp_path / "cache"))}
    assert written == {} and not Path("/abs/path").exists()
    assert {p.name for p in out.iterdir()} <= {
        "embeddings",
        "errors",
        "_groups",
        "_inputs",
        "_staging",
        "_docembed.json",
        "_SUCCESS",
    }
    names = {doc_id_of(str(corpus / "names" / n)) for n in HOSTILE_NAMES}
    expected = names | {f"{corpus / 'ids.jsonl'}#{r['id']}" for r in rows}
    assert scenarios.expected_inputs(corpus) == expected
    scenarios.check_exactly_once(str(out), expected, report)  # every doc_id back verbatim, nothing foreign


def test_fake_credentials_appear_in_no_output_log_or_notebook(
    ray_with_fake_credentials, tmp_path, capfd, kernel_env, monkeypatch
):
    corpus = scenarios.write_corpus(tmp_path / "corpus", 20)
    out = tmp_path / "out"
    # Signed URLs as inputs are refused in one line that does not repeat their query.
    for signed in (f"s3://bucket/corpus?{SIGNED_QUERY}", f"file://{corpus}?{SIGNED_QUERY}"):
        assert main(["--input", signed, "--output", str(out)]) == 2
    refused = capfd.readouterr()
    assert refused.err.count("docembed: error:") == 2 and "options in URIs are not accepted" in refused.err

    assert main(["--input", str(corpus), "--output", str(out), "--compile-cache", str(tmp_path / "cache")]) == 0
    job = capfd.readouterr()
    assert "embedded" in job.out

    monkeypatch.setenv("DOCEMBED_OUTPUT", str(out))
    notebook = execute_notebook(REPO / "notebooks" / "explore_embeddings.ipynb")
    blobs = [
        ("refused runs' stdout/stderr", (refused.out + refused.err).encode()),
        ("the job's stdout/stderr", (job.out + job.err).encode()),
        ("the notebook's output", notebook_outputs_text(notebook).encode()),
        *((str(p), p.read_bytes()) for p in out.rglob("*") if p.is_file()),
        *((str(p), p.read_bytes()) for p in ray_log_files()),
    ]
    assert any(name.endswith("_SUCCESS") for name, _ in blobs) and any("/errors/" in name for name, _ in blobs)
    assert assert_no_secrets(SECRETS, blobs) > 20
