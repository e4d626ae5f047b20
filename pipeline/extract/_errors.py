"""The error every extractor raises for a PDF that the empty password does not open."""

from pipeline.errors import DocumentError


def encrypted() -> DocumentError:
    """Both extractors try the empty user password, which opens owner-only encrypted PDFs."""
    return DocumentError("EncryptedPDF", "encrypted PDF that the empty password does not open")
