"""Regenerates tests/fixtures/tokenizer_settings.json: the token ids transformers gives for the bundled
model's tokenizer when its tokenizer_config.json, its tokenizer.json normalizer or sentence-transformers'
tokenizer_args disagree (lower-casing, accents, CJK characters, the tokenizer class).

Each case names its edits (as tests/make_tokenizer_parity.py's do, `write_case`);
tests/pipeline/encode/test_model_dir.py makes the same model directory and checks docembed's ids and
fingerprint against these. Needs transformers (`.venv-bench`); the tests only read the file.

    .venv-bench/bin/python tests/make_tokenizer_fixtures.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from make_tokenizer_parity import BERT_NORMALIZER, DEFAULT, base_dir, transformers_ids, write_case, write_fixture

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "tokenizer_settings.json"
TEXTS = ["Héllo Wörld, ÇA VA? Straße", "東京は日本の首都です", "Crème Brûlée at NAÏVE café", "plain lower text"]


def config(**keys) -> dict:
    """The edit that sets tokenizer_config.json's `keys` (None: removed)."""
    return {"tokenizer_config.json": keys}


# name -> edits of the bundled model's directory
CASES = {
    "as_is": {},
    "config_cased": config(do_lower_case=False),
    "config_silent_file_cased": config(do_lower_case=None)
    | {"tokenizer.json": {"normalizer": BERT_NORMALIZER | {"lowercase": False}}},
    "config_keeps_accents": config(strip_accents=False),
    "config_strips_accents_cased": config(do_lower_case=False, strip_accents=True),
    "config_no_cjk_split": config(tokenize_chinese_chars=False),
    "generic_class_keeps_the_file": config(do_lower_case=False, tokenizer_class="PreTrainedTokenizerFast"),
    "no_class_cased": config(do_lower_case=False, tokenizer_class=None),
    "distilbert_cased": config(do_lower_case=False, tokenizer_class="DistilBertTokenizer"),
    "mpnet_cased": config(do_lower_case=False, tokenizer_class="MPNetTokenizer"),
    "fast_name_cased": config(do_lower_case=False, tokenizer_class="BertTokenizerFast"),
    "tokenizer_args_cased": {"sentence_bert_config.json": {"tokenizer_args": {"do_lower_case": False}}},
}


def main() -> None:
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, edits in CASES.items():
            write_case(base_dir(DEFAULT), Path(tmp) / name, edits)
            cases[name] = {"edits": edits} | transformers_ids(Path(tmp) / name, TEXTS)
    write_fixture(OUT, Path(__file__).name, TEXTS, cases)


if __name__ == "__main__":
    main()
