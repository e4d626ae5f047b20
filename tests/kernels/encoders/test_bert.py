"""The JAX BERT forward pass against a float64 numpy transcription of Hugging Face's BertModel.

A small random checkpoint in Hugging Face naming (with the `bert.` prefix some
checkpoints carry, and a pooler that must be ignored) goes through the same
loader as real models, so any BERT-architecture checkpoint is covered, not only
the default's shapes.
"""

import json
import math

import numpy as np
import pytest
from safetensors.numpy import save_file

from kernels import encoders
from pipeline.encode import model_dir

from support import FAMILY_FIXTURES

CONFIG = {
    "model_type": "bert",
    "vocab_size": 97,
    "hidden_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 80,
    "max_position_embeddings": 40,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
}


def random_checkpoint(rng, cfg=CONFIG) -> dict[str, np.ndarray]:
    D, F = cfg["hidden_size"], cfg["intermediate_size"]

    def w(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    t = {
        "bert.embeddings.word_embeddings.weight": w(cfg["vocab_size"], D),
        "bert.embeddings.position_embeddings.weight": w(cfg["max_position_embeddings"], D),
        "bert.embeddings.token_type_embeddings.weight": w(cfg["type_vocab_size"], D),
        "bert.embeddings.LayerNorm.weight": 1 + w(D),
        "bert.embeddings.LayerNorm.bias": w(D),
        "bert.pooler.dense.weight": w(D, D),
        "bert.pooler.dense.bias": w(D),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            t[p + name + ".weight"], t[p + name + ".bias"] = w(D, D), w(D)
        t[p + "intermediate.dense.weight"], t[p + "intermediate.dense.bias"] = w(F, D), w(F)
        t[p + "output.dense.weight"], t[p + "output.dense.bias"] = w(D, F), w(D)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + ln + ".weight"], t[p + ln + ".bias"] = 1 + w(D), w(D)
    return t


erf = np.vectorize(math.erf)
# transformers' activations.py, by hidden_act: each its own formula, though several share a kernel here.
NUMPY_ACTIVATIONS = {
    "gelu": lambda h: 0.5 * h * (1 + erf(h / math.sqrt(2))),
    "gelu_python": lambda h: h * 0.5 * (1.0 + erf(h / math.sqrt(2.0))),
    "gelu_fast": lambda h: 0.5 * h * (1.0 + np.tanh(h * 0.7978845608 * (1.0 + 0.044715 * h * h))),
    "quick_gelu": lambda h: h / (1 + np.exp(-1.702 * h)),
}


def numpy_bert(t, cfg, ids, length):
    """Hugging Face BertModel's forward for one unpadded sequence, in float64."""
    t = {k.removeprefix("bert."): v.astype(np.float64) for k, v in t.items()}
    N = cfg["num_attention_heads"]
    H = cfg["hidden_size"] // N

    def ln(x, name):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + cfg["layer_norm_eps"]) * t[name + ".weight"] + t[name + ".bias"]

    def linear(x, name):
        return x @ t[name + ".weight"].T + t[name + ".bias"]

    ids = ids[:length]
    x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:length]
    x = ln(x + t["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (linear(x, p + f"attention.self.{n}").reshape(length, N, H) for n in ("query", "key", "value"))
        s = np.einsum("tnh,snh->nts", q, k) / math.sqrt(H)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = np.einsum("nts,snh->tnh", a, v).reshape(length, N * H)
        x = ln(x + linear(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        h = NUMPY_ACTIVATIONS[cfg["hidden_act"]](h)
        x = ln(x + linear(h, p + "output.dense"), p + "output.LayerNorm")
    return x


def write_checkpoint(path, tensors, cfg=CONFIG):
    path.mkdir()
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "tokenizer.json").write_text((FAMILY_FIXTURES / "bert-pooler" / "tokenizer.json").read_text())
    return path


def assert_forward_matches_numpy(path, tensors, cfg, rng, impl="reference"):
    spec = model_dir.resolve(str(path))
    assert (spec.arch.family, spec.pooling, spec.normalize, spec.max_seq_length) == ("bert", "mean", False, 40)
    model_dir.check_weights(spec)  # the driver's check reads the names as the load does
    params = model_dir.load_params(spec)
    lengths = np.array([40, 17, 1], np.int32)
    ids = rng.integers(0, cfg["vocab_size"], size=(3, 40)).astype(np.int32)
    positions = np.broadcast_to(np.arange(40, dtype=np.int32), ids.shape)
    segments = (positions < lengths[:, None]).astype(np.int32)
    hidden = np.asarray(encoders.forward(params, ids, segments, positions, spec.arch, attention_impl=impl))
    for row, n in enumerate(lengths):
        expected = numpy_bert(tensors, cfg, ids[row], n)
        np.testing.assert_allclose(hidden[row, :n], expected, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("impl", ["reference", "blockwise"])
def test_forward_matches_float64_numpy_on_any_bert_shape(tmp_path, impl):
    rng = np.random.default_rng()
    tensors = random_checkpoint(rng)
    assert_forward_matches_numpy(write_checkpoint(tmp_path / "tiny-bert", tensors), tensors, CONFIG, rng, impl)


@pytest.mark.parametrize("hidden_act", ["gelu_fast", "gelu_python", "quick_gelu"])
def test_every_hidden_act_runs_transformers_formula(tmp_path, hidden_act):
    rng = np.random.default_rng()
    tensors, cfg = random_checkpoint(rng), CONFIG | {"hidden_act": hidden_act}
    assert_forward_matches_numpy(write_checkpoint(tmp_path / "tiny-bert", tensors, cfg), tensors, cfg, rng)


def test_layer_norm_tensors_named_gamma_and_beta_are_its_weight_and_bias(tmp_path):
    """Old checkpoints converted from TensorFlow name them so; transformers renames them as it loads."""
    rng = np.random.default_rng()
    tensors = random_checkpoint(rng)
    legacy = {
        name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): value
        for name, value in tensors.items()
    }
    assert "bert.embeddings.LayerNorm.gamma" in legacy
    assert_forward_matches_numpy(write_checkpoint(tmp_path / "tiny-bert", legacy), tensors, CONFIG, rng)


def test_unsupported_configs_are_refused():
    with pytest.raises(encoders.UnsupportedModel, match="hidden_act"):
        encoders.config_from_hf({**CONFIG, "hidden_act": "mish"})
    with pytest.raises(encoders.UnsupportedModel, match="divisible"):
        encoders.config_from_hf({**CONFIG, "num_attention_heads": 5})
    with pytest.raises(encoders.UnsupportedModel, match="position_embedding_type"):
        encoders.config_from_hf({**CONFIG, "position_embedding_type": "relative_key"})
