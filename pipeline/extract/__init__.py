"""Text out of document bytes: pages of a PDF, or the decoded text of a text file.

    extract_pages(data, kind, pdf_extractor="auto")  # -> list[str], one per page
    resolve_extractor(name)  # 'auto' or a name -> the PDF extractor that will run
    available_extractors()   # PDF extractors installed here

PDF extractors (`PDF_EXTRACTORS`) are a family behind one contract: `pypdf`
(pure Python, the reference) and `pdfium` (PDFium through pypdfium2, the fast
one). Both give text per page and the same errors: every failure a document can
cause is raised as `DocumentError` with a short `error_type` (EmptyFile, NoText,
EncryptedPDF, CorruptPDF, UndecodableText), so the caller turns it into one error
row and moves on. Parsing runs in the caller's process; `pipeline.extract.sandbox` bounds
its time and memory.
"""

from pipeline.errors import DocumentError
from pipeline.extract._dispatch import PDF_EXTRACTORS, available_extractors, resolve_extractor
from pipeline.extract._document import extract_pages

__all__ = ["PDF_EXTRACTORS", "DocumentError", "available_extractors", "extract_pages", "resolve_extractor"]
