"""Paths and helpers the tests share (imported by name; conftest.py only holds fixtures)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterable

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
CORPUS = REPO.parent / "shared" / "corpus" / "py-pdf-sample-files"


def encrypt(pdf: bytes, *, user_password: str, owner_password: str) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def ray_log_files() -> list[Path]:
    """Every file under the connected Ray session's `logs/` (all its nodes', on one machine)."""
    import ray

    session = ray._private.worker._global_node.get_session_dir_path()
    return [p for p in Path(session, "logs").rglob("*") if p.is_file()]


def assert_no_secrets(secrets: list[str], blobs: Iterable[tuple[str, bytes]]) -> int:
    """Fails naming the first blob (name, bytes) that holds any of `secrets`; returns how many were searched."""
    searched = 0
    for name, data in blobs:
        leaked = [s for s in secrets if s.encode() in data]
        assert not leaked, f"{name} holds {leaked}"
        searched += 1
    return searched


def execute_notebook(path: Path):
    """Runs a notebook top to bottom where Jupyter would (in its folder); returns it with its outputs.

    Needs the `kernel_env` fixture; any cell that raises fails the caller with its traceback.
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def notebook_outputs_text(nb) -> str:
    """Everything an executed notebook's cells printed or displayed as text."""
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.extend(str(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(parts)
