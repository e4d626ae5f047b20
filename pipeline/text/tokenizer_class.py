"""Which tokenizer class transformers 5's AutoTokenizer loads for a model directory, and how that class splits
text: what `Tokenizer` sets in place of tokenizer.json's normalizer and pre-tokenizer.

sentence-transformers loads a model's tokenizer with AutoTokenizer, and transformers 5 builds a class with an
__init__ of its own from tokenizer.json's vocabulary, post-processor and Precompiled character map alone: the
class, not the file, says how text is split (TokenizersBackend.convert_to_native_format).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import ModelError
from pipeline.text.tokenizer import BertSettings, SentencePieceSplit

# How transformers 5 builds each tokenizer class from tokenizer.json. A class with an __init__ of its own is
# given the file's vocabulary, post-processor and Precompiled character map alone, and sets its normalizer and
# pre-tokenizer itself (TokenizersBackend.convert_to_native_format):
#   "sentencepiece": a split on white space before Metaspace (`SentencePieceSplit`);
#   "bert": a BertNormalizer from tokenizer_config.json and BertPreTokenizer (`BertSettings`);
#   "file": tokenizer.json as written: the generic classes load it whole, and the other classes here set the
#           pipeline their families' hub files hold (RobertaTokenizer: ByteLevel; Qwen2Tokenizer: NFC, its split,
#           ByteLevel; GemmaTokenizer: spaces to '▁', split after them).
# A class's "...Fast" name is the class itself in transformers 5. A class not here is refused: docembed does not
# know how it splits text.
TOKENIZER_BUILDS = {
    "T5Tokenizer": "sentencepiece",
    "XLMRobertaTokenizer": "sentencepiece",
    "BertTokenizer": "bert",
    "DistilBertTokenizer": "bert",
    "MPNetTokenizer": "bert",
    "RobertaTokenizer": "file",
    "Qwen2Tokenizer": "file",
    "GemmaTokenizer": "file",
    "PreTrainedTokenizerFast": "file",
    "TokenizersBackend": "file",
}
GENERIC_TOKENIZER = "TokenizersBackend"  # what AutoTokenizer loads where no class of a model's own applies
# config.json's model_type -> the class transformers 5's AutoTokenizer loads (models/auto/tokenization_auto.py,
# TOKENIZER_MAPPING_NAMES), for the families docembed runs; one not here (llama, GTE's hub name "new") loads the
# generic class unless the model names another.
AUTO_TOKENIZERS = {
    "bert": "BertTokenizer",
    "distilbert": "BertTokenizer",
    "nomic_bert": "BertTokenizer",
    "mpnet": "MPNetTokenizer",
    "xlm-roberta": "XLMRobertaTokenizer",
    "gte": "XLMRobertaTokenizer",
    "roberta": "RobertaTokenizer",
    "t5": "T5Tokenizer",
    "qwen2": "Qwen2Tokenizer",
    "qwen3": "Qwen2Tokenizer",
    "gemma3_text": "GemmaTokenizer",
    "modernbert": GENERIC_TOKENIZER,
    "mistral": GENERIC_TOKENIZER,  # without mistral-common and a tekken.json, which docembed does not read
}
# tokenizer_config.json's key -> BertSettings' field
BERT_SETTINGS = {
    "do_lower_case": "lowercase",
    "strip_accents": "strip_accents",
    "tokenize_chinese_chars": "handle_chinese_chars",
}
# The loader's keys that the classes here read: where tokenizer_args set them, docembed applies them.
SETTINGS = tuple(BERT_SETTINGS)


def split(path: Path, config: dict, loader: dict) -> BertSettings | SentencePieceSplit | None:
    """How the tokenizer class transformers loads for the model directory `path` splits text
    (`TOKENIZER_BUILDS`), from its config.json and what transformers' tokenizer loader is given (`loader`:
    tokenizer_config.json, the Transformer module's tokenizer_args over it); None: as tokenizer.json does."""
    name = _tokenizer_class(config, loader)
    build = TOKENIZER_BUILDS.get(name)
    if build is None:
        raise ModelError(
            f"{path}: tokenizer class {name} is not supported; docembed splits text as transformers' "
            f"{', '.join(TOKENIZER_BUILDS)} do (PreTrainedTokenizerFast: as tokenizer.json says)"
        )
    if build == "bert":
        return _bert_settings(path, loader)
    return SentencePieceSplit() if build == "sentencepiece" else None


def _tokenizer_class(config: dict, loader: dict) -> str:
    """The tokenizer class transformers 5's AutoTokenizer loads: the one the loader or config.json names (its
    "...Fast" name is the class), else the one of config.json's model_type. A family whose own class is the
    generic one loads that whatever is named: ModernBERT's hub files name PreTrainedTokenizerFast, Mistral's
    LlamaTokenizer. (For Qwen2 AutoTokenizer takes the family's own over a named one; both split as the file.)"""
    own = AUTO_TOKENIZERS.get(config.get("model_type"))
    named = loader.get("tokenizer_class") or config.get("tokenizer_class")
    if named is None or own == GENERIC_TOKENIZER:
        return own or GENERIC_TOKENIZER
    named = str(named)
    return named if named in TOKENIZER_BUILDS else named.removesuffix("Fast")


def _bert_settings(path: Path, loader: dict) -> BertSettings:
    """What transformers' BERT-style classes set in their BertNormalizer: the loader's do_lower_case,
    strip_accents and tokenize_chinese_chars, each defaulting as those classes do."""
    settings = {}
    for key, field in BERT_SETTINGS.items():
        value = loader.get(key, getattr(BertSettings, field))
        if not isinstance(value, bool) and not (value is None and field == "strip_accents"):
            raise ModelError(f"{path}: the tokenizer's {key} {value!r} is not true or false")
        settings[field] = value
    return BertSettings(**settings)
