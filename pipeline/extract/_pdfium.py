"""The fast PDF extractor: PDFium, Chrome's PDF engine, through pypdfium2's ctypes bindings."""

from __future__ import annotations

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from pipeline.extract._errors import encrypted


def pdf_pages(data: bytes) -> list[str]:
    """PDF bytes -> text per page. Malformed input raises PdfiumError.

    PDFium ends lines with CRLF; they become LF so both extractors give the same
    character offsets for the same text.
    """
    try:
        # No password: PDFium tries the empty user password, as pypdf's decrypt("") does.
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        if e.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise encrypted() from None
        raise
    try:
        pages = []
        for page in pdf:
            text = page.get_textpage().get_text_bounded()
            pages.append(text.replace("\r\n", "\n"))
        return pages
    finally:
        pdf.close()  # closes its pages and text pages too: PDFium's memory goes now, not at the next GC
