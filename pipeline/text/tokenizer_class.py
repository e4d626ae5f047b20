"""Which tokenizer class transformers 5's AutoTokenizer, with which sentence-transformers loads a model's
tokenizer, takes for a model directory, and how that class splits text: what `Tokenizer` sets in place of
tokenizer.json's normalizer and pre-tokenizer (`TOKENIZER_BUILDS`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pipeline.errors import ModelError
from pipeline.text.tokenizer import AlbertNormalizer, BertSettings, ByteLevelSplit, SentencePieceSplit

# How transformers 5 builds each tokenizer class from tokenizer.json. A class with an __init__ of its own is
# given the file's vocabulary, post-processor and Precompiled character map alone, and sets its normalizer and
# pre-tokenizer itself (TokenizersBackend.convert_to_native_format):
#   "sentencepiece": a split on white space before Metaspace (`SentencePieceSplit`), AlbertTokenizer's after
#                    normalizers of its own (`AlbertNormalizer`);
#   "bert": a BertNormalizer from tokenizer_config.json and BertPreTokenizer (`BertSettings`);
#   "bytelevel": the pipeline its family's hub files hold (RobertaTokenizer: ByteLevel; Qwen2Tokenizer: NFC, its
#                split, ByteLevel), with the ByteLevel's add_prefix_space its own (`ByteLevelSplit`);
#   "file": tokenizer.json as written: the generic classes load it whole, and GemmaTokenizer sets the pipeline
#           its family's files hold (spaces to '▁', split after them).
# A class's "...Fast" name is the class itself in transformers 5. A class not here is refused: docembed does not
# know how it splits text.
TOKENIZER_BUILDS = {
    "T5Tokenizer": "sentencepiece",
    "XLMRobertaTokenizer": "sentencepiece",
    "CamembertTokenizer": "sentencepiece",
    "AlbertTokenizer": "sentencepiece",
    "BertTokenizer": "bert",
    "DistilBertTokenizer": "bert",
    "MPNetTokenizer": "bert",
    "RobertaTokenizer": "bytelevel",
    "Qwen2Tokenizer": "bytelevel",
    "GemmaTokenizer": "file",
    "PreTrainedTokenizerFast": "file",
    "TokenizersBackend": "file",
}
GENERIC_TOKENIZER = "TokenizersBackend"  # what AutoTokenizer loads where no class of a model's own applies
# config.json's model_type -> the class transformers 5's AutoTokenizer loads (models/auto/tokenization_auto.py,
# TOKENIZER_MAPPING_NAMES), for the families docembed runs; one not here (llama, GTE's hub name "new") loads the
# class the model names, else the generic one.
AUTO_TOKENIZERS = {
    "bert": "BertTokenizer",
    "distilbert": "BertTokenizer",
    "nomic_bert": "BertTokenizer",
    "mpnet": "MPNetTokenizer",
    "xlm-roberta": "XLMRobertaTokenizer",
    "gte": "XLMRobertaTokenizer",
    "roberta": "RobertaTokenizer",
    "camembert": "CamembertTokenizer",
    "albert": "AlbertTokenizer",
    "t5": "T5Tokenizer",
    "mt5": "T5Tokenizer",
    "qwen2": "Qwen2Tokenizer",
    "qwen3": "Qwen2Tokenizer",
    "gemma3_text": "GemmaTokenizer",
    "modernbert": GENERIC_TOKENIZER,
    "mistral": GENERIC_TOKENIZER,  # without mistral-common and a tekken.json, which docembed does not read
}
# The families whose own class AutoTokenizer loads whatever class their files name (tokenization_auto.py,
# AutoTokenizer.from_pretrained, where the named class differs from the model_type's): those it lists in
# MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS (qwen2, modernbert), and those whose own class is the generic one
# (ModernBERT's files name PreTrainedTokenizerFast, Mistral's LlamaTokenizer).
OWN_CLASS_WINS = frozenset({"qwen2", "modernbert", "mistral"})
# The class Llama models name, which sets a Metaspace split of its own (not mirrored here: refused). AutoTokenizer
# loads the generic class in its place where tokenizer.json is byte-level, Llama 3's layout under the old name.
LLAMA_TOKENIZER = "LlamaTokenizer"
ALBERT_TOKENIZER = "AlbertTokenizer"  # a SentencePiece split with normalizers of its own (`AlbertNormalizer`)
# tokenizer_config.json's key -> BertSettings' field, and AlbertNormalizer's
BERT_SETTINGS = {
    "do_lower_case": "lowercase",
    "strip_accents": "strip_accents",
    "tokenize_chinese_chars": "handle_chinese_chars",
}
ALBERT_SETTINGS = {"keep_accents": "keep_accents", "do_lower_case": "lowercase"}
# The classes that build their pre-tokenizer with the loader's add_prefix_space, whose defaults are
# `SentencePieceSplit`'s and `ByteLevelSplit`'s: XLMRobertaTokenizer's, CamembertTokenizer's and AlbertTokenizer's
# Metaspace prepends '▁' to every word or to none, RobertaTokenizer's and Qwen2Tokenizer's ByteLevel puts a space
# before the text or not. T5Tokenizer always prepends, whatever it says.
PREFIX_SPACE_CLASSES = frozenset(
    {"XLMRobertaTokenizer", "CamembertTokenizer", "AlbertTokenizer", "RobertaTokenizer", "Qwen2Tokenizer"}
)
# The loader's keys that the classes here read: where tokenizer_args set them, docembed applies them.
SETTINGS = (*BERT_SETTINGS, "add_prefix_space", "keep_accents")


def split(path: Path, config: dict, loader: dict) -> BertSettings | SentencePieceSplit | ByteLevelSplit | None:
    """How the tokenizer class transformers loads for the model directory `path` splits text
    (`TOKENIZER_BUILDS`), from its config.json and what transformers' tokenizer loader is given (`loader`:
    tokenizer_config.json, the Transformer module's tokenizer_args over it); None: as tokenizer.json does."""
    name = name_of(path, config, loader)
    build = TOKENIZER_BUILDS.get(name)
    if build is None:
        why = ""
        if name == LLAMA_TOKENIZER:
            why = (
                " (it splits text with a Metaspace of its own whatever tokenizer.json says; transformers loads the "
                "file as written in its place only where the file is byte-level)"
            )
        raise ModelError(
            f"{path}: tokenizer class {name} is not supported{why}; docembed splits text as transformers' "
            f"{', '.join(TOKENIZER_BUILDS)} do (PreTrainedTokenizerFast: as tokenizer.json says)"
        )
    if build == "bert":
        # strip_accents null: stripped where lower-casing, as the BERT-style classes do.
        return _settings(path, loader, BERT_SETTINGS, BertSettings, frozenset({"strip_accents"}))
    if build == "file":
        return None
    kind = SentencePieceSplit if build == "sentencepiece" else ByteLevelSplit
    made = kind(_add_prefix_space(path, loader, kind.add_prefix_space)) if name in PREFIX_SPACE_CLASSES else kind()
    if name != ALBERT_TOKENIZER:
        return made
    return dataclasses.replace(made, albert=_settings(path, loader, ALBERT_SETTINGS, AlbertNormalizer))


def name_of(path: Path, config: dict, loader: dict) -> str:
    """The tokenizer class transformers 5's AutoTokenizer loads: the family's own where it wins
    (`OWN_CLASS_WINS`) or nothing is named, else the one the loader or config.json names (its "...Fast" name is
    the class; LlamaTokenizer over a byte-level tokenizer.json is the generic class)."""
    model_type = config.get("model_type")
    named = loader.get("tokenizer_class") or config.get("tokenizer_class")
    if named is None or model_type in OWN_CLASS_WINS:
        return AUTO_TOKENIZERS.get(model_type, GENERIC_TOKENIZER)
    named = str(named)
    if named in TOKENIZER_BUILDS:
        return named
    named = named.removesuffix("Fast")
    return GENERIC_TOKENIZER if named == LLAMA_TOKENIZER and _byte_level(path) else named


def _byte_level(path: Path) -> bool:
    """Whether the directory's tokenizer.json holds a ByteLevel part (pre-tokenizer, decoder or post-processor),
    by transformers' own test (TokenizersBackend._tokenizer_json_has_byte_level): the name in the file's text."""
    file = path / "tokenizer.json"
    try:
        return '"ByteLevel"' in file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {file}: {e}") from None


def _settings(path: Path, loader: dict, names: dict[str, str], kind: type, nullable: frozenset = frozenset()):
    """`kind` (BertSettings, AlbertNormalizer) of the loader's settings, `names` (loader key -> field), each
    defaulting as the tokenizer class does; true or false, or null for a field in `nullable`."""
    settings = {}
    for key, field in names.items():
        value = loader.get(key, getattr(kind, field))
        if not isinstance(value, bool) and not (value is None and field in nullable):
            raise ModelError(f"{path}: the tokenizer's {key} {value!r} is not true or false")
        settings[field] = value
    return kind(**settings)


def _add_prefix_space(path: Path, loader: dict, default: bool) -> bool:
    """The loader's add_prefix_space, `default` where it says none. null is false, as XLMRobertaTokenizer and
    Qwen2Tokenizer read it (transformers 5 writes Qwen2Tokenizer's default as null)."""
    value = loader.get("add_prefix_space", default)
    if value is not None and not isinstance(value, bool):
        raise ModelError(f"{path}: the tokenizer's add_prefix_space {value!r} is not true or false")
    return bool(value)
