"""Hub ids as models, against a local server that answers as the Hugging Face Hub does.

huggingface_hub (the installed version) resolves `snapshot_download` with:
  GET  /api/models/{repo}/revision/{revision}    -> {"sha": commit, ...}      (skipped for a commit)
  GET  /api/models/{repo}/tree/{commit}?recursive -> [{"type": "file", "path", "size", "oid"}, ...]
  HEAD /{repo}/resolve/{commit}/{file}            -> X-Repo-Commit, ETag, Content-Length
  GET  /{repo}/resolve/{commit}/{file}            -> the bytes
and reads errors from the status and the X-Error-Code header (RepoNotFound, RevisionNotFound).
The server serves fixture model directories from tests/fixtures/families. The hub
library reads HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE and HF_TOKEN when it is imported,
so every resolution runs in a fresh process with its own environment.
"""

import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pytest

from pipeline.encode import hub, model_dir, model_location
from pipeline.results import embedding_matrix, read_table

from support import FAMILY_FIXTURES, REPO

TOKEN = "hf_" + "s3cr3tTokenThatMustNeverBeLogged"
MAIN, V1, PRIVATE, TORCH, BOTH = "a" * 40, "b" * 40, "c" * 40, "d" * 40, "e" * 40
TORCH_PICKLES = REPO / "tests" / "fixtures" / "torch_pickle"
# repo -> {revision or commit: (commit, directory in FAMILY_FIXTURES, or a path)}, and which repos need the token.
REPOS = {
    "acme/tiny": {"main": (MAIN, "nomic-contrastors"), "v1": (V1, "bert-pooler")},
    "acme/private": {"main": (PRIVATE, "gte-new-ntk")},
    "acme/torch": {"main": (TORCH, TORCH_PICKLES / "distilbert-dense")},  # pytorch_model.bin only
}
PRIVATE_REPOS = {"acme/private"}


class HubHandler(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, str, str | None]] = []

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool):
        path = unquote(urlparse(self.path).path)
        HubHandler.requests.append((self.command, path, self.headers.get("Authorization")))
        api = path.startswith("/api/models/")
        parts = path.removeprefix("/api/models/").strip("/").split("/")
        repo, rest = "/".join(parts[:2]), parts[2:]
        if repo not in REPOS:
            return self._error(404 if not api else 401, "RepoNotFound")
        if repo in PRIVATE_REPOS and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._error(401, "RepoNotFound")
        commits = {commit: d for commit, d in REPOS[repo].values()}
        revisions = {rev: commit for rev, (commit, _) in REPOS[repo].items()} | {c: c for c in commits}
        if api and (not rest or rest[0] == "revision"):  # model info: /api/models/{repo}[/revision/{revision}]
            revision = rest[1] if rest else "main"
            if revision not in revisions:
                return self._error(404, "RevisionNotFound")
            files = sorted(
                p.relative_to(FAMILY_FIXTURES / commits[revisions[revision]]).as_posix()
                for p in (FAMILY_FIXTURES / commits[revisions[revision]]).rglob("*")
                if p.is_file()
            )
            return self._json(
                {
                    "id": repo,
                    "sha": revisions[revision],
                    "private": repo in PRIVATE_REPOS,
                    "siblings": [{"rfilename": f} for f in files],
                }
            )
        kind, revision, file = rest[0], rest[1], "/".join(rest[2:])  # tree/{commit} or resolve/{revision}/{file}
        if revision not in revisions:
            return self._error(404, "RevisionNotFound")
        commit = revisions[revision]
        root = FAMILY_FIXTURES / commits[commit]
        if api and kind == "tree":
            files = [p for p in sorted(root.rglob("*")) if p.is_file()]
            entries = [
                {
                    "type": "file",
                    "path": p.relative_to(root).as_posix(),
                    "size": p.stat().st_size,
                    "oid": hashlib.sha1(p.read_bytes()).hexdigest(),
                }
                for p in files
            ]
            return self._json(entries)
        target = root / file
        if kind != "resolve" or not target.is_file():
            return self._error(404, "EntryNotFound")
        data = target.read_bytes()
        self.send_response(200)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _json(self, value):
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str):
        data = json.dumps({"error": code}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def hub_env(server, tmp_path):
    HubHandler.requests.clear()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return env | {"HF_ENDPOINT": server, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}


RESOLVE = """
import json, sys
from pipeline.encode import model_dir
from pipeline.errors import UserError
try:
    spec = model_dir.resolve(sys.argv[1])
except UserError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({"source": spec.source, "model_id": spec.model_id, "path": str(spec.path),
                      "weights_sha256": spec.weights_sha256, "tokenizer_sha256": spec.tokenizer_sha256}))
"""


def resolve(model: str, env: dict) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", RESOLVE, model], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert TOKEN not in result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def local(name: str) -> model_dir.ModelSpec:
    return model_dir.resolve(str(FAMILY_FIXTURES / name))


def test_hub_ids_are_told_apart_from_paths_and_uris(tmp_path, monkeypatch):
    assert hub.is_hub_id("BAAI/bge-m3") and hub.is_hub_id("org/name@v1.0") and hub.is_hub_id("o/n@" + MAIN)
    for other in ("s3://bucket/model", "gs://b/m", "/abs/dir", "./rel/dir", "dir", "a/b/c", "org/name@"):
        assert not hub.is_hub_id(other), other
    # A local directory that exists wins over the hub id of the same spelling.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "tiny").symlink_to(FAMILY_FIXTURES / "bert-pooler")
    assert model_location.locate("acme/tiny") == (Path("acme/tiny"), "acme/tiny")


def test_a_hub_id_downloads_into_hf_home_pinned_to_its_commit(hub_env):
    got = resolve("acme/tiny", hub_env)
    want = local("nomic-contrastors")
    assert got["source"] == f"acme/tiny@{MAIN}" and got["model_id"] == f"acme/tiny@{MAIN}"
    assert got["path"].startswith(hub_env["HF_HOME"]) and got["path"].endswith(f"/snapshots/{MAIN}")
    assert (got["weights_sha256"], got["tokenizer_sha256"]) == (want.weights_sha256, want.tokenizer_sha256)
    assert ("GET", "/api/models/acme/tiny/revision/main", None) in HubHandler.requests

    # Pinned to the commit (what the stages on each node receive): the cache answers, no request at all.
    HubHandler.requests.clear()
    assert resolve(f"acme/tiny@{MAIN}", hub_env)["path"] == got["path"]
    assert HubHandler.requests == []


def test_a_revision_selects_its_commit(hub_env):
    got = resolve("acme/tiny@v1", hub_env)
    assert got["source"] == f"acme/tiny@{V1}"
    assert got["weights_sha256"] == local("bert-pooler").weights_sha256


def test_a_private_repo_needs_the_token_which_is_sent_and_never_shown(hub_env):
    refused = resolve("acme/private", hub_env)
    assert refused == {
        "error": "Hugging Face Hub model acme/private: no such repo, or it is private or gated and "
        "HF_TOKEN does not grant access (a local directory of that name does not exist either)"
    }
    got = resolve("acme/private", hub_env | {"HF_TOKEN": TOKEN})
    assert got["weights_sha256"] == local("gte-new-ntk").weights_sha256
    assert {auth for _, path, auth in HubHandler.requests if "private" in path} >= {None, f"Bearer {TOKEN}"}


def fetched(repo: str) -> set[str]:
    """The files of `repo` the hub library downloaded."""
    return {path.split("/", 5)[-1] for method, path, _ in HubHandler.requests if path.startswith(f"/{repo}/resolve/")}


def test_torch_weights_are_fetched_only_where_a_folder_has_no_safetensors(hub_env, tmp_path, monkeypatch):
    """As transformers and sentence-transformers fall back to pytorch_model.bin; never both copies."""
    got = resolve("acme/torch", hub_env)
    assert got["weights_sha256"] == model_dir.resolve(TORCH_PICKLES / "distilbert-dense").weights_sha256
    assert {"pytorch_model.bin", "2_Dense/pytorch_model.bin", "3_Dense/pytorch_model.bin"} <= fetched("acme/torch")

    both = tmp_path / "both"  # the hub's conversion bot's layout: the model's weights in both, a Dense's in one
    shutil.copytree(FAMILY_FIXTURES / "distilbert-dense", both)
    shutil.copy(TORCH_PICKLES / "distilbert-dense" / "pytorch_model.bin", both)
    (both / "2_Dense" / "model.safetensors").unlink()
    shutil.copy(TORCH_PICKLES / "distilbert-dense" / "2_Dense" / "pytorch_model.bin", both / "2_Dense")
    monkeypatch.setitem(REPOS, "acme/both", {"main": (BOTH, both)})
    resolve("acme/both", hub_env)
    assert "2_Dense/pytorch_model.bin" in fetched("acme/both")
    assert "pytorch_model.bin" not in fetched("acme/both") and "model.safetensors" in fetched("acme/both")


def test_missing_repos_and_revisions_are_one_line(hub_env):
    assert resolve("acme/nothing", hub_env)["error"].startswith("Hugging Face Hub model acme/nothing: no such repo")
    assert resolve("acme/tiny@v9", hub_env) == {
        "error": "Hugging Face Hub model acme/tiny@v9: the repo has no revision 'v9'"
    }


def test_offline_mode_uses_the_cache_and_says_when_it_lacks_the_model(hub_env):
    offline = hub_env | {"HF_HUB_OFFLINE": "1"}
    assert resolve("acme/tiny", offline) == {
        "error": "Hugging Face Hub model acme/tiny is not in the hub cache (HF_HOME) and HF_HUB_OFFLINE is set"
    }
    online = resolve("acme/tiny", hub_env)
    HubHandler.requests.clear()
    assert resolve("acme/tiny", offline) == online
    assert HubHandler.requests == []


@pytest.mark.integration
def test_the_job_on_a_private_hub_model_never_shows_the_token(hub_env, tmp_path):
    """jobs/embed.py end to end (a local Ray of its own, its logs kept apart), then a missing repo's exit 2."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("The river carries light over the stones, and the stones keep the river's shape.")
    out = tmp_path / "out"
    ray_tmp = tempfile.mkdtemp(prefix="r", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = hub_env | {"HF_TOKEN": TOKEN, "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)
    embed = [sys.executable, str(REPO / "jobs" / "embed.py"), "--input", str(docs), "--output", str(out)]
    result = subprocess.run(
        [*embed, "--model", "acme/private"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    vectors = embedding_matrix(read_table(str(out)))
    from pipeline import Embedder

    want = Embedder.load(str(FAMILY_FIXTURES / "gte-new-ntk")).embed([(docs / "a.txt").read_text()])
    np.testing.assert_allclose(vectors, want, atol=1e-5)
    seen = {"stdout": result.stdout, "stderr": result.stderr}
    for root in (out, Path(ray_tmp)):
        seen |= {str(p): p.read_bytes().decode(errors="replace") for p in root.rglob("*") if p.is_file()}
    assert any(name.endswith(".log") and "worker" in name for name in seen), "the Ray logs were not found"
    assert f"acme/private@{PRIVATE}" in (out / "_SUCCESS").read_text()
    assert [name for name, text in seen.items() if TOKEN in text] == []
    shutil.rmtree(ray_tmp, ignore_errors=True)

    missing = subprocess.run(
        [*embed, "--model", "acme/nothing", "--overwrite"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "docembed: error: Hugging Face Hub model acme/nothing: no such repo, or it is private or gated and HF_TOKEN "
        "does not grant access (a local directory of that name does not exist either)"
    ]
