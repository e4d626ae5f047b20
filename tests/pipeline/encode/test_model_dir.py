import json
import shutil

import pytest

from pipeline.encode import model_dir
from pipeline.errors import ModelError


def test_default_model_is_verified_and_described():
    spec = model_dir.resolve(None)
    assert spec.model_id == model_dir.DEFAULT_MODEL_ID
    assert spec.weights_sha256 == model_dir.DEFAULT_WEIGHTS_SHA256
    assert (spec.pooling, spec.normalize, spec.max_seq_length, spec.dim) == ("mean", True, 256, 384)
    assert len(spec.fingerprint) == 16


def copy_model(tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(model_dir.default_model_dir(), dst)
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
    monkeypatch.setattr(model_dir, "default_model_dir", lambda: tampered)
    with pytest.raises(ModelError, match="expected 53aa5117"):
        model_dir.resolve(None)
