"""Gemma3 (`model_type: gemma3_text`: EmbeddingGemma-300m, and Gemma3TextModel decoders).

As transformers' Gemma3TextModel: token embeddings times sqrt(hidden_size) (`embed_scale`, rounded to the
embeddings' dtype first), no embedding norm; each layer a "sandwich",
`x + rmsnorm(attention(rmsnorm(x)))`, then `x + rmsnorm(mlp(rmsnorm(x)))` (input_layernorm,
post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm); a final RMSNorm. Gemma's
RMSNorm scales by (1 + weight), in float32: the 1 is added here as the weights are read (float32, as
transformers adds it), so that the shared RMSNorm (x / rms(x) * scale) runs it unchanged.

Attention is grouped-query (`num_key_value_heads`, each K/V head projected once for its query heads), its heads
`head_dim` wide, q and k RMS-normed per head (`q_norm`, `k_norm`, Gemma's 1 + weight too) before RoPE, the
scores scaled by `query_pre_attn_scalar ** -0.5`, not head_dim's. Layers are `full_attention` or
`sliding_attention` (`layer_types`, or every `sliding_window_pattern`-th layer full, as Gemma3TextConfig
derives them), each type with its RoPE theta (`rope_parameters` keyed by layer type, or `rope_theta` for the
full layers and `rope_local_base_freq` for the sliding ones). With `use_bidirectional_attention` (EmbeddingGemma)
a token sees its whole sequence, and a sliding layer the tokens at |t - s| < sliding_window // 2 + 1
(Gemma3TextConfig's halved window, an exclusive bound): `LayerKind.window` sliding_window // 2. Without it,
attention is causal and a sliding layer sees s > t - sliding_window: window sliding_window - 1. The MLP is
GeGLU: down(gelu_tanh(gate(x)) * up(x)). No biases (`attention_bias` true is refused), no logit softcapping
of the scores (`attn_logit_softcapping` refused; `final_logit_softcapping` is the LM head's, never run).

sentence-transformers runs EmbeddingGemma as Transformer, mean Pooling, Dense 768 -> 3072 -> 768 (no bias,
Identity), Normalize, with prompts ("title: none | text: ", ...): read as any model directory's.

Tensors as transformers saves Gemma3TextModel (`layers.N.self_attn.q_proj.weight`, `norm.weight`), or under
a prefix (Gemma3ForCausalLM's `model.`, a multimodal checkpoint's `language_model.`), whose `lm_head` is never
read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    LayerKind,
    ModelConfig,
    Params,
    Rope,
    UnsupportedModel,
    layer_types,
    window_or_full,
)
from kernels.encoders._values import integer, mapping, number

FAMILY = "gemma3"
ANCHOR = "embed_tokens.weight"
# Gemma3TextConfig's defaults, for a config.json that leaves a key out.
DEFAULT_THETAS = {FULL_ATTENTION: 1_000_000.0, SLIDING_ATTENTION: 10_000.0}
LEGACY_THETA_KEYS = {FULL_ATTENTION: "rope_theta", SLIDING_ATTENTION: "rope_local_base_freq"}


def _ropes(config: Mapping[str, Any]) -> dict[str, Rope]:
    """Each layer type's RoPE, as Gemma3TextConfig reads it: `rope_parameters` keyed by layer type (transformers
    5), else `rope_theta` and `rope_local_base_freq`, with `rope_scaling` over the full layers'; the default
    type only."""
    by_type = mapping(config, "rope_parameters")
    ropes = {}
    for layer_type in (FULL_ATTENTION, SLIDING_ATTENTION):
        params = {**mapping(by_type, layer_type)}
        if layer_type == FULL_ATTENTION:
            params |= mapping(config, "rope_scaling")
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            raise UnsupportedModel(
                f"{FAMILY}: RoPE scaling {rope_type!r} ({layer_type}) is not implemented; known: default"
            )
        theta = number(config, LEGACY_THETA_KEYS[layer_type], DEFAULT_THETAS[layer_type])
        ropes[layer_type] = Rope(number(params, "rope_theta", theta))
    return ropes


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    if config.get("attention_bias", False):
        raise UnsupportedModel(f"{FAMILY}: attention_bias true is not implemented (only false, as Gemma3's)")
    if config.get("attn_logit_softcapping") is not None:
        raise UnsupportedModel(
            f"{FAMILY}: attn_logit_softcapping {config['attn_logit_softcapping']!r} is not implemented (only null)"
        )
    layers = integer(config, "num_hidden_layers", 26, minimum=1)
    hidden = integer(config, "hidden_size", 2304, minimum=1)
    max_tokens = integer(config, "max_position_embeddings", 131_072, minimum=1)
    bidirectional = bool(config.get("use_bidirectional_attention"))
    sliding_window = integer(config, "sliding_window", 4096, minimum=1)
    window = window_or_full(sliding_window // 2 if bidirectional else sliding_window - 1, max_tokens)
    ropes = _ropes(config)
    kinds = {
        FULL_ATTENTION: LayerKind(None, ropes[FULL_ATTENTION]),
        SLIDING_ATTENTION: LayerKind(window, ropes[SLIDING_ATTENTION]),
    }
    pattern = integer(config, "sliding_window_pattern", 6, minimum=1)
    derived = [SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION for i in range(layers)]
    return ModelConfig(
        family=FAMILY,
        vocab_size=integer(config, "vocab_size", 262_208, minimum=1),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=integer(config, "num_attention_heads", 8, minimum=1),
        head_dim=integer(config, "head_dim", 256, minimum=2),
        intermediate_size=integer(config, "intermediate_size", 9216, minimum=1),
        max_tokens=max_tokens,
        norm_eps=number(config, "rms_norm_eps", 1e-6),
        activation=str(config.get("hidden_activation", "gelu_pytorch_tanh")),
        gated_mlp=True,
        norm="sandwich",
        layer_kinds=tuple(kinds[t] for t in layer_types(config, FAMILY, layers, derived)),
        biases=frozenset(),
        norm_kind="rms",
        embedding_norm=False,
        learned_positions=False,
        attention_scale=number(config, "query_pre_attn_scalar", 256) ** -0.5,
        causal=not bidirectional,
        num_kv_heads=integer(config, "num_key_value_heads", 4, minimum=1),
        qk_norm=True,
        embed_scale=hidden**0.5,
    )


def _one_plus(group: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Gemma's RMSNorm weights (every `ln*` parameter) as the scale they apply: 1 + weight, in float32 as
    transformers adds them; the rest unchanged."""
    return {name: np.float32(1) + w if name.startswith("ln") else w for name, w in group.items()}


def read(ck: Checkpoint) -> Params:
    """Gemma3TextModel's tensors (under any prefix) -> the shared pytree."""

    def layer(i: int) -> dict[str, np.ndarray]:
        p = f"layers.{i}."
        return _one_plus(
            {
                **ck.norm(p + "input_layernorm", "ln1", "LD"),
                **ck.norm(p + "post_attention_layernorm", "ln_attn_out", "LD"),
                **ck.norm(p + "pre_feedforward_layernorm", "ln2", "LD"),
                **ck.norm(p + "post_feedforward_layernorm", "ln_mlp_out", "LD"),
                **ck.decoder_layer(i),
            }
        )

    return {
        "embed": ck.embeddings("embed_tokens", None, None),
        "layers": ck.stack([layer(i) for i in range(ck.cfg.num_layers)]),
        "final": _one_plus(ck.norm("norm", "ln", "D")),
    }
