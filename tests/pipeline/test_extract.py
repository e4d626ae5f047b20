import pytest

from support import encrypt
from pipeline.extract import DocumentError, extract_pages, kind_of


def test_kind_of_by_extension():
    assert kind_of("a/b/Report.PDF") == "pdf"
    assert kind_of("notes.md") == "text" and kind_of("notes.txt") == "text"
    assert kind_of("image.png") is None and kind_of("archive.pdf.gz") is None


def test_real_pdf_gives_text_per_page(real_pdf):
    pages = extract_pages(real_pdf, "pdf")
    assert len(pages) == 4
    assert all(len(p) > 1000 for p in pages)
    assert pages[0].startswith("Hello, here is some text without a meaning.")


def test_owner_only_password_opens(real_pdf):
    # Encrypted with an empty user password: readers open it without asking.
    pages = extract_pages(encrypt(real_pdf, user_password="", owner_password="owner"), "pdf")
    assert pages == extract_pages(real_pdf, "pdf")


def test_text_is_decoded_as_utf8_without_bom():
    assert extract_pages("\ufeffZürich ✓".encode("utf-8"), "text") == ["Zürich ✓"]


def test_each_bad_document_raises_its_error_type(bad_documents):
    for name, (data, stage, error_type) in bad_documents.items():
        if stage != "extract":
            continue
        with pytest.raises(DocumentError) as caught:
            extract_pages(data, kind_of(name))
        assert caught.value.error_type == error_type, name
        assert str(caught.value), name


def test_every_corpus_pdf_yields_text_or_a_document_error(corpus):
    outcomes = {}
    for path in sorted(corpus.rglob("*.pdf")):
        try:
            outcomes[path.name] = len(extract_pages(path.read_bytes(), "pdf"))
        except DocumentError as e:
            outcomes[path.name] = e.error_type
    assert outcomes["libreoffice-writer-password.pdf"] == "EncryptedPDF"
    assert outcomes["GeoTopo-komprimiert.pdf"] == 117
    assert outcomes["imagemagick-lzw.pdf"] == "NoText"  # an image, no text layer
    assert sum(isinstance(v, int) for v in outcomes.values()) >= 20
