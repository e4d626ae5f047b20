"""The fast PDF extractor: PDFium, Chrome's PDF engine, through pypdfium2's ctypes bindings."""

from __future__ import annotations

import re

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from pypdfium2.internal import ErrorToStr

from pipeline.extract._errors import encrypted


def pdf_pages(data: bytes) -> list[str]:
    """PDF bytes -> text per page. Malformed input raises PdfiumError; a page that will not load is empty."""
    pdf = pdfium.PdfDocument(_load(data))  # `data` outlives it: PDFium reads the bytes in place
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
            textpage = page.get_textpage()
            pages.append(_as_read(_glyph_codes_apart(textpage, textpage.get_text_bounded())))
        if unloadable is not None and not loaded:
            raise unloadable  # no page at all: the document is what is broken
        return pages
    finally:
        pdf.close()  # closes its pages and text pages too: PDFium's memory goes now, not at the next GC


def _load(data: bytes) -> pdfium_c.FPDF_DOCUMENT:
    """PDF bytes -> PDFium's handle on the document; one PDFium cannot load raises EncryptedPDF or PdfiumError.

    Not pdfium.PdfDocument(data): pypdfium2 takes a valid PDF without pages for a failed load (and leaves it open),
    and names as the reason PDFium's last error, which only a failed load sets: "Success", or the previous
    document's. A PDF without pages has no text, as with pypdf.
    """
    # No password: PDFium tries the empty user password, as pypdf's decrypt("") does.
    raw = pdfium_c.FPDF_LoadMemDocument64(data, len(data), None)
    if not raw:
        code = pdfium_c.FPDF_GetLastError()  # this load's: a failed load always sets it (fpdf_view.cpp)
        if code == pdfium_c.FPDF_ERR_PASSWORD:
            raise encrypted()
        raise pdfium.PdfiumError(f"Failed to load document (PDFium: {ErrorToStr.get(code, code)}).", err_code=code)
    return raw


# The control characters PDFium's text page leaves in a page's text (core/fpdftext/cpdf_textpage.cpp), and a lone
# CR: PDFium writes CR only before LF.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Where a line ends in a hyphen and the word goes on at the next line's start, PDFium puts U+0002 in the hyphen's
# place and leaves out the line break (FPDFText_IsHyphen is true there).
_LINE_END_HYPHEN = "\x02"


def _glyph_codes_apart(textpage: pdfium.PdfTextPage, text: str) -> str:
    """`text` with each U+0002 that is no line-end hyphen made U+0001, which `_as_read` makes a space as it does any
    glyph's own code: a font that maps its code 2 to no Unicode (TeX's big bracket in CMEX10) writes U+0002 too.

    PDFium's characters in order say which is which (FPDFText_IsHyphen), asked only on a page that has one. Where the
    page's text within its bounds holds fewer than the page, which is which is not known: all are hyphens only if
    every one on the page is.
    """
    count = text.count(_LINE_END_HYPHEN)
    if not count:
        return text
    raw = textpage.raw
    hyphens = [
        bool(pdfium_c.FPDFText_IsHyphen(raw, i))
        for i in range(pdfium_c.FPDFText_CountChars(raw))
        if pdfium_c.FPDFText_GetUnicode(raw, i) == ord(_LINE_END_HYPHEN)
    ]
    return _codes_apart(text, hyphens if len(hyphens) == count else [all(hyphens)] * count)


def _codes_apart(text: str, hyphens: list[bool]) -> str:
    """`text` with its i-th U+0002 kept where hyphens[i], else made U+0001."""
    marks = iter(hyphens)
    return re.sub(_LINE_END_HYPHEN, lambda _: _LINE_END_HYPHEN if next(marks) else "\x01", text)


def _as_read(text: str) -> str:
    """A page's text from PDFium -> as a reader reads it.

    PDFium ends lines with CRLF; they become LF so both extractors give the same character offsets for the same
    text. A line-end hyphen's marker joins the word, as Chrome's viewer, PDFium's own reader, does in copied and
    found text (it drops the marker, U+FFFE in FPDFText_GetText's text), except before a capital: outside words in
    capitals a syllable break never leaves one there, so that hyphen belongs to a compound ("Schwarz-Weiß") and
    stays. Any other control character is a glyph's own code in a font that maps it
    to no Unicode (FPDFText_HasUnicodeMapError is true there): TeX's big delimiters (CMEX10), a box (MSAM10), a
    TrueType font's space (glyph 3). It stands for no letter, and a space keeps the words either side apart.
    """
    return _CONTROL.sub(_shown_as, text.replace("\r\n", "\n"))  # a page without controls comes back as it is


def _shown_as(control: re.Match) -> str:
    if control[0] != _LINE_END_HYPHEN:
        return " "
    after = control.string[control.end() : control.end() + 1]
    return "-" if after.isupper() else ""
