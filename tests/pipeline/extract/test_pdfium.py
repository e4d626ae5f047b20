import unicodedata

import pytest

from pipeline.extract._pdfium import _as_read, _codes_apart, pdf_pages

from support import SAMPLES, glyph_codes_pdf


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


# PDFium's characters hold a code 2 the page's text leaves out, which only its box tells apart.
_OUTSIDE = {
    "nothing": [],
    "a glyph code 2": [("codes", -300, 380, b"e\\002f")],
    "a hyphen": [("text", -300, 380, b"off page hyph-"), ("text", -300, 360, b"enation")],
}


@pytest.mark.parametrize("outside", _OUTSIDE.values(), ids=[f"{what} outside the page" for what in _OUTSIDE])
def test_a_page_with_hyphens_and_glyph_codes_2_tells_them_apart(outside):
    inside = [("codes", 20, 340, b"a\\002b"), ("text", 20, 300, b"hyph-"), ("text", 20, 280, b"enation")]
    page = glyph_codes_pdf(outside + inside + [("codes", 20, 260, b"c\\002d")])
    assert pdf_pages(page) == ["a b\nhyphenation\nc d"]


def test_a_character_above_u_ffff_costs_the_page_nothing():
    # PDFium counts 𝐀 as one character and writes it as two UTF-16 units; a buffer sized by the count lost the "d".
    page = glyph_codes_pdf([("math", 20, 360, b"xAx"), ("text", 20, 340, b"the end")])
    assert pdf_pages(page) == ["x\U0001d400x\nthe end"]
