"""NomicBERT (`model_type: nomic_bert`; nomic-embed-text): post-norm BERT with RoPE, SwiGLU and
no linear biases.

Two layouts, for config.json and for tensor names, each read as it comes:
  - hub checkpoints (nomic's contrastors code): config `n_embd`, `n_layer`,
    `n_head`, `n_inner`, `n_positions`, `rotary_emb_base`, ...; tensors
    `emb_ln`, `encoder.layers.N.attn.Wqkv`, `attn.out_proj`, `mlp.fc11` (up),
    `mlp.fc12` (gate), `mlp.fc2`, `norm1`, `norm2`;
  - transformers' `NomicBertModel`: BERT-style config with `rope_parameters`;
    tensors `embeddings.LayerNorm`, `layers.N.self_attn.{q,k,v,o}_proj`,
    `mlp.{up,gate,down}_proj`, `post_attention_layernorm`, `post_mlp_layernorm`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import LayerKind, ModelConfig, Params, Rope, UnsupportedModel, bert_dims
from kernels.encoders._values import integer, mapping, number

FAMILY = "nomic_bert"
ANCHOR = "embeddings.word_embeddings.weight"

# contrastors options that change the computation, with the value implemented here.
_CONTRASTORS_FIXED = {
    "prenorm": False,
    "rotary_emb_fraction": 1.0,
    "rotary_emb_interleaved": False,
    "rotary_scaling_factor": None,
    "rotary_emb_scale_base": None,
    "use_rms_norm": False,
    "parallel_block": False,
    "causal": False,
    # nomic-embed-text-v2-moe's mixture-of-experts MLP in every n-th layer: the dense MLP here has no router.
    "moe_every_n_layers": 0,
}
_CONTRASTORS_ACTIVATIONS = {"swiglu": "silu"}


def _contrastors_config(config: Mapping[str, Any]) -> ModelConfig:
    for key, value in _CONTRASTORS_FIXED.items():
        if config.get(key, value) != value:
            raise UnsupportedModel(f"{FAMILY}: {key}={config[key]!r} is not implemented (only {value!r})")
    activation = config.get("activation_function", "swiglu")
    if activation not in _CONTRASTORS_ACTIVATIONS:
        raise UnsupportedModel(
            f"{FAMILY}: activation_function {activation!r} is not implemented; "
            f"known: {', '.join(_CONTRASTORS_ACTIVATIONS)}"
        )
    # contrastors pads the vocabulary up to a multiple (64 for nomic-embed-text) and so does its table.
    multiple = integer(config, "pad_vocab_size_multiple", 1, minimum=1)
    hidden = integer(config, "n_embd", minimum=1)
    dims = bert_dims(
        {
            "vocab_size": -(-integer(config, "vocab_size", minimum=1) // multiple) * multiple,
            "hidden_size": hidden,
            "num_attention_heads": integer(config, "n_head", minimum=1),
            "num_hidden_layers": integer(config, "n_layer", minimum=1),
            "intermediate_size": integer(config, "n_inner", minimum=1) if config.get("n_inner") else 4 * hidden,
        },
        FAMILY,
    )
    flags = {"qkv": "qkv_proj_bias", "out": "qkv_proj_bias", "mlp_in": "mlp_fc1_bias", "mlp_out": "mlp_fc2_bias"}
    return ModelConfig(
        family=FAMILY,
        **dims,
        max_tokens=integer(config, "n_positions", 2048, minimum=1),
        norm_eps=number(config, "layer_norm_epsilon", 1e-5),
        activation=_CONTRASTORS_ACTIVATIONS[activation],
        gated_mlp=True,
        norm="post",
        layer_kinds=(LayerKind(rope=Rope(number(config, "rotary_emb_base", 10_000.0))),) * dims["num_layers"],
        type_vocab_size=integer(config, "type_vocab_size", 2),
        biases=frozenset({"norm"} | {group for group, flag in flags.items() if config.get(flag, True)}),
    )


def _transformers_config(config: Mapping[str, Any]) -> ModelConfig:
    rope = mapping(config, "rope_parameters")
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default":
        raise UnsupportedModel(f"{FAMILY}: rope_type {rope_type!r} is not implemented")
    theta = number(rope, "rope_theta", number(config, "rope_theta", 1000.0))
    dims = bert_dims(config, FAMILY)
    return ModelConfig(
        family=FAMILY,
        **dims,
        max_tokens=integer(config, "max_position_embeddings", 2048, minimum=1),
        norm_eps=number(config, "layer_norm_eps", 1e-12),
        activation=str(config.get("hidden_act", "silu")),
        gated_mlp=True,
        norm="post",
        layer_kinds=(LayerKind(rope=Rope(theta)),) * dims["num_layers"],
        type_vocab_size=integer(config, "type_vocab_size", 2),
        biases=frozenset({"norm"}),
    )


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    return _contrastors_config(config) if "n_embd" in config else _transformers_config(config)


def read(ck: Checkpoint) -> Params:
    cfg = ck.cfg
    contrastors = ck.has("emb_ln.weight")

    def layer(i: int) -> dict[str, np.ndarray]:
        if contrastors:
            p = f"encoder.layers.{i}."
            return {
                **ck.fused_qkv(p + "attn.Wqkv"),
                **ck.attention_out(p + "attn.out_proj"),
                **ck.norm(p + "norm1", "ln1", "LD"),
                **ck.mlp_in(p + "mlp.fc11", "up"),
                **ck.mlp_in(p + "mlp.fc12", "gate"),
                **ck.mlp_out(p + "mlp.fc2"),
                **ck.norm(p + "norm2", "ln2", "LD"),
            }
        return ck.jina_layer(i)

    embed_norm = "emb_ln" if contrastors else "embeddings.LayerNorm"
    return {
        "embed": ck.embeddings("embeddings.word_embeddings", "embeddings.token_type_embeddings", embed_norm),
        "layers": ck.stack([layer(i) for i in range(cfg.num_layers)]),
    }
