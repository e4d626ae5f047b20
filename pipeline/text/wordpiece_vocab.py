"""A BERT tokenizer from `vocab.txt` alone, for model directories saved before tokenizer.json existed.

transformers 5's BertTokenizer (DistilBertTokenizer is the same class) builds one from the vocabulary file
when a directory has no tokenizer.json: the file read by `tokenizers`' own WordPiece, BertNormalizer and
BertPreTokenizer (which `Tokenizer` sets from tokenizer_config.json as for any BERT-style class), a
WordPiece decoder, its five special tokens as added tokens, and `[CLS] $A [SEP]` around every sequence.
`tokenizer(...)` builds the same. The special tokens' names come as transformers reads them: its defaults,
tokenizer_config.json's, special_tokens_map.json's over those, and the loader arguments a Transformer module
gives over all.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.models import WordPiece

from pipeline.errors import ModelError

VOCAB_FILE = "vocab.txt"
# The tokenizer classes transformers 5 builds from vocab.txt as a WordPiece between [CLS] and [SEP].
CLASSES = frozenset({"BertTokenizer", "DistilBertTokenizer"})
# BertTokenizer's special tokens and their defaults.
SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}
ADDED_TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized")


def special_tokens(
    files: Path, config: dict, arguments: dict, special_tokens_map: dict, added_tokens: dict
) -> dict[str, dict]:
    """Each special token as AddedToken's fields ({"content": ..., flags}): transformers' default,
    tokenizer_config.json's (`config`), special_tokens_map.json's (which transformers reads only where `config`
    has no added_tokens_decoder), then `arguments`' (tokenizer_args). ModelError where the directory `files`
    adds tokens of its own (added_tokens_decoder beyond these, added_tokens.json's): docembed does not build
    those."""
    added = config.get("added_tokens_decoder") or {}
    if not isinstance(added, dict):
        raise ModelError(f"{files}/tokenizer_config.json: added_tokens_decoder is not a mapping of ids to tokens")
    mapped = {} if added else special_tokens_map
    tokens = {}
    for key, default in SPECIAL_TOKENS.items():
        value = next((s[key] for s in (arguments, mapped, config) if s.get(key)), default)
        value = value if isinstance(value, dict) else {"content": value}
        if not isinstance(value.get("content"), str):
            raise ModelError(f"{files}: {key} {value!r} is not a token")
        tokens[key] = {"content": value["content"]} | {f: bool(value[f]) for f in ADDED_TOKEN_FLAGS if f in value}
    contents = {token["content"] for token in tokens.values()}
    extra = sorted(str(t.get("content") if isinstance(t, dict) else t) for t in added.values())
    extra = [t for t in extra if t not in contents] or list(added_tokens)
    if extra:
        raise ModelError(
            f"{files}: a token added to the vocabulary ({extra[0]!r}) without a tokenizer.json: docembed builds "
            f"a tokenizer from {VOCAB_FILE} with BERT's special tokens only"
        )
    return tokens


def tokenizer(vocab: Path, specials: dict[str, dict]) -> HFTokenizer:
    """BertTokenizer's tokenizer over `vocab` with the `specials` tokens; ModelError where the vocabulary lacks
    one (transformers would give it an id past the model's embeddings)."""
    try:
        model = WordPiece(str(vocab), unk_token=specials["unk_token"]["content"])
    except Exception as e:  # tokenizers raises a bare Exception for a file it cannot read
        raise ModelError(f"cannot read {vocab}: {e}") from None
    tok = HFTokenizer(model)
    ids = {t["content"]: tok.token_to_id(t["content"]) for t in specials.values()}
    if missing := [token for token, i in ids.items() if i is None]:
        raise ModelError(f"{vocab} lacks the special token {missing[0]!r}")
    tok.normalizer = normalizers.BertNormalizer(clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([AddedToken(**token, special=True) for token in specials.values()])
    cls, sep = specials["cls_token"]["content"], specials["sep_token"]["content"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, ids[cls]), (sep, ids[sep])],
    )
    return tok
