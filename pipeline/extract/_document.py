"""The shared rules for turning a document's bytes into pages."""

from __future__ import annotations

from pipeline.errors import DocumentError
from pipeline.extract._dispatch import pdf_pages


def extract_pages(data: bytes, kind: str, pdf_extractor: str = "auto") -> list[str]:
    """Document bytes -> text per page (one page for text files)."""
    if not data:
        raise DocumentError("EmptyFile", "the file is empty (0 bytes)")
    pages = pdf_pages(data, pdf_extractor) if kind == "pdf" else [_decode_text(data)]
    if not any(page.strip() for page in pages):
        raise DocumentError("NoText", f"no extractable text in {len(pages)} page(s)")
    return pages


def _decode_text(data: bytes) -> str:
    try:
        # utf-8-sig drops a byte-order mark, which would otherwise become a token.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DocumentError("UndecodableText", f"not valid UTF-8: {e}") from None
