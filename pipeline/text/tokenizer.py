"""The model's tokenizer, from its `tokenizer.json` (Hugging Face `tokenizers`)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from pipeline.errors import ModelError

# A long document is tokenised in pieces of about this many characters: the tokenizer's own working memory
# is over 100 bytes a character (alignments, token strings), where a piece's ids and offsets keep 20 a token.
PIECE_CHARS = 1 << 18
# Where a piece may end, best first: before a space that follows a word, where every tokenizer's tokens are
# those of the whole text (SentencePiece reads the space as its '▁' word-start mark, where a piece starting
# otherwise gets a '▁' of its own); before other white space; after a full-width stop.
_PIECE_ENDS = (re.compile(r"(?<=\S)(?= )"), re.compile(r"(?<=\S)(?=\s)"), re.compile(r"(?<=[。！？])"))


class Tokenizer:
    """A `tokenizer.json` tokenizer with truncation and padding turned off.

    The special tokens the model expects around a sequence (e.g. [CLS] ... [SEP])
    are read from the tokenizer's own post-processor, so any BERT-style template works.
    A `prompt` (e.g. "search_document: ") joins them: its tokens follow the leading
    special tokens on every sequence, as sentence-transformers puts it before the text,
    and count against the window like them.
    """

    def __init__(self, path: Path, prompt: str = ""):
        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises a bare Exception for a file it cannot parse
            raise ModelError(f"cannot read {path}: {e}") from None
        self._tok.no_truncation()
        self._tok.no_padding()
        probe = self._tok.encode("a", add_special_tokens=True)
        content = [i for i, special in enumerate(probe.special_tokens_mask) if not special]
        self.prefix_ids = probe.ids[: content[0]] + self._prompt_ids(prompt)
        self.suffix_ids = probe.ids[content[-1] + 1 :]
        unk = getattr(self._tok.model, "unk_token", None)
        self.unk_id: int | None = None if unk is None else self._tok.token_to_id(unk)

    def _prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's tokens as they come before a text in sentence-transformers' `tokenize(prompt + text)`.

        Not always the prompt's own: SentencePiece marks the space before the text's first word on that
        word ("query: hello" -> ..., ':', '▁hello'), so "query: " alone ends in a '▁' of its own that the
        whole lacks. A probe word after the prompt shows where the text's tokens begin: as they are alone
        ("a"), or after a space (" a", a byte-level BPE's 'Ġa'), as a chunk's are inside a document. Where
        neither ends the whole (a prompt without a trailing space, whose last word the text's first joins),
        no split is exact, and the prompt's own tokens stand.
        """
        if not prompt:
            return []
        whole = self._tok.encode(prompt + "a", add_special_tokens=False).ids
        for text in ("a", " a"):
            ids = self._tok.encode(text, add_special_tokens=False).ids
            if whole[-len(ids) :] == ids:
                return whole[: -len(ids)]
        return self._tok.encode(prompt, add_special_tokens=False).ids

    @property
    def n_special(self) -> int:
        """Tokens around every sequence's content: special tokens and the prompt's."""
        return len(self.prefix_ids) + len(self.suffix_ids)

    def encode_content(self, texts: list[str]):
        """Encodings without special tokens, with `.ids` and `.offsets` (character spans)."""
        return self._tok.encode_batch(texts, add_special_tokens=False)

    def encode_document(self, text: str, piece_chars: int = PIECE_CHARS) -> tuple[np.ndarray, np.ndarray]:
        """One document's content tokens: ids [n] int32 and character offsets [n, 2] int64, tokenised in
        pieces of about `piece_chars` characters.

        A piece ends before a space between words where it can: the tokens are then those of the whole
        text. A text without spaces there (Chinese, a table of tabs) is cut after a full-width stop or
        before other white space, where SentencePiece starts the next piece with a '▁' token, and a run
        without either is cut where it must be: at most a token's difference every `piece_chars`.
        """
        ids, offsets, start = [], [], 0
        while start < len(text):
            stop = _piece_end(text, start, piece_chars)
            (encoding,) = self.encode_content([text[start:stop]])
            ids.append(np.array(encoding.ids, dtype=np.int32))
            offsets.append(np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2) + start)
            start = stop
        if not ids:
            return np.zeros(0, np.int32), np.zeros((0, 2), np.int64)
        return np.concatenate(ids), np.concatenate(offsets)

    def encode_truncated(self, texts: list[str], max_tokens: int) -> list[list[int]]:
        """Ids with special tokens, cut to `max_tokens`: what sentence-transformers feeds its model."""
        keep = max_tokens - self.n_special
        return [self.prefix_ids + enc.ids[:keep] + self.suffix_ids for enc in self.encode_content(texts)]


def _piece_end(text: str, start: int, piece_chars: int) -> int:
    """The end of the piece of `text` from `start`: the last of the best places to end in the last quarter
    of its first `piece_chars` characters, or there when they hold none (a run without any is cut)."""
    limit = start + piece_chars
    if limit >= len(text):
        return len(text)
    for places in _PIECE_ENDS:
        end = None
        for place in places.finditer(text, max(start + 1, limit - piece_chars // 4), limit):
            end = place.start()
        if end is not None:
            return end
    return limit
