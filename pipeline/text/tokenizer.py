"""The model's tokenizer, from its `tokenizer.json` (Hugging Face `tokenizers`), or a BERT `vocab.txt`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import normalizers, pre_tokenizers

from pipeline.errors import ModelError
from pipeline.text import wordpiece_vocab

# A long document is tokenised in pieces of about this many characters: the tokenizer's own working memory
# is over 100 bytes a character (alignments, token strings), where a piece's ids and offsets keep 20 a token.
PIECE_CHARS = 1 << 18
# Where a piece may end, best first: before a space that follows a word, where every tokenizer's tokens are
# those of the whole text (SentencePiece reads the space as its '▁' word-start mark, where a piece starting
# otherwise gets a '▁' of its own); before other white space; after a full-width stop.
_PIECE_ENDS = (re.compile(r"(?<=\S)(?= )"), re.compile(r"(?<=\S)(?=\s)"), re.compile(r"(?<=[。！？])"))


@dataclasses.dataclass(frozen=True)
class BertSettings:
    """How transformers 5's BERT-style tokenizer classes (BertTokenizer, DistilBertTokenizer, MPNetTokenizer)
    split text, whatever tokenizer.json says: a BertNormalizer of these settings from tokenizer_config.json, then
    BertPreTokenizer. The defaults are those classes' own, so a tokenizer_config.json that does not say
    do_lower_case lower-cases."""

    lowercase: bool = True  # do_lower_case
    strip_accents: bool | None = None  # None: strip them where lower-casing
    handle_chinese_chars: bool = True  # tokenize_chinese_chars: a CJK character is a word of its own


@dataclasses.dataclass(frozen=True)
class AlbertNormalizer:
    """What transformers 5's AlbertTokenizer normalises before SentencePiece's character map: `` and '' to ",
    then NFKD and StripAccents unless keep_accents, then Lowercase where do_lower_case (its defaults here)."""

    keep_accents: bool = False
    lowercase: bool = True

    def normalizers(self) -> list:
        accents = [] if self.keep_accents else [normalizers.NFKD(), normalizers.StripAccents()]
        return [
            normalizers.Replace("``", '"'),
            normalizers.Replace("''", '"'),
            *accents,
            *([normalizers.Lowercase()] if self.lowercase else []),
        ]


@dataclasses.dataclass(frozen=True)
class SentencePieceSplit:
    """How transformers 5's T5Tokenizer, XLMRobertaTokenizer, CamembertTokenizer and AlbertTokenizer split text,
    whatever tokenizer.json says: of its normalizers only SentencePiece's Precompiled character map (the Replace
    of repeated spaces, or the NFKC, that the file may also hold goes), AlbertTokenizer's own before it, then a
    split on white space and Metaspace. Files that split with Metaspace alone give trailing white space a '▁'
    token and keep tabs and newlines inside words."""

    add_prefix_space: bool = True  # a '▁' before every word (Metaspace's prepend_scheme "always"), else none
    albert: AlbertNormalizer | None = None  # AlbertTokenizer's normalizers before the character map


@dataclasses.dataclass(frozen=True)
class ByteLevelSplit:
    """How transformers 5's RobertaTokenizer and Qwen2Tokenizer split text: as tokenizer.json does (their
    families' files hold the pipeline they build), with the ByteLevel pre-tokenizer's add_prefix_space (a space
    put before the text) theirs, whatever the file's is."""

    add_prefix_space: bool = False


def identity(file_sha256: str, replaced_split: str, lowercase: bool) -> str:
    """Names what gives a tokenizer's ids: its file, what its class sets in place of the file's split, and the
    lower-casing before it. The job's CPU stages compare their node's with the driver's."""
    return hashlib.sha256(f"{file_sha256}|{replaced_split}|{lowercase}".encode()).hexdigest()[:16]


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

    def __init__(
        self,
        path: Path,
        prompt: str = "",
        lowercase: bool = False,
        split: BertSettings | SentencePieceSplit | ByteLevelSplit | None = None,
        special_tokens: dict[str, dict] | None = None,
    ):
        """`path`: a tokenizer.json, or a `vocab.txt` with its `special_tokens`, built as BertTokenizer builds
        one (`wordpiece_vocab`). `lowercase`: lower-case texts first, as sentence-transformers' `do_lower_case`
        does: a Lowercase normalizer ahead of the tokenizer's own (unless it has one), so offsets still point
        into the text. `split`: the normalizer and pre-tokenizer that the model's transformers tokenizer class
        sets instead of the file's (`_resplit`); None: the file's. `replaced_split` names what that changed, or
        is "" where it changed nothing. `identity` names the ids it gives (`identity`)."""
        try:
            raw = path.read_bytes()
            if special_tokens is None:
                self._tok = HFTokenizer.from_str(raw.decode())
        except Exception as e:  # the tokenizers library raises a bare Exception for a file it cannot parse
            raise ModelError(f"cannot read {path}: {e}") from None
        self.special_tokens = special_tokens
        if special_tokens is not None:
            self._tok = wordpiece_vocab.tokenizer(path, special_tokens)
            raw += json.dumps(special_tokens, sort_keys=True).encode()  # a vocabulary's ids depend on them too
        self.replaced_split = _resplit(self._tok, split)
        self.file_sha256 = hashlib.sha256(raw).hexdigest()  # the model's fingerprint names the file by it
        self.identity = identity(self.file_sha256, self.replaced_split, lowercase)
        if lowercase and not _lowercases(self._tok.normalizer):
            self._tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), *_parts(self._tok.normalizer)])
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
        return self._encode(texts, self._lead)

    def _encode(self, texts: list[str], lead: str) -> list[Content]:
        if not lead:
            return [Content(e.ids, e.offsets) for e in self._tok.encode_batch(texts, add_special_tokens=False)]
        n = len(lead)
        encodings = self._tok.encode_batch([lead + text for text in texts], add_special_tokens=False)
        return [Content(e.ids, [(max(s - n, 0), max(t - n, 0)) for s, t in e.offsets]) for e in encodings]

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
            # Only the document's start follows the prompt: a later piece follows the text before it.
            (encoding,) = self._encode([text[start:stop]], self._lead if start == 0 else "")
            ids.append(np.array(encoding.ids, dtype=np.int32))
            offsets.append(np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2) + start)
            start = stop
        if not ids:
            return np.zeros(0, np.int32), np.zeros((0, 2), np.int64)
        return np.concatenate(ids), np.concatenate(offsets)

    def encode_truncated(self, texts: list[str], max_tokens: int) -> list[list[int]]:
        """Ids with special tokens, cut to `max_tokens`: what sentence-transformers feeds its model.

        A long text is tokenised only as far as the kept tokens reach (10 MB whole took 8 s and 1.6 GB for 254
        tokens): a prefix that ends before a space after a word has the whole text's tokens (`_PIECE_ENDS`), and
        one that holds too few grows fourfold; a text with no such place is tokenised whole.
        """
        keep = max_tokens - self.n_special
        kept: list[list[int]] = [[] for _ in texts]
        todo, chars = list(range(len(texts))), max(16 * keep, 1024)
        while todo:
            prefixes = [_prefix(texts[i], chars) for i in todo]
            short = []
            for i, prefix, enc in zip(todo, prefixes, self.encode_content(prefixes)):
                if len(enc.ids) >= keep or len(prefix) == len(texts[i]):
                    kept[i] = enc.ids[:keep]
                else:
                    short.append(i)
            todo, chars = short, chars * 4
        return [self.prefix_ids + ids + self.suffix_ids for ids in kept]


def _prefix(text: str, chars: int) -> str:
    """`text` up to its last place before a space after a word within its first `chars` characters, or all of
    it where it is that short or has no such place."""
    if len(text) <= chars:
        return text
    end = _last_place(_PIECE_ENDS[0], text, 1, chars)
    return text if end is None else text[:end]


def _piece_end(text: str, start: int, piece_chars: int) -> int:
    """The end of the piece of `text` from `start`: the last of the best places to end in the last quarter
    of its first `piece_chars` characters, or there when they hold none (a run without any is cut)."""
    limit = start + piece_chars
    if limit >= len(text):
        return len(text)
    for places in _PIECE_ENDS:
        if (end := _last_place(places, text, max(start + 1, limit - piece_chars // 4), limit)) is not None:
            return end
    return limit


def _last_place(places: re.Pattern, text: str, start: int, end: int) -> int | None:
    """Where the last match of `places` in text[start:end] is (the text read as if it ended at `end`)."""
    last = None
    for place in places.finditer(text, start, end):
        last = place.start()
    return last


def _resplit(tok: HFTokenizer, split: BertSettings | SentencePieceSplit | ByteLevelSplit | None) -> str:
    """Sets `split`'s normalizer and pre-tokenizer in place of the file's; returns what that changed, for the
    model's fingerprint: a line that names the split, or the BertNormalizer's settings as JSON ("" where it
    changed nothing)."""
    if split is None:
        return ""
    before = _pipeline(tok)
    if isinstance(split, SentencePieceSplit):
        character_map = [n for n in _parts(tok.normalizer) if isinstance(n, normalizers.Precompiled)][:1]
        if split.albert is None:
            tok.normalizer = next(iter(character_map), None)
        else:
            tok.normalizer = normalizers.Sequence([*split.albert.normalizers(), *character_map])
        scheme = "always" if split.add_prefix_space else "never"
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.WhitespaceSplit(),
                pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=True),
            ]
        )
        change = (
            "SentencePiece split: the file's Precompiled normalizer alone, WhitespaceSplit then Metaspace, "
            f"prepend_scheme {scheme}"
        )
        if split.albert is not None:  # appended, so that the other classes' fingerprints stay as they were
            change += f"; AlbertTokenizer's normalizers before it, {json.dumps(dataclasses.asdict(split.albert))}"
    elif isinstance(split, ByteLevelSplit):
        for part in _parts(tok.pre_tokenizer):
            if isinstance(part, pre_tokenizers.ByteLevel):
                part.add_prefix_space = split.add_prefix_space
        change = f"ByteLevel add_prefix_space {str(split.add_prefix_space).lower()}"
    else:
        wanted = {"clean_text": True, **dataclasses.asdict(split)}
        tok.normalizer = normalizers.BertNormalizer(**wanted)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        change = json.dumps(wanted, sort_keys=True)
    return change if _pipeline(tok) != before else ""


def _parts(part) -> list:
    """A normalizer's or pre-tokenizer's parts: a Sequence's, or itself alone (None: none)."""
    if isinstance(part, (normalizers.Sequence, pre_tokenizers.Sequence)):
        return list(part)
    return [] if part is None else [part]


def _pipeline(tok: HFTokenizer) -> tuple[bytes | None, bytes | None]:
    """The normalizer and the pre-tokenizer, serialised: what `_resplit` sets."""
    return tuple(None if part is None else part.__getstate__() for part in (tok.normalizer, tok.pre_tokenizer))


def _lowercases(normalizer) -> bool:
    """Whether a normalizer is, or a sequence of them holds, Lowercase: sentence-transformers' own test."""
    return any(isinstance(n, normalizers.Lowercase) for n in _parts(normalizer))
