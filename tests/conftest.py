"""Shared fixtures: the real corpus, real PDFs made broken on purpose, a local Ray the job modules share."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# One persistent JAX compilation cache for the whole run, set before JAX starts here: both xdist workers
# (which inherit this process's environment), their child processes and the jobs' encoder actors (whose
# default cache is JAX's setting) share it. The tests compile the same programs many times over (a family's
# forward pass in several tests, the 8-device children's meshes, a job's encoder and the Embedder it is
# checked against), and a program is then compiled once and loaded after: tests/kernels took 215 s instead
# of 240 s on 2 workers (AMD EPYC Zen 4). A cache hands back the executable XLA built, so every check
# stands; the tests of the product's own cache give it directories of their own. A cache the user set is
# used as it is.
OWN_JAX_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if OWN_JAX_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="docembed-tests-jax-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # most test programs compile in under 1 s

from pipeline.encode.cpu_devices import use_cpu_devices  # noqa: E402

from support import CORPUS, REPO, SAMPLES, encrypt, start_local_ray, text_pdf  # noqa: E402

# The test process has the CPU devices any encoder process here has (one per core, see
# pipeline.encode.cpu_devices), whichever test starts JAX first.
use_cpu_devices()

# Tests that run real Ray jobs, clusters, storage servers or notebooks: `make test` runs them,
# `make test-fast` leaves them out. Whole folders and files, and single tests that start a job.
INTEGRATION = (
    "tests/faults/",
    "tests/jobs/",
    "tests/notebooks/",
    "tests/storage/",
    "tests/pipeline/run/test_job.py",
    "tests/pipeline/run/test_job_long_windows.py",
    "tests/pipeline/test_output_consumers.py",
    # Each command as a user runs it: an embed job, the encoder measured, a search.
    "tests/pipeline/cli/test_command_lines.py",
    "tests/test_bench_accel.py",
    # A hub-like HTTP server on 127.0.0.1 and real downloads through huggingface_hub.
    "tests/pipeline/encode/test_hub.py",
    # Child processes on 8 simulated devices, one per model and mesh.
    "tests/kernels/test_bert_sharding.py",
    "tests/kernels/encoders/test_sharding.py",
)
# Minutes each on 2 cores (crash and resume on three stores, fault injection, jobs on object stores).
LONGEST = ("tests/storage/", "tests/faults/")
INTEGRATION_TESTS = (
    "test_pdfium_agrees_with_pypdf_on_every_real_pdf",
    "test_job_schedules_encoders_on_the_tpu_resource",
    "test_job_asking_for_a_gpu_here_fails_before_starting",
)


def pytest_collection_modifyitems(items):
    rank = {}  # per file: 0 the longest, 1 others with integration tests, 2 the rest
    for item in items:
        path = Path(item.fspath).relative_to(REPO).as_posix()
        rank.setdefault(path, 2)
        if path.startswith(INTEGRATION) or item.originalname in INTEGRATION_TESTS:
            item.add_marker(pytest.mark.integration)
            rank[path] = 0 if path.startswith(LONGEST) else 1
    on_ray_local = {Path(item.fspath) for item in items if "ray_local" in item.fixturenames}
    # `make test`'s two workers take whole files in this order (a stable sort keeps each file's own), so the
    # long ones start early and the short ones fill the end; within a rank the files on `ray_local` come in a
    # row, so that a worker that takes two of them in turn starts one Ray for both.
    items.sort(
        key=lambda item: (rank[Path(item.fspath).relative_to(REPO).as_posix()], Path(item.fspath) not in on_ray_local)
    )


_next_item: list[pytest.Item | None] = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    _next_item[0] = nextitem  # for ray_local's teardown, which runs within this hook


@pytest.fixture(scope="module")
def ray_local() -> str:
    """A local Ray (2 CPUs, no dashboard) for the module's jobs; yields its GCS address, for drivers of their own.

    Kept for the next module where its first test asks for it too, shut down otherwise: a Ray costs about 10
    CPU-s to start (its head's processes, and Ray Data's actors at its first job: BENCHMARKS.md, "Where the
    suite's CPU goes"), and an idle one 7% of a core ("... the suite on three workers"). So a module that starts
    a Ray of other settings finds none."""
    import ray

    yield ray.get_runtime_context().gcs_address if ray.is_initialized() else start_local_ray()
    nextitem = _next_item[0]
    if nextitem is None or "ray_local" not in nextitem.fixturenames:
        ray.shutdown()


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The real PDFs of ../shared/corpus, beside this clone: missing fails in CI, and skips with the reason here."""
    if not CORPUS.is_dir():
        why = (
            f"needs the shared corpus of real PDFs at {CORPUS} (../shared beside this clone, or DOCEMBED_SHARED); "
            "clone the repository next to its shared/ folder"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return CORPUS


@pytest.fixture(scope="session")
def real_pdf() -> bytes:
    """A real four-page pdfTeX document, bundled with the samples."""
    return (SAMPLES / "pdf" / "pdflatex-4-pages.pdf").read_bytes()


@pytest.fixture(scope="session")
def bad_documents(real_pdf: bytes) -> dict[str, tuple[bytes, str, str]]:
    """File name -> (bytes, the stage and error_type the pipeline must report for it)."""
    return {
        "truncated.pdf": (real_pdf[: len(real_pdf) // 3], "extract", "CorruptPDF"),
        "random.pdf": (b"%PDF-1.7\n" + bytes(range(256)) * 40, "extract", "CorruptPDF"),
        # A valid PDF without pages has no text. pypdfium2 took it for a failed load, with PDFium's last error for
        # a reason: "Success", or the document before's, as random.pdf's here where one process reads them in turn.
        "no-pages.pdf": (text_pdf([]), "extract", "NoText"),
        "zero.pdf": (b"", "extract", "EmptyFile"),
        "zero.txt": (b"", "extract", "EmptyFile"),
        "locked.pdf": (encrypt(real_pdf, user_password="secret", owner_password="owner"), "extract", "EncryptedPDF"),
        "latin1.txt": ("café crème brûlée".encode("latin-1"), "extract", "UndecodableText"),
        "blank.md": (b"   \n\n\t  \n", "extract", "NoText"),
        # Control characters are text, but the tokenizer's normaliser drops them all.
        "controls.txt": (b"\x01\x02\x03\x7f", "tokenize", "NoTokens"),
    }


@pytest.fixture
def cpu_flags(monkeypatch):
    """Pretends this CPU's feature flags, so that the dtype chosen does not depend on the machine the tests
    run on: `cpu_flags("avx512_bf16", ...)`. What then runs is real: where this CPU can run the oneDNN kernel
    (built, AVX-512), the bfloat16 projections run on it; elsewhere on XLA's dots (kernels.dense)."""
    import kernels.compute_dtype as dtype_dispatch
    from pipeline.encode import encoder_config

    monkeypatch.setattr(encoder_config, "_warned", set())
    return lambda *flags: monkeypatch.setattr(dtype_dispatch, "cpu_flags", lambda: frozenset(flags))


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A `python3` kernel that is this venv's Python, and Jupyter's and IPython's files kept in tmp_path."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "docembed venv",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))  # searched before system kernels
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")


def pytest_sessionfinish(session):
    if OWN_JAX_CACHE:  # the process that made the run's cache: xdist's controller, or a run without workers
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
