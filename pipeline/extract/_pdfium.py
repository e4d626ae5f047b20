"""The fast PDF extractor: PDFium, Chrome's PDF engine, through pypdfium2's ctypes bindings."""

from __future__ import annotations

import ctypes
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
            textpage, box = page.get_textpage(), page.get_bbox()
            pages.append(_as_read(_glyph_codes_apart(textpage.raw, box, _text_within(textpage.raw, box))))
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


def _text_within(raw: pdfium_c.FPDF_TEXTPAGE, box: tuple[float, float, float, float]) -> str:
    """The text of the characters within `box` (left, bottom, right, top), in PDFium's order.

    Not pypdfium2's get_text_bounded: it sizes its buffer by PDFium's count of characters, and a character above
    U+FFFF takes two UTF-16 units, so each one cost the page's last unit.
    """
    left, bottom, right, top = box
    chars = pdfium_c.FPDFText_GetBoundedText(raw, left, top, right, bottom, None, 0)
    if chars <= 0:
        return ""
    buffer = (ctypes.c_ushort * (2 * chars + 1))()
    units = pdfium_c.FPDFText_GetBoundedText(raw, left, top, right, bottom, buffer, len(buffer))
    # Its count holds the NUL it writes last; the text holds none (PDFium leaves a character of Unicode 0 out).
    # A lone surrogate (a ToUnicode map's half pair) stands for no character, as pypdfium2 reads it too.
    return bytes(buffer)[: 2 * max(units, 0)].decode("utf-16-le", errors="ignore").removesuffix("\0")


# The control characters PDFium's text page leaves in a page's text (core/fpdftext/cpdf_textpage.cpp), and a lone
# CR: PDFium writes CR only before LF.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Where a line ends in a hyphen and the word goes on at the next line's start, PDFium puts U+0002 in the hyphen's
# place and leaves out the line break (FPDFText_IsHyphen is true there).
_LINE_END_HYPHEN = "\x02"


def _glyph_codes_apart(raw: pdfium_c.FPDF_TEXTPAGE, box: tuple[float, float, float, float], text: str) -> str:
    """`text`, the characters within `box`, with each U+0002 that is no line-end hyphen made U+0001, which `_as_read`
    makes a space as it does any glyph's own code: a font that maps its code 2 to no Unicode (TeX's big bracket in
    CMEX10) writes U+0002 too.

    PDFium's text buffer (FPDFText_GetText's) leaves out every control character but a line-end hyphen, so on a page
    where it left out none (the last character's index there is its own), every U+0002 is a hyphen: two calls. Else
    PDFium's characters in order say which is which (FPDFText_IsHyphen).
    """
    count = text.count(_LINE_END_HYPHEN)
    if not count:
        return text
    last = pdfium_c.FPDFText_CountChars(raw) - 1
    if pdfium_c.FPDFText_GetTextIndexFromCharIndex(raw, last) == last:
        return text
    codes = [i for i in range(last + 1) if pdfium_c.FPDFText_GetUnicode(raw, i) == ord(_LINE_END_HYPHEN)]
    if len(codes) != count:
        codes = [i for i in codes if _within(raw, i, box)]
    hyphens = [bool(pdfium_c.FPDFText_IsHyphen(raw, i)) for i in codes]
    # Counts that still differ would be a PDFium this code does not know: all are hyphens only if every one is.
    return _codes_apart(text, hyphens if len(hyphens) == count else [all(hyphens)] * count)


def _within(raw: pdfium_c.FPDF_TEXTPAGE, index: int, box: tuple[float, float, float, float]) -> bool:
    """Whether FPDFText_GetBoundedText over `box` takes character `index`: its box and `box` overlap with an area,
    compared in single precision as PDFium's rectangles are (CPDF_TextPage::GetTextByRect)."""
    left, bottom, right, top = (ctypes.c_double() for _ in range(4))
    pdfium_c.FPDFText_GetCharBox(raw, index, left, right, bottom, top)
    box_left, box_bottom, box_right, box_top = (ctypes.c_float(edge).value for edge in box)
    return max(left.value, box_left) < min(right.value, box_right) and max(bottom.value, box_bottom) < min(
        top.value, box_top
    )


def _codes_apart(text: str, hyphens: list[bool]) -> str:
    """`text` with its i-th U+0002 kept where hyphens[i], else made U+0001."""
    marks = iter(hyphens)
    return re.sub(_LINE_END_HYPHEN, lambda _: _LINE_END_HYPHEN if next(marks) else "\x01", text)


def _as_read(text: str) -> str:
    """A page's text from PDFium -> as a reader reads it.

    PDFium ends lines with CRLF; they become LF so both extractors give the same character offsets for the same
    text. A line-end hyphen's marker joins the word, as Chrome's viewer, PDFium's own reader, does in copied and
    found text (it drops the marker), except before a capital: outside words in capitals a syllable break never
    leaves one there, so that hyphen belongs to a compound ("Schwarz-Weiß") and stays. Any other control character
    is a glyph's own code in a font that maps it to no Unicode (FPDFText_HasUnicodeMapError is true there, or a
    ToUnicode map names the control): TeX's big delimiters (CMEX10), a box (MSAM10), a TrueType font's space (glyph
    3). It stands for no letter, and a space keeps the words either side apart.
    """
    return _CONTROL.sub(_shown_as, text.replace("\r\n", "\n"))  # a page without controls comes back as it is


def _shown_as(control: re.Match) -> str:
    if control[0] != _LINE_END_HYPHEN:
        return " "
    after = control.string[control.end() : control.end() + 1]
    return "-" if after.isupper() else ""
