import unicodedata

import pytest

from pipeline.extract._pdfium import _as_read, _codes_apart, pdf_pages

from support import SAMPLES


@pytest.fixture(scope="module")
def texts(corpus) -> dict[str, str]:
    """Every real PDF that PDFium reads -> its pages' text, joined."""
    found = {}
    for path in sorted(corpus.rglob("*.pdf")) + sorted((SAMPLES / "pdf").glob("*.pdf")):
        try:
            found[path.name] = "".join(pdf_pages(path.read_bytes()))
        except Exception:  # encrypted or broken: test_extractors holds those to their error types
            continue
    return found


def test_no_real_pdf_keeps_a_control_character(texts):
    # Before the cleanup GeoTopo-komprimiert.pdf alone had 13 kinds (raw codes of TeX's math fonts).
    assert len(texts) >= 25
    for name, text in texts.items():
        controls = {c for c in text if unicodedata.category(c) == "Cc" and c not in "\t\n"}
        assert not controls, (name, controls)


def test_a_word_hyphenated_at_a_line_end_reads_whole(texts):
    # PDFium gave 'adip\x02iscing', 'ultri\x02ces', 'Maece\x02nas': a marker where the printed hyphen was.
    assert {"adipiscing", "ultrices", "Maecenas"} <= set(texts["multicolumn.pdf"].split())
    assert "takimata" in texts["minimal-document.pdf"]
    # Before a capital the hyphen is a compound's, not a syllable break's.
    assert "(Schwarz-Weiß," in texts["GeoTopo-komprimiert.pdf"]
    assert "Homöomorphismus" in texts["GeoTopo-komprimiert.pdf"]


def test_a_glyph_without_unicode_keeps_the_words_apart(texts):
    # habibi.pdf's TrueType space has no Unicode mapping: PDFium gave its glyph code, 3.
    assert "ϲΒϴΒ habibi" in texts["habibi.pdf"]


def test_a_glyph_code_2_is_no_hyphen_and_keeps_the_words_apart():
    """A font that maps its code 2 to no Unicode (TeX's big bracket in CMEX10) writes U+0002 as PDFium's line-end
    hyphen marker does; PDFium's characters say which is which, and only the hyphen joins its word."""
    text = "ultri\x02ces f\x02x\x03y"
    assert _as_read(_codes_apart(text, [True, False])) == "ultrices f x y"
    assert _as_read(_codes_apart(text, [False, False])) == "ultri ces f x y"
