"""How strong a boundary lies between neighbouring tokens: paragraph, sentence, word, character, none.

A document's content tokens (`ids`, `offsets` from `Tokenizer.encode_document`)
have n + 1 cuts: cut i falls between token i - 1 and token i; cuts 0 and n are
the document's ends. A cut's level is the strongest boundary in the text
between the two tokens (their gap, and the characters on either side):

- PARAGRAPH: a blank line, whatever its line breaks (`\n`, `\r\n`, `\r`, U+2028),
  a form feed or U+2029 (pages of a PDF are joined by a blank line);
- SENTENCE: after a sentence's terminator and closing quotes or brackets: `. ! ?`
  and their kin in Arabic, Devanagari, Armenian, Ethiopic, Burmese, followed by
  white space, except a `.` followed by a lowercase letter ("e.g. the");
  the full-width `。！？` of Chinese and Japanese, followed by anything;
- WORD: white space between the tokens, or at the edge of one (SentencePiece's
  `▁word` and byte-level BPE's `Ġword` carry the space before their word);
  characters the tokenizer dropped (combining marks it strips, a zero-width
  joiner) join a word rather than part two;
- CHARACTER: no white space, but a character of a script written without
  spaces on either side (Han, kana, Thai, Lao, Khmer, Burmese, and their
  punctuation), where each character is a place to cut, unless a mark that
  extends the character before it follows (a Thai vowel or tone mark, Thai's
  and Lao's AM), or the character before stacks the next under it (Khmer's
  COENG, Burmese's virama): Unicode's grapheme clusters (UAX #29);
- NONE: inside a word (between "photo" and "##synthesis"), or inside one
  character that a byte-level tokenizer split.

`blank_tokens` says which tokens are white space alone (byte-level BPE's 'Ġ'
and 'Ċ', a SentencePiece '▁' of its own), where no chunk starts.

A small set of regular expressions and code point ranges rather than a Unicode
segmentation library: the regexes run once over the text, in C, and every cut's
level then comes from array lookups, a small part of the tokeniser's time.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

NONE, CHARACTER, WORD, SENTENCE, PARAGRAPH = range(5)

_CLOSERS = "\"'”’»›)\\]}」』）】〕〉》"
_TERMINATORS = ".!?…‼⁇⁈⁉؟۔।॥։።။"
# A run of terminators is tried from its first character only, and never given back: else a run not followed by
# white space ("....x") is tried from each of its characters, back through the rest of it, in quadratic time.
_SENTENCE_END = re.compile(
    rf"(?:(?<![{_TERMINATORS}])[{_TERMINATORS}]++[{_CLOSERS}]*+(?=\s|$)|[。！？｡]++[{_CLOSERS}]*+)",
)
# Line breaks as str.splitlines() knows them (\r\n counts once), and the separators that end a paragraph alone.
_LINE = r"(?:\r\n|\r(?!\n)|[\n\v\x85\u2028])"
_PARAGRAPH = re.compile(rf"{_LINE}[^\S\n\r\v\f\x1c-\x1e\x85\u2028\u2029]*{_LINE}|[\f\x1c-\x1e\u2029]")

# Scripts written without spaces between words: Thai, Lao, Burmese, Khmer; CJK
# punctuation, kana, Han (and its extensions and compatibility forms), full-width forms.
_SPACELESS = np.array(
    [
        (0x0E00, 0x0EFF),
        (0x1000, 0x109F),
        (0x1780, 0x17FF),
        (0x2E80, 0x2FDF),
        (0x3000, 0x30FF),
        (0x31F0, 0x31FF),
        (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF),
        (0xF900, 0xFAFF),
        (0xFF00, 0xFFEF),
        (0x20000, 0x3FFFF),
    ]
)


# What extends the character before it, of the Basic Multilingual Plane, where every script written without
# spaces has its marks: combining marks, and the two letters UAX #29 counts with them (Thai's and Lao's AM);
# what stacks the next character under it (Khmer's COENG, Burmese's virama); white space, all of which is in
# that plane.
_EXTENDS = np.array([unicodedata.category(chr(c)).startswith("M") or c in (0x0E33, 0x0EB3) for c in range(0x10000)])
_STACKS = np.isin(np.arange(0x10000), (0x17D2, 0x1039))
_SPACE = np.array([chr(c).isspace() for c in range(0x10000)])


def _in_bmp_table(table: np.ndarray, codepoints: np.ndarray) -> np.ndarray:
    """[len(codepoints) + 1] bool: `table`'s answer per code point, False past the end and outside the plane."""
    return np.append(table[np.minimum(codepoints, 0xFFFF)] & (codepoints <= 0xFFFF), False)


def _spaceless(codepoints: np.ndarray) -> np.ndarray:
    # The ranges are sorted and disjoint: a code point is inside one when it falls after an odd number of edges.
    return np.searchsorted(_SPACELESS.ravel(), codepoints, side="right") % 2 == 1


def _sentence_ends(text: str) -> np.ndarray:
    """Character positions just after each sentence's terminator (and closers)."""
    ends = []
    for m in _SENTENCE_END.finditer(text):
        after = text[m.end() : m.end() + 16].lstrip()
        if m.group().startswith(".") and after[:1].islower():
            continue
        ends.append(m.end())
    return np.array(ends, dtype=np.int64)


def cut_levels(text: str, offsets) -> np.ndarray:
    """[n + 1] int8: the level of each cut between the n tokens of `offsets` ([n, 2] character spans, an array
    or a list of pairs), PARAGRAPH at both ends."""
    n = len(offsets)
    levels = np.full(n + 1, PARAGRAPH, dtype=np.int8)
    if n < 2:
        return levels
    spans = np.asarray(offsets, dtype=np.int64).reshape(n, 2)
    before, after = spans[:-1, 1], spans[1:, 0]  # the gap of cut i is text[before[i-1]:after[i-1]]
    codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    spaceless = np.append(_spaceless(codepoints), False)  # index len(text): past the end
    extends, stacks = _in_bmp_table(_EXTENDS, codepoints), _in_bmp_table(_STACKS, codepoints)
    space = _in_bmp_table(_SPACE, codepoints)
    spaces_before = _spaces_before(space)
    last = np.maximum(before - 1, 0)  # the last character of the token before each cut
    word = (after >= before) & ((spaces_before[after] > spaces_before[before]) | space[last] | space[after])
    touching = (after == before) & ~extends[after] & ~stacks[last]
    character = touching & (spaceless[last] | spaceless[after])
    inner = np.where(word, WORD, np.where(character, CHARACTER, NONE))
    for level, positions in (
        (SENTENCE, _sentence_ends(text)),
        (PARAGRAPH, np.array([m.start() for m in _PARAGRAPH.finditer(text)], dtype=np.int64)),
    ):
        if not positions.size:
            continue
        # A boundary at position p marks the cut whose gap holds it: before <= p <= after.
        first = np.searchsorted(positions, before, side="left")
        holds = (first < len(positions)) & (positions[np.minimum(first, len(positions) - 1)] <= after)
        inner = np.where(holds & (after >= before), level, inner)
    levels[1:-1] = inner
    return levels


def blank_tokens(text: str, offsets) -> np.ndarray:
    """[n] bool: the tokens of `offsets` ([n, 2] character spans) whose characters are all white space."""
    spans = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    spaces_before = _spaces_before(_in_bmp_table(_SPACE, codepoints))
    return spaces_before[spans[:, 1]] - spaces_before[spans[:, 0]] == spans[:, 1] - spans[:, 0]


def _spaces_before(space: np.ndarray) -> np.ndarray:
    """[len(text) + 1]: how many of text[:i] are white space, from `space` [len(text) + 1] (`_in_bmp_table`)."""
    return np.concatenate(([0], np.cumsum(space[:-1])))
