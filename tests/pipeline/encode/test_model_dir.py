import json
import os
import shutil
import subprocess
import sys

import pytest

from pipeline import Embedder
from pipeline.encode import model_dir, model_location
from pipeline.errors import ModelError
from pipeline.text.tokenizer import Tokenizer

from make_tokenizer_parity import write_case
from support import (
    FAMILY_FIXTURES,
    REPO,
    bert_tensor_shapes,
    copy_default_model,
    edit_json,
    measure_in_child,
    write_zero_safetensors,
)


def test_default_model_is_verified_and_described():
    spec = model_dir.resolve(None)
    assert spec.model_id == model_dir.DEFAULT_MODEL_ID
    assert spec.weights_sha256 == model_dir.DEFAULT_WEIGHTS_SHA256
    assert (spec.pooling, spec.normalize, spec.max_seq_length, spec.dim) == ("mean", True, 256, 384)
    assert len(spec.fingerprint) == 16


def test_the_default_models_fingerprint_stays_what_its_outputs_recorded():
    """A change to how the fingerprint is spelled (a new setting, the pooling's modes) would refuse to resume,
    or to append to, every output the model made before: a new setting appears only when it changes something.
    (It last changed on 2026-12-06, when the architecture that config.json describes joined it.)"""
    assert model_dir.resolve(None).fingerprint == "eab29a9a5b29d07d"


# Each family fixture's fingerprint as of 2026-12-06: the architecture's digest is of kernels' ModelConfig, so a
# refactor there (a field renamed, a default changed, a float derived otherwise) would change every model's.
FAMILY_FINGERPRINTS = {
    "albert-shared-groups": "2101a95750d700ad",
    "bert-mlm-prefix": "ba93ee7e5ed1dd4a",
    "bert-pooler": "281659e83dafaab6",
    "bert-pooling-modes": "e3cae1b0b135686b",
    "camembert-mlm-prefix": "18a5af1aaaf8e92f",
    "distilbert-dense": "11cad0f7bc2ba7d9",
    "distilbert-dense-residual": "640b82f3492ca0dc",
    "distilbert-mlm-prefix": "e3e9fb46a323ae00",
    "gemma3-embedding": "a018f31d05a28264",
    "gte-new-ntk": "50bbf23efb98915d",
    "gte-transformers": "a7f66b9b51129775",
    "llama-embedding": "604c452d191dc644",
    "mistral-embedding": "aef9c8a06e106f99",
    "modernbert-hub-config": "813857738961f69b",
    "modernbert-layer-types": "93d9438122bd5a2c",
    "mpnet-base": "ffcc399fc1c67799",
    "mpnet-mlm-prefix": "dfbf462cfc264536",
    "mt5-encoder": "5486527854f98d56",
    "nomic-contrastors": "6840023837ea77e5",
    "nomic-transformers": "2384da6d54ec4cff",
    "qwen2-embedding": "96c3c9852e4bb4b0",
    "qwen3-embedding": "e9b05cddbb0e013a",
    "t5-encoder-st": "84e6d20827589ec2",
    "t5-v11-model": "aedca3d75a993c94",
    "xlm-roberta-mlm-prefix": "742d9db85b837204",
    "xlm-roberta-sharded": "5100bf9dd7382305",
}


def test_every_family_fixtures_fingerprint_stays_what_its_outputs_recorded():
    fixtures = sorted(p.name for p in FAMILY_FIXTURES.iterdir() if p.is_dir())
    assert {name: model_dir.resolve(str(FAMILY_FIXTURES / name)).fingerprint for name in fixtures} == (
        FAMILY_FINGERPRINTS
    )


def test_config_json_is_in_the_fingerprint_as_the_encoder_reads_it(tmp_path):
    """The weights fix the shapes, not what config.json says of the rest: another epsilon, a causal decoder made
    bidirectional (gte-Qwen2's `is_causal`) are other numbers. How config.json is spelled is not."""
    plain = model_dir.resolve(None).fingerprint
    path = copy_default_model(tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "transformers_version": "9.9"}, indent=7))
    assert model_dir.resolve(str(path)).fingerprint == plain
    edit_json(path, "config.json", lambda c: {**c, "layer_norm_eps": 1e-5})
    assert model_dir.resolve(str(path)).fingerprint != plain
    decoder = tmp_path / "qwen3"
    shutil.copytree(FAMILY_FIXTURES / "qwen3-embedding", decoder)
    causal = model_dir.resolve(str(decoder)).fingerprint
    edit_json(decoder, "config.json", lambda c: {**c, "is_causal": False})
    assert model_dir.resolve(str(decoder)).fingerprint != causal


def test_the_architectures_digest_does_not_follow_the_processes_string_hashing():
    """A set's order follows PYTHONHASHSEED, which every Ray worker draws anew: the digest sorts it."""
    model = FAMILY_FIXTURES / "llama-embedding"  # its biases are a set of four
    source = f"from pipeline.encode import model_dir; print(model_dir.resolve({str(model)!r}).fingerprint)"
    digests = {
        subprocess.run(
            [sys.executable, "-c", source],
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1


def test_do_lower_case_lower_cases_before_the_tokenizer_with_offsets_into_the_text(tmp_path):
    # The XLM-RoBERTa fixture's Unigram tokenizer is cased: 'Hello' is '▁', 'H', 'el', ... and 'hello' '▁h', 'el', ...
    path = tmp_path / "xlmr"
    shutil.copytree(FAMILY_FIXTURES / "xlm-roberta-mlm-prefix", path)
    plain = model_dir.tokenizer(path)
    text = "Hello World, ÉCOLE"
    # The tokenizer's own do_lower_case is a BERT-style tokenizer's setting: transformers ignores it here.
    edit_json(path, "sentence_bert_config.json", lambda c: {**c, "tokenizer_args": {"do_lower_case": True}})
    assert model_dir.tokenizer(path).encode_content([text]) == plain.encode_content([text])
    edit_json(path, "sentence_bert_config.json", lambda c: {**c, "do_lower_case": True})
    lowered = model_dir.tokenizer(path)
    [got], [want], [cased] = (
        lowered.encode_content([text]),
        plain.encode_content([text.lower()]),
        plain.encode_content([text]),
    )
    assert (got.ids, got.offsets) == (want.ids, want.offsets) and got.ids != cased.ids
    assert model_dir.resolve(str(path)).lowercase
    assert Embedder.load(str(path)).embed([text]) == pytest.approx(
        Embedder.load(str(FAMILY_FIXTURES / "xlm-roberta-mlm-prefix")).embed([text.lower()])
    )


TOKENIZER_SETTINGS = json.loads((REPO / "tests" / "fixtures" / "tokenizer_settings.json").read_text())


def tokenizer_case(tmp_path, case: str):
    """The bundled model's directory with the edits of one case of tokenizer_settings.json."""
    made = TOKENIZER_SETTINGS["cases"][case]
    path, model = tmp_path / case, model_location.default_model_dir()
    write_case(model, path, made["edits"])
    (path / "model.safetensors").symlink_to(model / "model.safetensors")
    return path


@pytest.mark.parametrize("case", TOKENIZER_SETTINGS["cases"])
def test_tokenizer_settings_apply_as_transformers_applies_them(tmp_path, case):
    """tokenizer_config.json (and tokenizer_args) over tokenizer.json's BertNormalizer: the ids transformers
    gives (tests/make_tokenizer_fixtures.py), and a fingerprint that differs from the unedited model's exactly
    where the ids do."""
    tok = model_dir.tokenizer(path := tokenizer_case(tmp_path, case))
    texts, cases = TOKENIZER_SETTINGS["texts"], TOKENIZER_SETTINGS["cases"]
    assert [tok.prefix_ids + c.ids + tok.suffix_ids for c in tok.encode_content(texts)] == cases[case]["ids"]
    if "tokenizer.json" not in cases[case]["edits"]:  # tokenizer.json as in the unedited case: settings differ
        unedited = model_dir.resolve(str(tokenizer_case(tmp_path / "as_is", "as_is"))).fingerprint
        assert (model_dir.resolve(str(path)).fingerprint == unedited) == (cases[case]["ids"] == cases["as_is"]["ids"])


def test_a_truncated_tokenizer_file_is_one_model_error(tmp_path):
    path = copy_default_model(tmp_path)
    (path / "tokenizer.json").write_bytes((path / "tokenizer.json").read_bytes()[:1000])
    with pytest.raises(ModelError, match="cannot read .*tokenizer.json: EOF"):
        Tokenizer(path / "tokenizer.json")


@pytest.mark.parametrize(
    "breakage, message",
    [
        (
            lambda p: (p / "model.safetensors").unlink(),
            "has no weights: neither model.safetensors nor pytorch_model.bin, nor a sharded copy of either",
        ),
        # Without tokenizer.json a BERT is built from vocab.txt (pipeline.text.wordpiece_vocab): without both, none.
        (
            lambda p: [(p / name).unlink() for name in ("tokenizer.json", "vocab.txt")],
            r"has no tokenizer.json \(nor a vocab.txt for BertTokenizer or DistilBertTokenizer\)",
        ),
        (lambda p: (p / "config.json").write_text("{not json"), "cannot read"),
        (
            lambda p: (p / "config.json").write_text('{"model_type": "gpt2"}'),
            "'gpt2'.*is not supported.*bert, distilbert, xlm-roberta",
        ),
        # Files of the wrong shape, or cut short, each one line naming the file.
        (lambda p: edit_json(p, "config.json", lambda c: [c]), "config.json holds a JSON list, not an object"),
    ],
)
def test_broken_model_directories_fail_clearly(tmp_path, breakage, message):
    path = copy_default_model(tmp_path)
    breakage(path)
    with pytest.raises(ModelError, match=message):
        model_dir.resolve(str(path))


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin"])
def test_corrupt_weights_fail_at_load(tmp_path, name):
    """Either kind of weights file (a torch pickle: pipeline.encode.torch_pickle), the other kind's bytes too."""
    path = copy_default_model(tmp_path)
    (path / "model.safetensors").rename(path / name)
    spec = model_dir.resolve(str(path))
    (path / name).write_bytes(b"\x00" * 64)
    for load in (model_dir.check_weights, model_dir.load_params):
        with pytest.raises(ModelError, match=f"cannot read .*{name}"):
            load(spec)


def test_missing_directory_and_tampered_default(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="does not exist"):
        model_dir.resolve(str(tmp_path / "nope"))
    with pytest.raises(ModelError, match="an empty string"):  # it named the current directory
        model_dir.resolve("")
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(ModelError, match="model directory .*model.safetensors is a file"):
        model_dir.resolve(str(tmp_path / "model.safetensors"))
    tampered = copy_default_model(tmp_path)
    (tampered / "model.safetensors").write_bytes(b"tampered")
    monkeypatch.setattr(model_location, "default_model_dir", lambda: tampered)
    with pytest.raises(ModelError, match="expected 53aa5117"):
        model_dir.resolve(None)


_CHECK_WEIGHTS = """
from pipeline.encode import model_dir
spec = model_dir.resolve(sys.argv[1])
measured(lambda: model_dir.check_weights(spec))
"""


def test_checking_the_weights_holds_nothing_of_their_size(tmp_path):
    """A BERT-base checkpoint (440 MB of float32 zeros, written sparse): in a fresh process, the driver's
    check grows the peak RSS by less than a tenth of that. Stacking the layers, as a load does, takes 340 MB."""
    config = {
        "model_type": "bert",
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
    }
    path = tmp_path / "bert-base"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    shutil.copy(model_location.default_model_dir() / "tokenizer.json", path)
    weights_bytes = write_zero_safetensors(path / "model.safetensors", bert_tensor_shapes(config))
    child = measure_in_child(_CHECK_WEIGHTS, str(path), timeout=300)
    growth = child["peak"] - child["rss_before"]
    assert weights_bytes > 4e8
    assert growth < weights_bytes / 10, (
        f"peak RSS grew {growth / 1e6:.0f} MB for {weights_bytes / 1e6:.0f} MB of weights"
    )
