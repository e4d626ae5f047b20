"""GTE "new" (`model_type: new` on the hub, `gte` in transformers; gte-*-v1.5, gte-multilingual):
post-norm BERT with RoPE (optionally NTK-scaled), GeGLU, and biases everywhere but the gated
in-projection.

Config: `rope_theta` and `rope_scaling: {"type": "ntk", "factor": f[, "mixed_b": b]}`
(hub), or `rope_parameters` (transformers). Tensors either in the hub's layout,
prefix `new.`: `encoder.layer.N.attention.qkv_proj` (or q/k/v_proj without
`pack_qkv`), `attention.o_proj`, `attn_ln`, `mlp.up_gate_proj` (rows: up, then
gate), `mlp.down_proj`, `mlp_ln`; or in transformers' `GteModel` layout,
`layers.N.self_attn.{q,k,v,o}_proj`, `mlp.{up,gate,down}_proj`,
`post_attention_layernorm`, `post_mlp_layernorm`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import LayerKind, ModelConfig, Params, Rope, UnsupportedModel, bert_dims
from kernels.encoders._values import integer, mapping, number

FAMILY = "gte"
ANCHOR = "embeddings.word_embeddings.weight"

# hub options that change the computation, with the value implemented here.
_HUB_FIXED = {"position_embedding_type": "rope", "layer_norm_type": "layer_norm", "logn_attention_scale": False}


def _rope(config: Mapping[str, Any]) -> Rope:
    params = mapping(config, "rope_parameters") or mapping(config, "rope_scaling")
    default_theta = 160_000.0 if config.get("model_type") == "gte" else 10_000.0  # GteConfig's, NewConfig's
    theta = number(params, "rope_theta", None) or number(config, "rope_theta", None) or default_theta
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return Rope(theta)
    if rope_type == "ntk":
        return Rope(theta, ntk_factor=number(params, "factor"), ntk_mixed_b=number(params, "mixed_b", None))
    raise UnsupportedModel(f"{FAMILY}: RoPE scaling {rope_type!r} is not implemented; known: default, ntk")


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    for key, value in _HUB_FIXED.items():
        if config.get(key, value) != value:
            raise UnsupportedModel(f"{FAMILY}: {key}={config[key]!r} is not implemented (only {value!r})")
    dims = bert_dims(config, FAMILY)
    return ModelConfig(
        family=FAMILY,
        **dims,
        max_tokens=integer(config, "max_position_embeddings", 8192, minimum=1),
        norm_eps=number(config, "layer_norm_eps", 1e-12),
        activation=str(config.get("hidden_act", "gelu")),
        gated_mlp=True,
        norm="post",
        layer_kinds=(LayerKind(rope=_rope(config)),) * dims["num_layers"],
        type_vocab_size=integer(config, "type_vocab_size", 0),
        biases=frozenset({"qkv", "out", "mlp_out", "norm"}),
    )


def read(ck: Checkpoint) -> Params:
    cfg = ck.cfg
    hub = ck.has("encoder.layer.0.attn_ln.weight")

    def layer(i: int) -> dict[str, np.ndarray]:
        if hub:
            p = f"encoder.layer.{i}."
            packed = ck.has(p + "attention.qkv_proj.weight")
            qkv = (
                ck.fused_qkv(p + "attention.qkv_proj")
                if packed
                else ck.attention_in(p + "attention.q_proj", p + "attention.k_proj", p + "attention.v_proj")
            )
            return {
                **qkv,
                **ck.attention_out(p + "attention.o_proj"),
                **ck.norm(p + "attn_ln", "ln1", "LD"),
                **ck.fused_mlp_in(p + "mlp.up_gate_proj", "up", "gate"),
                **ck.mlp_out(p + "mlp.down_proj"),
                **ck.norm(p + "mlp_ln", "ln2", "LD"),
            }
        return ck.jina_layer(i)

    return {
        "embed": ck.embeddings(
            "embeddings.word_embeddings", "embeddings.token_type_embeddings", "embeddings.LayerNorm"
        ),
        "layers": ck.stack([layer(i) for i in range(cfg.num_layers)]),
    }
