"""Text out of document bytes: pages of a PDF, or the decoded text of a text file.

Every failure a document can cause is raised as `DocumentError` with a short
`error_type`, so the caller turns it into one error row and moves on.
"""

from __future__ import annotations

import io
import logging

from pypdf import PdfReader
from pypdf.errors import FileNotDecryptedError, PdfReadError

# pypdf logs a warning for every recoverable oddity of a PDF; a corpus of
# real-world PDFs would drown the job log in them.
logging.getLogger("pypdf").setLevel(logging.ERROR)

PDF_SUFFIXES = (".pdf",)
TEXT_SUFFIXES = (".txt", ".md")


class DocumentError(Exception):
    """This document cannot yield text; the job records it and carries on."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


def kind_of(path: str) -> str | None:
    """'pdf', 'text', or None for a file the pipeline does not read."""
    lower = path.lower()
    if lower.endswith(PDF_SUFFIXES):
        return "pdf"
    if lower.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def extract_pages(data: bytes, kind: str) -> list[str]:
    """Document bytes -> text per page (one page for text files)."""
    if not data:
        raise DocumentError("EmptyFile", "the file is empty (0 bytes)")
    pages = _pdf_pages(data) if kind == "pdf" else [_decode_text(data)]
    if not any(page.strip() for page in pages):
        raise DocumentError("NoText", f"no extractable text in {len(pages)} page(s)")
    return pages


def _decode_text(data: bytes) -> str:
    try:
        # utf-8-sig drops a byte-order mark, which would otherwise become a token.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DocumentError("UndecodableText", f"not valid UTF-8: {e}") from None


def _pdf_pages(data: bytes) -> list[str]:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError("EncryptedPDF", "encrypted PDF that the empty password does not open")
        return [page.extract_text() or "" for page in reader.pages]
    except DocumentError:
        raise
    except FileNotDecryptedError:
        raise DocumentError("EncryptedPDF", "encrypted PDF that the empty password does not open") from None
    except PdfReadError as e:
        raise DocumentError("CorruptPDF", f"unreadable PDF: {e}") from None
    except Exception as e:  # pypdf raises many kinds on malformed input; each costs one document only
        raise DocumentError("CorruptPDF", f"unreadable PDF ({type(e).__name__}): {e}") from None
