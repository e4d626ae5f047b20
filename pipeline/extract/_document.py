"""The shared rules for turning a document's bytes into pages."""

from __future__ import annotations

import codecs

from pipeline.errors import DocumentError
from pipeline.extract._dispatch import pdf_pages


def extract_pages(data: bytes, kind: str, pdf_extractor: str = "auto") -> list[str]:
    """Document bytes -> text per page (one page for text files)."""
    if not data:
        raise DocumentError("EmptyFile", "the file is empty (0 bytes)")
    pages = pdf_pages(data, pdf_extractor) if kind == "pdf" else [_decode_text(data)]
    if not any(page.strip() for page in pages):
        where = f"{len(pages)} page{'s' * (len(pages) != 1)}" if kind == "pdf" else "the file: only white space"
        raise DocumentError("NoText", f"no extractable text in {where}")
    return pages


# A byte-order mark names its encoding beyond doubt (Windows tools save UTF-16 with one). UTF-32's come
# first: UTF-32-LE's starts with UTF-16-LE's. Without one a text file must be UTF-8: a guess among the
# legacy encodings would embed mojibake without a word.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _decode_text(data: bytes) -> str:
    """The text of a UTF-8 file, or of a UTF-16 or UTF-32 one that starts with its byte-order mark; the mark
    is dropped (utf-8-sig drops UTF-8's), as it would otherwise become a token."""
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8-sig")
    if encoding == "utf-8-sig" and 0 in data[:2]:
        # UTF-16 or UTF-32 without its mark: as UTF-8, its ASCII text decodes with a NUL in every other character.
        # Binary data (an image or archive named .txt) often starts with one too, so the message names both.
        raise DocumentError(
            "UndecodableText",
            "a NUL byte at the start: binary data, or UTF-16 or UTF-32 text without a byte-order mark "
            "(a text file is UTF-8, or carries one)",
        )
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise DocumentError("UndecodableText", f"not valid {encoding.removesuffix('-sig').upper()}: {e}") from None
