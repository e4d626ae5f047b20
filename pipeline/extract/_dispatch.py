"""The one place a PDF extractor is chosen.

An explicitly named extractor runs or raises ConfigError naming the ones that
can. `auto` takes the fastest one installed, and says so in the log when that is
not the first choice.
"""

from __future__ import annotations

import functools
import importlib
import logging

from pipeline.errors import ConfigError, DocumentError

log = logging.getLogger("docembed")

# name -> module with `pdf_pages(data) -> list[str]`, imported on first use so a
# missing engine fails only when it is chosen.
_MODULES = {"pypdf": "pipeline.extract._pypdf", "pdfium": "pipeline.extract._pdfium"}
PDF_EXTRACTORS = tuple(_MODULES)  # the reference first
# pdfium extracts 19x the pages per second of pypdf on the shared corpus (BENCHMARKS.md).
_FASTEST_FIRST = ("pdfium", "pypdf")


@functools.cache
def _load(name: str):
    """The extractor's `pdf_pages`, or the ImportError that keeps it from running here."""
    try:
        return importlib.import_module(_MODULES[name]).pdf_pages
    except ImportError as e:
        return e


def available_extractors() -> list[str]:
    return [name for name in PDF_EXTRACTORS if not isinstance(_load(name), ImportError)]


def resolve_extractor(name: str) -> str:
    """'auto' or an extractor's name -> the name of the extractor that will run."""
    if name == "auto":
        # Loads only up to the first that runs: the driver resolves 'auto' on every job's start, and pypdf's
        # import costs it a few tenths of a second for nothing where pdfium runs.
        pick = next(n for n in _FASTEST_FIRST if not isinstance(_load(n), ImportError))
        if pick != _FASTEST_FIRST[0]:
            log.warning("docembed: --pdf-extractor auto: %s cannot run here, using %s", _FASTEST_FIRST[0], pick)
        return pick
    if name not in _MODULES:
        raise ConfigError(f"unknown --pdf-extractor {name!r}; known: auto, {', '.join(PDF_EXTRACTORS)}")
    loaded = _load(name)
    if isinstance(loaded, ImportError):
        raise ConfigError(
            f"--pdf-extractor {name} cannot run here ({loaded}); available: {', '.join(available_extractors())}"
        )
    return name


def pdf_pages(data: bytes, extractor: str) -> list[str]:
    """PDF bytes -> text per page with the named extractor; any parser failure is a CorruptPDF DocumentError."""
    pages_of = _load(resolve_extractor(extractor))
    try:
        return pages_of(data)
    except (DocumentError, MemoryError):  # MemoryError: the sandbox's memory bound, not the document's syntax
        raise
    except Exception as e:  # parsers raise many kinds on malformed input; each costs one document only
        raise DocumentError("CorruptPDF", f"unreadable PDF ({type(e).__name__}): {e}") from None
