"""Tokenisation and chunking of extracted documents into token windows.

A document is tokenised once, without special tokens, with character offsets.
A document that fits one window (`max_tokens`, special tokens and prompt
included) is one chunk holding the whole text. A longer one is cut into
windows, each a slice of the document's tokens, so no chunk is ever truncated
or re-tokenised; `mode` picks where the windows end:

- "boundaries" (the default): each window ends at the strongest boundary near
  its end (`pipeline.text.boundaries`): a paragraph or a sentence in its last
  quarter, else a word, else a character of a script written without spaces;
  inside a word only when the word is longer than a window. A sentence short
  enough to fit a window with its overlap (`max_tokens - special - overlap`
  tokens) is never split: the window ends before it instead. Neighbours share
  up to `overlap` tokens, whole sentences, or else whole words, and fewer where
  the word after a window needs the room in the next one. A window starts on
  text, never on a token of white space alone.
- "window": windows of exactly `max_tokens` step through the tokens, sharing
  `overlap` tokens; edges fall anywhere, inside words too.

Each chunk keeps its character span in the document text (its `text` is that
span) and the 1-based pages that span touches.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from pipeline.errors import ConfigError
from pipeline.text.boundaries import CHARACTER, PARAGRAPH, SENTENCE, WORD, blank_tokens, cut_levels
from pipeline.text.tokenizer import Tokenizer

# Pages of a PDF are joined with this, so no token straddles a page break.
PAGE_SEPARATOR = "\n\n"
CHUNKING_MODES = ("boundaries", "window")
# Tokens neighbouring chunks share unless --overlap says otherwise: part of every output's fingerprint.
DEFAULT_OVERLAP = 32


@dataclasses.dataclass(frozen=True)
class ChunkingConfig:
    max_tokens: int
    overlap: int
    prompt: str = ""  # text put before every chunk (resolved from --prompt: pipeline.encode.model_dir)
    mode: str = CHUNKING_MODES[0]  # where windows end: one of CHUNKING_MODES (see above)

    def __post_init__(self):
        if self.mode not in CHUNKING_MODES:
            raise ConfigError(f"--chunking must be one of {', '.join(CHUNKING_MODES)}, got {self.mode!r}")

    def validate(self, n_special: int, model_max: int) -> None:
        if not n_special < self.max_tokens <= model_max:
            raise ConfigError(
                f"--max-tokens must be in ({n_special}, {model_max}] for this model, got {self.max_tokens}"
            )
        room = self.max_tokens - n_special
        if not 0 <= self.overlap < room:
            # A small --max-tokens alone meets the default: say so, and what to pass, as the user gave no --overlap.
            given = f"the default {self.overlap}: pass --overlap N with N < {room}"
            raise ConfigError(
                f"--overlap must be in [0, {room}) for --max-tokens {self.max_tokens}, "
                f"got {given if self.overlap == DEFAULT_OVERLAP else self.overlap}"
            )


@dataclasses.dataclass(frozen=True)
class Chunk:
    text: str
    token_ids: list[int]  # special tokens included
    char_start: int
    char_end: int
    page_start: int | None  # 1-based, None for documents without pages
    page_end: int | None


def join_pages(pages: list[str]) -> tuple[str, list[int]]:
    """The document text and the character offset at which each page starts."""
    starts, offset = [], 0
    for page in pages:
        starts.append(offset)
        offset += len(page) + len(PAGE_SEPARATOR)
    return PAGE_SEPARATOR.join(pages), starts


def chunk_document(
    text: str,
    ids,
    offsets,
    page_starts: list[int] | None,
    tokenizer: Tokenizer,
    cfg: ChunkingConfig,
) -> list[Chunk]:
    """One document's content tokens -> its chunks, in order.

    `ids` [n] and `offsets` [n, 2] (character spans), arrays or lists, as
    `Tokenizer.encode_document` gives them; n must not be 0. A document that fits
    one window is one chunk whose text is the whole document text.
    """
    ids, offsets = np.asarray(ids), np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    content = cfg.max_tokens - tokenizer.n_special
    n = len(ids)
    if n <= content:
        spans = [(0, n)]
    elif cfg.mode == "window":
        spans = window_spans(n, content, cfg.overlap)
    else:
        spans = boundary_spans(cut_levels(text, offsets), blank_tokens(text, offsets), content, cfg.overlap)

    def page_of(char: int) -> int | None:
        return None if page_starts is None else bisect.bisect_right(page_starts, char)

    chunks = []
    for start, end in spans:
        lo, hi = _reach(text, offsets, start, end)
        char_start, char_end = (0, len(text)) if len(spans) == 1 else (lo, hi)
        chunks.append(
            Chunk(
                text=text[char_start:char_end],
                token_ids=tokenizer.prefix_ids + ids[start:end].tolist() + tokenizer.suffix_ids,
                char_start=char_start,
                char_end=char_end,
                page_start=page_of(lo),
                page_end=page_of(max(hi - 1, lo)),
            )
        )
    return chunks


def _reach(text: str, offsets: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """The characters of tokens [start, end), with those no token holds around them, without white space at
    either end.

    A tokenizer drops some characters (a combining accent it strips, a zero-width space, a control
    character); those between the span's tokens are inside it anyway, those at its edges would fall
    between two chunks. So a span reaches forward over them to the next token, and back over those that
    cling to its first token (the first span from the document's start). Tokens that carry white space
    (SentencePiece's '▁word', byte-level BPE's 'Ġword' and 'Ċ') would start or end a span with it.
    """
    first, last = int(offsets[start, 0]), int(offsets[end - 1, 1])
    # The next token may share the last one's character (a Hangul syllable, cut into jamo), never end before it.
    lo, hi = first, (max(last, int(offsets[end, 0])) if end < len(offsets) else len(text))
    if start == 0:
        lo = 0
    else:
        while lo > offsets[start - 1, 1] and not text[lo - 1].isspace():
            lo -= 1
    held = text[lo:hi]
    if not held.strip():  # tokens of white space alone
        return first, last
    return lo + len(held) - len(held.lstrip()), hi - len(held) + len(held.rstrip())


def window_spans(n: int, content: int, overlap: int) -> list[tuple[int, int]]:
    """Token spans [start, end) of `content` tokens every `content - overlap` tokens over `n` > `content`."""
    return [(start, min(start + content, n)) for start in range(0, n - overlap, content - overlap)]


def boundary_spans(levels: np.ndarray, blank: np.ndarray, content: int, overlap: int) -> list[tuple[int, int]]:
    """Token spans [start, end) of at most `content` tokens, ending and starting at strong cuts.

    `levels`: [n + 1], each cut's level (`cut_levels`), n > `content`; `blank`:
    [n], the tokens of white space alone (`blank_tokens`). Every span ends past
    the previous one's end, so each adds tokens: the spans cover every token
    but white space between two of them and at the ends, and a run without any
    boundary still advances a window at a time. A span holds text: it never
    starts on white space (a byte-level 'Ġ' before a word longer than the
    window was a chunk of its own), nor ends before text the span before it
    lacks.
    """
    n = len(levels) - 1
    cuts = [np.flatnonzero(levels >= level) for level in range(PARAGRAPH + 1)]  # cuts of at least each level
    text_tokens = np.flatnonzero(~blank)
    if not text_tokens.size:  # white space alone: nothing to cut at
        return window_spans(n, content, overlap)

    def last(level: int, lo: int, hi: int) -> int | None:
        """The latest cut of at least `level` in (lo, hi]."""
        i = int(np.searchsorted(cuts[level], hi, side="right")) - 1
        return int(cuts[level][i]) if i >= 0 and cuts[level][i] > lo else None

    def first(level: int, lo: int, hi: int) -> int | None:
        """The earliest cut of at least `level` in [lo, hi]."""
        i = int(np.searchsorted(cuts[level], lo, side="left"))
        return int(cuts[level][i]) if i < len(cuts[level]) and cuts[level][i] <= hi else None

    def text_from(token: int) -> int:
        """The first token of text at or after `token`; n where only white space follows."""
        i = int(np.searchsorted(text_tokens, token))
        return int(text_tokens[i]) if i < len(text_tokens) else n

    def next_sentence_end(cut: int) -> int:
        """The end of the first sentence of text after the cut `cut` (past white space alone between)."""
        word = text_from(cut)
        return n if word >= n else first(SENTENCE, word + 1, n)

    def end_of(start: int, after: int) -> int:
        """Where the span from `start` ends, past the first token of text after `after` (the previous end)."""
        limit = start + content
        if limit >= n:
            return n
        after = text_from(after)
        near = limit - content // 4
        paragraph = last(PARAGRAPH, after, limit)
        if paragraph is not None and paragraph >= near:
            return paragraph
        sentence = last(SENTENCE, after, limit)
        # Ending early keeps the next sentence whole, when a window with its overlap can hold it.
        if sentence is not None and (
            sentence >= near or next_sentence_end(sentence) - text_from(sentence) <= content - overlap
        ):
            return sentence
        word = last(WORD, after, limit)
        if word is not None and word >= near:
            return word
        anywhere = last(CHARACTER, after, limit)
        return limit if anywhere is None else anywhere

    def reach(end: int) -> int:
        """Where a window that goes on from `end` must reach: past the first word of text after it where a window
        holds that word (so it is not cut), else past that word's first token."""
        word = text_from(end)
        word_end = first(CHARACTER, word + 1, n)
        must = word_end if word_end - word <= content else word + 1
        # Where the text after `end` begins a sentence (only white space between), a window with its overlap holds
        # that sentence whole when it fits: the overlap gives way to it, as end_of promised (next_sentence_end).
        if word < n and first(SENTENCE, end, word) is not None:
            sentence_end = next_sentence_end(end)
            if sentence_end - word <= content - overlap:
                must = max(must, sentence_end)
        return must

    def next_start(start: int, end: int) -> int:
        # The overlap gives way to what the window must reach.
        lo = max(end - overlap, start + 1, reach(end) - content)
        for level in (SENTENCE, WORD, CHARACTER):
            cut = first(level, lo, end - 1)
            if cut is not None:
                return text_from(cut)
        return text_from(end)

    # The first span starts on the document's first token of text, as every other does.
    start = text_from(0)
    spans = [(start, end_of(start, start))]
    while text_from(spans[-1][1]) < n:
        start, end = spans[-1]
        following = next_start(start, end)
        spans.append((following, end_of(following, end)))
    return spans
