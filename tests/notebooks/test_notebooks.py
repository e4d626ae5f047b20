"""Every notebook in notebooks/ runs, top to bottom, against a fresh output, so none can rot.

The output is made here by the job itself (a local Ray, a few sample documents,
one of them a locked PDF so that the error table has a row). Each notebook runs
in a kernel of this venv's Python, with `DOCEMBED_OUTPUT` pointing at that
output. Notebooks are committed without outputs, which is checked too.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import nbformat
import pytest

from pipeline import JobConfig, run_job
from pipeline.encode.encoder_config import EncoderConfig

from support import REPO, SAMPLES, execute_notebook, notebook_outputs_text

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# What notebooks may import from the project: its public API.
PUBLIC_MODULES = {"pipeline", "pipeline.results"}


@pytest.fixture(scope="module")
def outputs(ray_local, tmp_path_factory) -> dict[str, Path]:
    """Two outputs. "fresh": a few samples, one of them a locked PDF. "one chunk": one text at --dim 64, whose name
    holds "$...$" (matplotlib's math mode, were it drawn unescaped); a map needs two chunks."""
    corpus = tmp_path_factory.mktemp("corpus")
    shutil.copytree(SAMPLES / "text", corpus / "text")
    for pdf in ("pdflatex-4-pages.pdf", "libreoffice-writer-password.pdf"):
        shutil.copy(SAMPLES / "pdf" / pdf, corpus / pdf)
    single = tmp_path_factory.mktemp("single")
    (single / "budget $^$ draft.txt").write_text("Plants turn sunlight into sugar by photosynthesis.")
    out = tmp_path_factory.mktemp("out")
    report = run_job(JobConfig(inputs=(str(corpus),), output=str(out / "fresh")))
    one = run_job(JobConfig(inputs=(str(single),), output=str(out / "one"), encoder=EncoderConfig(dim=64)))
    assert (report.docs_ok, report.docs_failed) == (6, 1) and one.chunks == 1
    return {"fresh": out / "fresh", "one chunk": out / "one"}


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


def run_notebook(path: Path, output: Path, monkeypatch) -> nbformat.NotebookNode:
    monkeypatch.setenv("DOCEMBED_OUTPUT", str(output))
    nb = execute_notebook(path)
    errors = [o for cell in nb.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_against_a_fresh_output(path, outputs, kernel_env, monkeypatch):
    fresh_output = outputs["fresh"]
    nb = run_notebook(path, fresh_output, monkeypatch)
    if path.name == "explore_embeddings.ipynb":
        text = notebook_outputs_text(nb)
        assert str(fresh_output) in text, "the notebook opened another output than DOCEMBED_OUTPUT"
        assert "EncryptedPDF" in text and "libreoffice-writer-password.pdf" in text, "the error table is missing"
        assert "pdflatex-4-pages.pdf" in text
        # The default query is about photosynthesis, and so is one sample: it must come first.
        hits = text[text.index("top 5 chunks for") :]
        names = [p.name for p in (SAMPLES / "text").iterdir()] + ["pdflatex-4-pages.pdf"]
        assert min((hits.find(n), n) for n in names if n in hits)[1] == "photosynthesis.md", hits[:2000]
        images = [o for cell in nb.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        assert len(images) == 1, "the 2-D projection plot was not drawn"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_against_one_chunk_at_a_smaller_dim(path, outputs, kernel_env, monkeypatch):
    run_notebook(path, outputs["one chunk"], monkeypatch)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"cell {cell.id} was saved with its outputs"
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_uses_only_the_public_api(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            modules = []
            if isinstance(node, ast.ImportFrom):
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            for module in modules:
                if module.split(".")[0] in ("pipeline", "kernels"):
                    assert module in PUBLIC_MODULES, f"cell {cell.id} imports {module}, not the public API"
