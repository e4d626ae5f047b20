"""ModernBERT (`model_type: modernbert`): pre-norm, GeGLU, no biases by default, RoPE, and
layers that alternate between global attention and a sliding window.

Layer i attends globally with the global RoPE theta, or within a window with
the local theta. config.json says which in one of two layouts:
  - hub checkpoints: `global_attn_every_n_layers` (layer i is global when
    i % n == 0), `global_rope_theta`, `local_rope_theta`;
  - current transformers: `layer_types` ("full_attention" / "sliding_attention")
    and `rope_parameters` keyed by those types.
Both have `local_attention`, the window's total width: a token sees
local_attention // 2 tokens either side (transformers' `sliding_window`).

Tensors as `ModernBertModel` saves them, with or without the `model.` prefix of
`ModernBertForMaskedLM`. Layer 0 has no `attn_norm` (the embeddings are already
normed); its slot in the stacked norm holds ones that the forward pass skips.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import (
    ALL_BIASES,
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    LayerKind,
    ModelConfig,
    Params,
    Rope,
    UnsupportedModel,
    bert_dims,
    layer_types,
    window_or_full,
)
from kernels.encoders._values import integer, mapping, number

FAMILY = "modernbert"
ANCHOR = "embeddings.tok_embeddings.weight"
GLOBAL, LOCAL = FULL_ATTENTION, SLIDING_ATTENTION


def _layer_types(config: Mapping[str, Any], n_layers: int) -> list[str]:
    every = integer(config, "global_attn_every_n_layers", 3, minimum=1)
    return layer_types(config, FAMILY, n_layers, [GLOBAL if i % every == 0 else LOCAL for i in range(n_layers)])


def _rope_thetas(config: Mapping[str, Any]) -> dict[str, float]:
    if config.get("rope_scaling"):
        raise UnsupportedModel(f"{FAMILY}: rope_scaling {config['rope_scaling']} is not implemented")
    if config.get("rope_parameters") is None:
        return {
            GLOBAL: number(config, "global_rope_theta", 160_000.0),
            LOCAL: number(config, "local_rope_theta", 10_000.0),
        }
    by_type = mapping(config, "rope_parameters")
    thetas = {}
    for layer_type, default in ((GLOBAL, 160_000.0), (LOCAL, 10_000.0)):
        params = mapping(by_type, layer_type)
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            raise UnsupportedModel(f"{FAMILY}: rope_type {rope_type!r} for {layer_type} is not implemented")
        thetas[layer_type] = number(params, "rope_theta", default)
    return thetas


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    dims = bert_dims(config, FAMILY)
    thetas = _rope_thetas(config)
    max_tokens = integer(config, "max_position_embeddings", 8192, minimum=1)
    # A window that reaches every position is global attention, with the local theta.
    window = window_or_full(integer(config, "local_attention", 128) // 2, max_tokens)
    kinds = {GLOBAL: LayerKind(None, Rope(thetas[GLOBAL])), LOCAL: LayerKind(window, Rope(thetas[LOCAL]))}
    flags = {
        "qkv": "attention_bias",
        "out": "attention_bias",
        "mlp_in": "mlp_bias",
        "mlp_out": "mlp_bias",
        "norm": "norm_bias",
    }
    return ModelConfig(
        family=FAMILY,
        **dims,
        max_tokens=max_tokens,
        norm_eps=number(config, "norm_eps", 1e-5),
        activation=str(config.get("hidden_activation", "gelu")),
        gated_mlp=True,
        norm="pre",
        layer_kinds=tuple(kinds[t] for t in _layer_types(config, dims["num_layers"])),
        biases=frozenset(group for group in ALL_BIASES if config.get(flags[group], False)),
    )


def read(ck: Checkpoint) -> Params:
    cfg = ck.cfg

    def layer(i: int) -> dict[str, np.ndarray]:
        p = f"layers.{i}."
        if i == 0:  # nn.Identity: placeholders of the right shape, never applied
            attn_norm = {"ln1_scale_LD": np.ones(cfg.hidden_size, np.float32)}
            if "norm" in cfg.biases:
                attn_norm["ln1_bias_LD"] = np.zeros(cfg.hidden_size, np.float32)
        else:
            attn_norm = ck.norm(p + "attn_norm", "ln1", "LD")
        return {
            **attn_norm,
            **ck.fused_qkv(p + "attn.Wqkv"),
            **ck.attention_out(p + "attn.Wo"),
            **ck.norm(p + "mlp_norm", "ln2", "LD"),
            # Wi(x).chunk(2): the first half goes through the activation.
            **ck.fused_mlp_in(p + "mlp.Wi", "gate", "up"),
            **ck.mlp_out(p + "mlp.Wo"),
        }

    return {
        "embed": ck.embeddings("embeddings.tok_embeddings", None, "embeddings.norm"),
        "layers": ck.stack([layer(i) for i in range(cfg.num_layers)]),
        "final": ck.norm("final_norm", "ln", "D"),
    }
