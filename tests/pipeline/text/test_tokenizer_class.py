"""The tokenizer class docembed takes transformers 5's AutoTokenizer to load, and what it refuses; the ids each
class gives are tests/pipeline/text/test_tokenizer_parity.py's."""

import pytest

from pipeline.errors import ModelError
from pipeline.text import tokenizer_class

from support import FAMILY_FIXTURES


def test_a_llama_tokenizer_over_a_sentencepiece_style_file_is_refused_saying_why():
    """LlamaTokenizer, named by a Llama model, sets a Metaspace split of its own whatever tokenizer.json says;
    docembed does not mirror it, so the model is refused rather than tokenised otherwise than
    sentence-transformers does. (Over a byte-level file AutoTokenizer loads the generic class, and a Mistral
    model naming it loads its own, the generic one: both are cases of tests/make_tokenizer_parity.py.)"""
    path = FAMILY_FIXTURES / "llama-embedding"  # tokenizer.json: SentencePiece-style, '▁' for spaces
    with pytest.raises(
        ModelError,
        match=r"tokenizer class LlamaTokenizer is not supported \(it splits text with a Metaspace of its own "
        r"whatever tokenizer.json says; .* only where the file is byte-level\); .* BertTokenizer, ",
    ):
        tokenizer_class.split(path, {"model_type": "llama"}, {"tokenizer_class": "LlamaTokenizerFast"})


@pytest.mark.parametrize(
    "model_type, setting",
    [
        ("bert", {"do_lower_case": "yes"}),
        ("xlm-roberta", {"add_prefix_space": "yes"}),
        ("qwen2", {"add_prefix_space": 1}),
    ],
)
def test_a_tokenizer_setting_that_is_not_true_or_false_is_refused(model_type, setting):
    path = FAMILY_FIXTURES / "bert-pooler"
    ((key, value),) = setting.items()
    with pytest.raises(ModelError, match=rf"the tokenizer's {key} {value!r} is not true or false"):
        tokenizer_class.split(path, {"model_type": model_type}, setting)
