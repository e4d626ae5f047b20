"""Tokenisation and token-window chunking of extracted documents.

A document is tokenised once, without special tokens, with character offsets.
Windows of at most `max_tokens` tokens (special tokens included) step through it
with `overlap` tokens shared between neighbours; each chunk keeps its character
span in the document text and the 1-based pages that span touches.
"""

from __future__ import annotations

import bisect
import dataclasses

from pipeline.errors import ConfigError
from pipeline.text.tokenizer import Tokenizer

# Pages of a PDF are joined with this, so no token straddles a page break.
PAGE_SEPARATOR = "\n\n"


@dataclasses.dataclass(frozen=True)
class ChunkingConfig:
    max_tokens: int
    overlap: int
    prompt: str = ""  # text put before every chunk (resolved from --prompt: pipeline.encode.model_dir)

    def validate(self, n_special: int, model_max: int) -> None:
        if not n_special < self.max_tokens <= model_max:
            raise ConfigError(
                f"--max-tokens must be in ({n_special}, {model_max}] for this model, got {self.max_tokens}"
            )
        if not 0 <= self.overlap < self.max_tokens - n_special:
            raise ConfigError(
                f"--overlap must be in [0, {self.max_tokens - n_special}) for --max-tokens {self.max_tokens}, "
                f"got {self.overlap}"
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
    ids: list[int],
    offsets: list[tuple[int, int]],
    page_starts: list[int] | None,
    tokenizer: Tokenizer,
    cfg: ChunkingConfig,
) -> list[Chunk]:
    """Token windows over one document's content tokens (`ids`, `offsets` from `encode_content`).

    `ids` must not be empty. A document that fits one window is one chunk whose
    text is the whole document text.
    """
    content = cfg.max_tokens - tokenizer.n_special
    stride = content - cfg.overlap
    n = len(ids)
    starts = range(0, max(n - cfg.overlap, 1), stride) if n > content else [0]

    def page_of(char: int) -> int | None:
        return None if page_starts is None else bisect.bisect_right(page_starts, char)

    chunks = []
    for start in starts:
        end = min(start + content, n)
        if len(starts) == 1:
            char_start, char_end = 0, len(text)
        else:
            char_start, char_end = offsets[start][0], offsets[end - 1][1]
        chunks.append(
            Chunk(
                text=text[char_start:char_end],
                token_ids=tokenizer.prefix_ids + ids[start:end] + tokenizer.suffix_ids,
                char_start=char_start,
                char_end=char_end,
                page_start=page_of(offsets[start][0]),
                page_end=page_of(offsets[end - 1][1] - 1),
            )
        )
    return chunks
