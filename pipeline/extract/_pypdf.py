"""The reference PDF extractor: pypdf, pure Python and slow, the oracle the others are tested against."""

from __future__ import annotations

import io
import logging

from pypdf import PdfReader
from pypdf.errors import FileNotDecryptedError

from pipeline.extract._errors import encrypted

# pypdf logs a warning for every recoverable oddity of a PDF; a corpus of
# real-world PDFs would drown the job log in them.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def pdf_pages(data: bytes) -> list[str]:
    """PDF bytes -> text per page. Malformed input raises whatever pypdf raises."""
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise encrypted()
    try:
        return [page.extract_text() or "" for page in reader.pages]
    except FileNotDecryptedError:
        raise encrypted() from None
