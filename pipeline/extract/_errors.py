"""The one exception a document's content may cause."""


class DocumentError(Exception):
    """This document cannot yield text; the job records it and carries on."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


def encrypted() -> DocumentError:
    """Both extractors try the empty user password, which opens owner-only encrypted PDFs."""
    return DocumentError("EncryptedPDF", "encrypted PDF that the empty password does not open")
