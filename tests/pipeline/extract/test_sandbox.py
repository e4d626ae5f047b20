import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import closing

import psutil
import pytest

from pipeline.errors import ConfigError, SandboxError
from pipeline.extract import PDF_EXTRACTORS, DocumentError, extract_pages
from pipeline.extract.sandbox import ExtractConfig, Sandbox

from support import REPO, decompression_bomb_pdf, form_fanout_pdf

extractors = pytest.mark.parametrize("extractor", PDF_EXTRACTORS)


# 2,000 pages that each draw a line of text 10,000 times through nested forms:
# minutes of either extractor's time, in 3 kB.
SLOW_PDF = form_fanout_pdf(100, pages=2000)


def _outcome(sandbox: Sandbox, data: bytes) -> str:
    try:
        sandbox.extract_pages(data, "pdf")
        return "text"
    except DocumentError as e:
        return e.error_type


@extractors
def test_gives_what_extract_pages_gives(real_pdf, bad_documents, extractor):
    with closing(Sandbox(ExtractConfig(extractor))) as sandbox:
        assert sandbox.extract_pages(real_pdf, "pdf") == extract_pages(real_pdf, "pdf", extractor)
        for name, (data, _stage, error_type) in bad_documents.items():
            if name.endswith(".pdf"):
                assert _outcome(sandbox, data) == error_type, name


@extractors
def test_a_document_past_the_time_bound_costs_only_itself(real_pdf, extractor):
    with closing(Sandbox(ExtractConfig(extractor, timeout_s=1))) as sandbox:
        sandbox.extract_pages(real_pdf, "pdf")
        first_child = sandbox.pid
        started = time.monotonic()
        assert _outcome(sandbox, SLOW_PDF) == "ExtractTimeout"
        assert time.monotonic() - started < 3
        assert not psutil.pid_exists(first_child)
        assert len(sandbox.extract_pages(real_pdf, "pdf")) == 4  # a fresh child


# (a 1 GiB FlateDecode stream, a form drawn a million times) -> outcome under a
# 256 MiB bound. pypdf caps what it inflates (no text from the bomb's page) and
# how often it expands a form (some of its text); PDFium inflates and expands
# until its allocator fails under the bound and aborts.
MEMORY_BOMBS = {"pypdf": ("NoText", "text"), "pdfium": ("ExtractorCrashed", "ExtractorCrashed")}


@extractors
def test_memory_bombs_hit_the_memory_bound_not_the_machine(real_pdf, extractor):
    with closing(Sandbox(ExtractConfig(extractor, timeout_s=30, memory_mib=256))) as sandbox:
        started = time.monotonic()
        assert (_outcome(sandbox, decompression_bomb_pdf()), _outcome(sandbox, form_fanout_pdf(1000))) == MEMORY_BOMBS[
            extractor
        ]
        assert time.monotonic() - started < 30
        assert len(sandbox.extract_pages(real_pdf, "pdf")) == 4


def test_python_memory_error_becomes_its_own_error_type(real_pdf):
    with closing(Sandbox(ExtractConfig("pypdf", memory_mib=64))) as sandbox:
        # 64 MiB of address space cannot even receive a 100 MB document.
        assert _outcome(sandbox, b"%PDF-1.7\n" + bytes(100 << 20)) == "ExtractMemoryLimit"
        assert len(sandbox.extract_pages(real_pdf, "pdf")) == 4


def test_a_crashed_extractor_costs_one_document(real_pdf):
    with closing(Sandbox(ExtractConfig("pypdf", timeout_s=60))) as sandbox:
        sandbox.extract_pages(real_pdf, "pdf")
        threading.Timer(0.5, os.kill, (sandbox.pid, signal.SIGSEGV)).start()
        with pytest.raises(DocumentError, match="SIGSEGV") as caught:
            sandbox.extract_pages(SLOW_PDF, "pdf")
        assert caught.value.error_type == "ExtractorCrashed"
        assert len(sandbox.extract_pages(real_pdf, "pdf")) == 4


def test_the_child_does_not_outlive_a_killed_parent(tmp_path):
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import os, signal\n"
                "from pipeline.extract.sandbox import ExtractConfig, Sandbox\n"
                "s = Sandbox(ExtractConfig('pypdf'))\n"
                "s.extract_pages(open('samples/pdf/pdflatex-4-pages.pdf', 'rb').read(), 'pdf')\n"
                "print(s.pid, flush=True)\n"
                "os.kill(os.getpid(), signal.SIGKILL)\n"
            ),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(parent.stdout.readline())
    parent.wait()
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the sandbox child outlived its parent"
        time.sleep(0.1)


def test_bounds_are_checked():
    with pytest.raises(ConfigError, match="--pdf-extractor"):
        ExtractConfig("mupdf")
    with pytest.raises(ConfigError, match="--extract-timeout"):
        ExtractConfig(timeout_s=0)


def test_a_child_that_cannot_run_its_extractor_stops_the_caller(real_pdf):
    sandbox = Sandbox(ExtractConfig("pypdf"))
    sandbox.extractor = "mupdf"  # as if the worker's node lacked the engine the driver resolved
    with pytest.raises(SandboxError, match="unknown --pdf-extractor 'mupdf'"):
        sandbox.extract_pages(real_pdf, "pdf")
    assert sandbox.pid is None
