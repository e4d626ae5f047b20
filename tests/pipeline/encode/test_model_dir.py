import json
import shutil

import pytest

from pipeline.encode import model_dir, model_location
from pipeline.errors import ModelError

from support import bert_tensor_shapes, measure_in_child, write_zero_safetensors


def test_default_model_is_verified_and_described():
    spec = model_dir.resolve(None)
    assert spec.model_id == model_dir.DEFAULT_MODEL_ID
    assert spec.weights_sha256 == model_dir.DEFAULT_WEIGHTS_SHA256
    assert (spec.pooling, spec.normalize, spec.max_seq_length, spec.dim) == ("mean", True, 256, 384)
    assert len(spec.fingerprint) == 16


def copy_model(tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(model_location.default_model_dir(), dst)
    return dst


def test_bare_checkpoint_mean_pools_without_normalising(tmp_path):
    # A plain Hugging Face BERT directory, no sentence-transformers files.
    path = copy_model(tmp_path)
    for name in ("modules.json", "sentence_bert_config.json"):
        (path / name).unlink()
    shutil.rmtree(path / "1_Pooling")
    spec = model_dir.resolve(str(path))
    assert (spec.pooling, spec.normalize, spec.max_seq_length) == ("mean", False, 512)
    assert spec.fingerprint != model_dir.resolve(None).fingerprint


def test_cls_pooling_is_read_from_the_pooling_config(tmp_path):
    path = copy_model(tmp_path)
    cfg = json.loads((path / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    assert model_dir.resolve(str(path)).pooling == "cls"


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda p: (p / "model.safetensors").unlink(), "has no model.safetensors"),
        (lambda p: (p / "tokenizer.json").unlink(), "has no tokenizer.json"),
        (lambda p: (p / "config.json").write_text("{not json"), "cannot read"),
        (
            lambda p: (p / "config.json").write_text('{"model_type": "gpt2"}'),
            "'gpt2'.*is not supported.*bert, xlm-roberta",
        ),
    ],
)
def test_broken_model_directories_fail_clearly(tmp_path, breakage, message):
    path = copy_model(tmp_path)
    breakage(path)
    with pytest.raises(ModelError, match=message):
        model_dir.resolve(str(path))


def test_corrupt_weights_fail_at_load(tmp_path):
    path = copy_model(tmp_path)
    (path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelError, match="cannot read"):
        model_dir.load_params(model_dir.resolve(str(path)))


def test_missing_directory_and_tampered_default(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="does not exist"):
        model_dir.resolve(str(tmp_path / "nope"))
    tampered = copy_model(tmp_path)
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
