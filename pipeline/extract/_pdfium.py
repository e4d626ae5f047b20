"""The fast PDF extractor: PDFium, Chrome's PDF engine, through pypdfium2's ctypes bindings."""

from __future__ import annotations

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from pipeline.extract._errors import encrypted


def pdf_pages(data: bytes) -> list[str]:
    """PDF bytes -> text per page. Malformed input raises PdfiumError; a page that will not load is empty.

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
        pages, loaded, unloadable = [], 0, None
        for index in range(len(pdf)):
            try:
                page = pdf[index]
            except pdfium.PdfiumError as e:
                # A page PDFium cannot load (a broken page tree, a damaged page object) costs that page, not the
                # document: it is an empty page, so the others keep their numbers.
                pages.append("")
                unloadable = unloadable or e
                continue
            loaded += 1
            pages.append(page.get_textpage().get_text_bounded().replace("\r\n", "\n"))
        if unloadable is not None and not loaded:
            raise unloadable  # no page at all: the document is what is broken
        return pages
    finally:
        pdf.close()  # closes its pages and text pages too: PDFium's memory goes now, not at the next GC
