"""The model's tokenizer, from its `tokenizer.json` (Hugging Face `tokenizers`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import normalizers

from pipeline.errors import ModelError


@dataclasses.dataclass(frozen=True)
class Content:
    """A text's content tokens: `ids` and `offsets` (character spans in the text)."""

    ids: list[int]
    offsets: list[tuple[int, int]]


class Tokenizer:
    """A `tokenizer.json` tokenizer with truncation and padding turned off.

    The special tokens the model expects around a sequence (e.g. [CLS] ... [SEP])
    are read from the tokenizer's own post-processor, so any BERT-style template works.
    A `prompt` (e.g. "search_document: ") joins them: its tokens follow the leading
    special tokens on every sequence, as sentence-transformers puts it before the text,
    and count against the window like them.
    """

    def __init__(self, path: Path, prompt: str = "", lowercase: bool = False):
        """`lowercase`: lower-case texts first, as sentence-transformers' `do_lower_case` does: a Lowercase
        normalizer ahead of the tokenizer's own (unless it has one), so offsets still point into the text."""
        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises a bare Exception for a file it cannot parse
            raise ModelError(f"cannot read {path}: {e}") from None
        if lowercase and not _lowercases(self._tok.normalizer):
            own = self._tok.normalizer
            rest = list(own) if isinstance(own, normalizers.Sequence) else [] if own is None else [own]
            self._tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), *rest])
        self._tok.no_truncation()
        self._tok.no_padding()
        probe = self._tok.encode("a", add_special_tokens=True)
        content = [i for i, special in enumerate(probe.special_tokens_mask) if not special]
        # sentence-transformers tokenises prompt + text as one string, where the white space that ends a prompt
        # belongs to the text's first word: a byte-level BPE spells it into the word ('Ġword'), SentencePiece
        # marks the word with '▁' anyway, WordPiece drops it. So the prompt's tokens are those of the prompt
        # without it, and every text is tokenised after it (`_lead`). A prompt that ends in a word instead
        # cannot match: the text's first word would join that word (`ModelSpec.prompt_text` warns).
        head = prompt.rstrip()
        self._lead = prompt[len(head) :]
        self.prefix_ids = probe.ids[: content[0]] + self._tok.encode(head, add_special_tokens=False).ids
        self.suffix_ids = probe.ids[content[-1] + 1 :]
        unk = getattr(self._tok.model, "unk_token", None)
        self.unk_id: int | None = None if unk is None else self._tok.token_to_id(unk)

    @property
    def n_special(self) -> int:
        """Tokens around every sequence's content: special tokens and the prompt's."""
        return len(self.prefix_ids) + len(self.suffix_ids)

    def encode_content(self, texts: list[str]) -> list[Content]:
        """Each text's tokens without special tokens, as they follow the prompt (offsets into the text itself:
        a token of the prompt's white space alone is empty, at 0)."""
        if not self._lead:
            return [Content(e.ids, e.offsets) for e in self._tok.encode_batch(texts, add_special_tokens=False)]
        n = len(self._lead)
        encodings = self._tok.encode_batch([self._lead + text for text in texts], add_special_tokens=False)
        return [Content(e.ids, [(max(s - n, 0), max(t - n, 0)) for s, t in e.offsets]) for e in encodings]

    def encode_truncated(self, texts: list[str], max_tokens: int) -> list[list[int]]:
        """Ids with special tokens, cut to `max_tokens`: what sentence-transformers feeds its model."""
        keep = max_tokens - self.n_special
        return [self.prefix_ids + enc.ids[:keep] + self.suffix_ids for enc in self.encode_content(texts)]


def _lowercases(normalizer) -> bool:
    """Whether a normalizer is, or a sequence of them holds, Lowercase: sentence-transformers' own test."""
    if isinstance(normalizer, normalizers.Sequence):
        return any(isinstance(n, normalizers.Lowercase) for n in normalizer)
    return isinstance(normalizer, normalizers.Lowercase)
