"""The default compilation cache: JAX's own setting when the user made one, else docembed's under the user's cache."""

from __future__ import annotations

import os
import subprocess
import sys

from support import REPO

PRINT_DEFAULT = "from pipeline.encode.compile_cache import DEFAULT_COMPILE_CACHE; print(DEFAULT_COMPILE_CACHE)"


def default_cache(**env: str) -> str:
    """DEFAULT_COMPILE_CACHE as a fresh process computes it (it is read at import) under `env`."""
    base = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME")}
    result = subprocess.run(
        [sys.executable, "-c", PRINT_DEFAULT], env={**base, **env}, cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_default_is_jaxs_own_cache_when_set(tmp_path):
    assert default_cache(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax")) == str(tmp_path / "jax")


def test_otherwise_docembeds_under_the_users_cache(tmp_path):
    assert default_cache(XDG_CACHE_HOME=str(tmp_path)) == str(tmp_path / "docembed" / "jax")
    assert default_cache(JAX_COMPILATION_CACHE_DIR="", XDG_CACHE_HOME=str(tmp_path)) == str(
        tmp_path / "docembed" / "jax"
    )
