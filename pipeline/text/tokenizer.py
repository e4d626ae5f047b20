"""The model's tokenizer, from its `tokenizer.json` (Hugging Face `tokenizers`)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from pipeline.errors import ModelError


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

    def encode_truncated(self, texts: list[str], max_tokens: int) -> list[list[int]]:
        """Ids with special tokens, cut to `max_tokens`: what sentence-transformers feeds its model."""
        keep = max_tokens - self.n_special
        return [self.prefix_ids + enc.ids[:keep] + self.suffix_ids for enc in self.encode_content(texts)]
