import io
import re
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
from pypdf import PdfWriter
from pypdf.generic import NameObject, NumberObject

from pipeline import Embedder
from pipeline.errors import ConfigError
from pipeline.extract import (
    PDF_EXTRACTORS,
    DocumentError,
    available_extractors,
    extract_pages,
    resolve_extractor,
)
from pipeline.kinds import kind_of
from pipeline.text.chunking import ChunkingConfig, chunk_document, join_pages
from pipeline.text.tokenizer import Tokenizer

from support import SAMPLES, deeply_nested_pdf, encrypt, page_tree_loop_pdf, text_pdf

extractors = pytest.mark.parametrize("extractor", PDF_EXTRACTORS)


def test_auto_takes_pdfium_and_explicit_names_must_exist():
    assert available_extractors() == ["pypdf", "pdfium"]
    assert resolve_extractor("auto") == "pdfium"
    assert resolve_extractor("pypdf") == "pypdf"
    with pytest.raises(ConfigError, match="unknown --pdf-extractor 'mupdf'"):
        resolve_extractor("mupdf")


def test_auto_loads_no_extractor_past_the_one_it_takes():
    """The driver resolves 'auto' at every job's start: pypdf's import would cost it time for nothing."""
    probe = "import sys; from pipeline.extract import resolve_extractor; resolve_extractor('auto'); print(sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "'pypdfium2'" in loaded and "'pypdf'" not in loaded


@extractors
def test_real_pdf_gives_text_per_page(real_pdf, extractor):
    pages = extract_pages(real_pdf, "pdf", extractor)
    assert len(pages) == 4
    assert all(len(p) > 1000 for p in pages)
    assert pages[0].startswith("Hello, here is some text without a meaning.")
    assert "\r" not in "".join(pages)


@extractors
def test_owner_only_password_opens(real_pdf, extractor):
    # Encrypted with an empty user password: readers open it without asking.
    pages = extract_pages(encrypt(real_pdf, user_password="", owner_password="owner"), "pdf", extractor)
    assert pages == extract_pages(real_pdf, "pdf", extractor)


def test_text_is_decoded_as_utf8_without_bom():
    assert extract_pages("\ufeffZürich ✓".encode("utf-8"), "text") == ["Zürich ✓"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
def test_utf16_and_utf32_are_read_by_their_byte_order_mark_and_nothing_else_guessed(encoding):
    text = "Zürich ✓ 日本"
    # Python's utf-16 and utf-32 write the mark (little-endian here) themselves; the -be ones do not.
    data = text.encode(encoding) if encoding in ("utf-16", "utf-32") else f"\ufeff{text}".encode(encoding)
    assert extract_pages(data, "text") == [text]
    with pytest.raises(DocumentError, match="UTF-8"):
        extract_pages("Zürich ✓".encode("utf-16-le"), "text")  # no mark: not UTF-8, and not guessed


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_ascii_text_in_utf16_or_utf32_without_a_mark_is_undecodable_not_text_with_nuls(encoding):
    """Without its mark, ASCII in UTF-16 or UTF-32 is valid UTF-8 with a NUL beside every character: stored as such
    it would be a chunk text nobody reads, and a NUL token for each character where a tokenizer keeps them."""
    with pytest.raises(DocumentError, match="UTF-16 or UTF-32 text without a byte-order mark") as caught:
        extract_pages("Plain English words.\r\n".encode(encoding), "text")
    assert caught.value.error_type == "UndecodableText"


@pytest.mark.parametrize(
    "data, message",
    [
        (bytes(range(256)), "a NUL byte at the start: binary data, or UTF-16 or UTF-32 text"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not valid UTF-8: 'utf-8' codec can't decode byte 0x89"),
    ],
    ids=["starts-with-nul", "png"],
)
def test_binary_data_named_txt_is_undecodable_in_one_line(data, message):
    with pytest.raises(DocumentError, match=re.escape(message)) as caught:
        extract_pages(data, "text")
    assert caught.value.error_type == "UndecodableText" and "\n" not in str(caught.value)


def test_a_text_file_of_white_space_has_no_text_and_is_not_said_to_have_pages():
    with pytest.raises(DocumentError, match="^no extractable text in the file: only white space$"):
        extract_pages(b" \n\t ", "text")


@extractors
def test_each_bad_document_raises_its_error_type(bad_documents, extractor):
    for name, (data, stage, error_type) in bad_documents.items():
        if stage != "extract":
            continue
        with pytest.raises(DocumentError) as caught:
            extract_pages(data, kind_of(name), extractor)
        assert caught.value.error_type == error_type, name
        assert str(caught.value) and "Success" not in str(caught.value), name


def _outcome(data: bytes, extractor: str) -> list[str] | str:
    try:
        return extract_pages(data, "pdf", extractor)
    except DocumentError as e:
        return e.error_type


# pypdf gives up on the page that holds the deep structure (it has no text for
# it), PDFium reads the page's text and ignores the unused resource.
DEEPLY_NESTED = {"pypdf": "NoText", "pdfium": ["Text beside a deep structure."]}


@extractors
def test_hostile_structures_give_text_or_a_document_error(extractor):
    # The ones that stay cheap, in this process; test_sandbox takes the bomb and the bounds.
    pages = _outcome(text_pdf([f"Page {i}." for i in range(2000)]), extractor)
    assert len(pages) == 2000 and pages[1999].strip() == "Page 1999."
    # PDFium loads the loop's one real page, which has no text; pypdf refuses the tree.
    assert _outcome(page_tree_loop_pdf(), extractor) == {"pypdf": "CorruptPDF", "pdfium": "NoText"}[extractor]
    assert _outcome(deeply_nested_pdf(), extractor) == DEEPLY_NESTED[extractor]


def test_a_page_pdfium_cannot_load_costs_that_page_not_the_document():
    # The page tree lists its own node as a second kid: PDFium loads the first page, not the second.
    writer = PdfWriter(clone_from=io.BytesIO(text_pdf(["Kept page.", "Next page."])))
    tree = writer._root_object["/Pages"]
    tree[NameObject("/Kids")].insert(1, tree.indirect_reference)
    tree[NameObject("/Count")] = NumberObject(3)
    out = io.BytesIO()
    writer.write(out)
    pages = _outcome(out.getvalue(), "pdfium")  # in PDFium's order of the tree: the broken kid is an empty page
    assert sorted(page.strip() for page in pages) == ["", "Kept page.", "Next page."]


def _pdf_outcomes(corpus, extractor) -> dict[str, list[str] | str]:
    """Every real PDF's name -> its pages, or the error_type it raised."""
    paths = sorted(corpus.rglob("*.pdf")) + sorted((SAMPLES / "pdf").glob("*.pdf"))
    return {path.name: _outcome(path.read_bytes(), extractor) for path in paths}


@pytest.fixture(scope="module")
def outcomes(corpus):
    return {extractor: _pdf_outcomes(corpus, extractor) for extractor in PDF_EXTRACTORS}


@extractors
def test_every_corpus_pdf_yields_text_or_a_document_error(outcomes, extractor):
    found = outcomes[extractor]
    assert found["libreoffice-writer-password.pdf"] == "EncryptedPDF"
    assert len(found["GeoTopo-komprimiert.pdf"]) == 117
    assert found["imagemagick-lzw.pdf"] == "NoText"  # an image, no text layer
    assert sum(isinstance(v, list) for v in found.values()) >= 20


# Where the two extractors disagree on whether a PDF has text at all: imagemagick-
# images.pdf is six images, four of them over the word "Background" in a font the
# file does not define; pypdf reads the word, PDFium returns no text.
ONLY_PYPDF_FINDS_TEXT = {"imagemagick-images.pdf"}
# Words agreeing below the threshold: the Arabic "habibi" files, which PDFium
# returns as presentation forms and stray glyphs where pypdf returns letters
# (Jaccard 0.40, cosine 0.74-0.76), and annotated_pdf.pdf, six words of which
# pypdf glues two ("Line 1Line 2": Jaccard 0.75, cosine 0.986).
LOW_WORD_AGREEMENT = {"habibi.pdf", "habibi-oneline-cmap.pdf", "habibi-rotated.pdf", "annotated_pdf.pdf"}
LOW_EMBEDDING_AGREEMENT = {"habibi.pdf", "habibi-oneline-cmap.pdf", "habibi-rotated.pdf"}
# Measured over the 23 PDFs both extract: Jaccard median 1.0, lowest otherwise
# 0.906 (GeoTopo: formulas); cosine median 1.0, lowest otherwise 0.986.
MIN_WORD_JACCARD = 0.9
MIN_EMBEDDING_COSINE = 0.98


def _words(pages: list[str]) -> set[str]:
    r"""Words as a reader reads them: NFKC folds ligatures (pypdf keeps 'ﬁ', PDFium spells 'fi'), and a word
    hyphenated at a line end is one word (pypdf keeps 'ultri-\nces', PDFium joins 'ultrices'; before a capital
    both keep the hyphen, 'Schwarz-Weiß')."""
    text = unicodedata.normalize("NFKC", " ".join(pages))
    text = re.sub(r"-\n(\w)", lambda m: m[1] if m[1].islower() else m[0], text)
    return set(re.findall(r"\w+", text.casefold()))


def _doc_embeddings(docs: dict, tokenizer: Tokenizer, embedder: Embedder) -> dict:
    """Each document's (key -> its pages) mean chunk embedding, chunked as the job chunks: unit vectors [dim].
    Every distinct chunk text is embedded once, all in one call: the two extractors' texts of a document share
    most of their chunks, and a call per document left most of its last batch empty."""
    chunk_texts = {}
    for key, pages in docs.items():
        text, page_starts = join_pages(pages)
        encoding = tokenizer.encode_content([text])[0]
        chunks = chunk_document(text, encoding.ids, encoding.offsets, page_starts, tokenizer, ChunkingConfig(256, 32))
        chunk_texts[key] = [c.text for c in chunks]
    distinct = sorted({t for texts in chunk_texts.values() for t in texts})
    vectors = dict(zip(distinct, embedder.embed(distinct)))
    means = {key: np.mean([vectors[t] for t in texts], axis=0) for key, texts in chunk_texts.items()}
    return {key: mean / np.linalg.norm(mean) for key, mean in means.items()}


def test_pdfium_agrees_with_pypdf_on_every_real_pdf(outcomes):
    reference, fast = outcomes["pypdf"], outcomes["pdfium"]
    both_fail = [n for n in reference if isinstance(reference[n], str) and isinstance(fast[n], str)]
    assert {n: reference[n] for n in both_fail} == {n: fast[n] for n in both_fail}
    assert {n for n in reference if isinstance(reference[n], str) != isinstance(fast[n], str)} == ONLY_PYPDF_FINDS_TEXT
    assert fast["imagemagick-images.pdf"] == "NoText"

    embedder = Embedder.load()
    tokenizer = embedder.tokenizer
    both = sorted(n for n in reference if isinstance(reference[n], list) and isinstance(fast[n], list))
    docs = {(extractor, name): found[name] for extractor, found in outcomes.items() for name in both}
    vectors = _doc_embeddings(docs, tokenizer, embedder)
    jaccard, cosine = {}, {}
    for name in both:
        a, b = _words(reference[name]), _words(fast[name])
        jaccard[name] = len(a & b) / len(a | b)
        cosine[name] = float(vectors["pypdf", name] @ vectors["pdfium", name])
    print("\nword Jaccard, embedding cosine (pypdf vs pdfium):")
    for name in both:
        print(f"  {name:45s} {jaccard[name]:.3f} {cosine[name]:.4f}")
    median_jaccard, median_cosine = np.median(list(jaccard.values())), np.median(list(cosine.values()))
    print(f"  median Jaccard {median_jaccard:.3f}, median cosine {median_cosine:.4f}")
    assert {n for n in both if jaccard[n] < MIN_WORD_JACCARD} == LOW_WORD_AGREEMENT
    assert {n for n in both if cosine[n] < MIN_EMBEDDING_COSINE} == LOW_EMBEDDING_AGREEMENT
