"""A BERT model saved before tokenizer.json: its tokenizer from vocab.txt (transformers' ids for it are in
tests/fixtures/tokenizer_parity.json, the `*-vocab-only*` cases); here what it refuses, and the model as a whole."""

import json
import shutil

import pytest

from pipeline.encode import model_dir
from pipeline.encode.model_location import default_model_dir
from pipeline.errors import ModelError

from support import FAMILY_FIXTURES


@pytest.fixture
def vocab_only(tmp_path):
    """The bundled model without its tokenizer.json (weights linked, not copied)."""
    path = tmp_path / "model"
    shutil.copytree(default_model_dir(), path, ignore=shutil.ignore_patterns("*.safetensors", "tokenizer.json"))
    (path / "model.safetensors").symlink_to(default_model_dir() / "model.safetensors")
    return path


def edit(path, name, change) -> None:
    file = path / name
    file.write_text(json.dumps(change(json.loads(file.read_text()) if file.exists() else {})))


def test_the_model_embeds_as_with_its_tokenizer_json(vocab_only):
    from pipeline import Embedder

    texts = ["Photosynthesis turns light into chemical energy.", "naïve café, 東京 [SEP] x"]
    ours, theirs = model_dir.resolve(vocab_only), model_dir.resolve(None)
    assert ours.weights_sha256 == theirs.weights_sha256 and ours.fingerprint != theirs.fingerprint  # another file
    assert (Embedder.load(str(vocab_only)).embed(texts) == Embedder.load().embed(texts)).all()


@pytest.mark.parametrize(
    "breakage, message",
    [
        (
            lambda p: (p / "added_tokens.json").write_text('{"[NEW]": 30522}'),
            r"a token added to the vocabulary \('\[NEW\]'\) without a tokenizer.json",
        ),
        (
            lambda p: edit(
                p, "tokenizer_config.json", lambda c: c | {"added_tokens_decoder": {"30522": {"content": "x"}}}
            ),
            r"a token added to the vocabulary \('x'\)",
        ),
        (
            lambda p: edit(p, "tokenizer_config.json", lambda c: c | {"added_tokens_decoder": ["x"]}),
            "added_tokens_decoder is not a mapping of ids to tokens",
        ),
        (
            lambda p: (p / "vocab.txt").write_text((p / "vocab.txt").read_text().replace("[MASK]\n", "[MAASK]\n")),
            r"vocab.txt lacks the special token '\[MASK\]'",
        ),
        (
            lambda p: edit(p, "special_tokens_map.json", lambda c: c | {"cls_token": 101}),
            "cls_token {'content': 101} is not a token",
        ),
        (lambda p: (p / "vocab.txt").unlink(), r"has no tokenizer.json \(nor a vocab.txt for BertTokenizer or Dis"),
    ],
    ids=[
        "added_tokens.json",
        "added_tokens_decoder",
        "decoder-not-a-mapping",
        "special-token-missing",
        "not-a-token",
        "no-vocab",
    ],
)
def test_what_it_does_not_build_is_one_model_error(vocab_only, breakage, message):
    breakage(vocab_only)
    with pytest.raises(ModelError, match=message):
        model_dir.resolve(vocab_only)


def test_other_classes_still_need_a_tokenizer_json(tmp_path):
    """MPNetTokenizer builds <s> $A </s> from vocab.txt: not built here, so refused as before."""
    path = tmp_path / "mpnet"
    shutil.copytree(FAMILY_FIXTURES / "mpnet-base", path)
    (path / "tokenizer.json").unlink()
    (path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    with pytest.raises(ModelError, match="has no tokenizer.json"):
        model_dir.resolve(path)
