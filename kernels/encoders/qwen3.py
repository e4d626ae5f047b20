"""Qwen3 (`model_type: qwen3`: Qwen3-Embedding-0.6B/4B/8B): a decoder-only transformer run as an encoder.

As transformers' Qwen3Model: token embeddings with neither scaling nor norm; each layer
`x + attention(rmsnorm(x))`, then `x + mlp(rmsnorm(x))`; a final RMSNorm (x / rms(x) * weight in float32,
epsilon `rms_norm_eps`). The attention is causal (a token sees the earlier tokens of its own sequence),
grouped-query (`num_key_value_heads` K/V heads, each shared by num_heads / num_kv_heads query heads: the
reader repeats them, `Checkpoint._repeat_heads`), its heads `head_dim` wide whatever hidden_size /
num_attention_heads is, and q and k are RMS-normed per head over head_dim (`q_norm`, `k_norm`) before RoPE
(rotate-half, theta `rope_parameters.rope_theta` or `rope_theta`). The MLP is SwiGLU: down(act(gate(x)) *
up(x)). No biases (`attention_bias` true is refused), no sliding window (a layer that would slide is refused),
no RoPE scaling but the default.

sentence-transformers pools Qwen3-Embedding by its last token, the `<|endoftext|>` the tokenizer's
post-processor appends, then normalises: `pool`'s "lasttoken", per packed sequence, serves it.

Tensors as transformers saves Qwen3Model (`layers.N.self_attn.q_proj.weight`, `norm.weight`), or with the
`model.` prefix of Qwen3ForCausalLM, whose `lm_head` is never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import LayerKind, ModelConfig, Params, Rope, UnsupportedModel
from kernels.encoders._values import integer, mapping, number

FAMILY = "qwen3"
ANCHOR = "embed_tokens.weight"
# Qwen3Config's defaults, for a config.json that leaves a key out.
DEFAULT_THETA = 10_000.0
DEFAULT_HEAD_DIM = 128
DEFAULT_POSITIONS = 32_768


def _rope(config: Mapping[str, Any]) -> Rope:
    """`rope_parameters` (transformers 5) or `rope_theta` with `rope_scaling` (older files): the default
    type only."""
    params = mapping(config, "rope_parameters") or mapping(config, "rope_scaling")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise UnsupportedModel(f"{FAMILY}: RoPE scaling {rope_type!r} is not implemented; known: default")
    return Rope(number(params, "rope_theta", None) or number(config, "rope_theta", DEFAULT_THETA))


def _check_full_attention(config: Mapping[str, Any], layers: int) -> None:
    """Refuses a layer that would attend in a sliding window: `layer_types`, or as Qwen3Config derives them,
    the layers from `max_window_layers` on where `use_sliding_window`."""
    types = config.get("layer_types")
    if types is None and config.get("use_sliding_window"):
        start = integer(config, "max_window_layers", 28)
        types = ["sliding_attention" if i >= start else "full_attention" for i in range(layers)]
    sliding = [i for i, kind in enumerate(types or []) if kind != "full_attention"]
    if sliding:
        raise UnsupportedModel(
            f"{FAMILY}: sliding window attention (layers {sliding[0]}..{sliding[-1]}) is not implemented; "
            "only full attention (use_sliding_window false)"
        )


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    if config.get("attention_bias", False):
        raise UnsupportedModel(f"{FAMILY}: attention_bias true is not implemented (only false, as Qwen3's)")
    layers = integer(config, "num_hidden_layers", minimum=1)
    _check_full_attention(config, layers)
    heads = integer(config, "num_attention_heads", minimum=1)
    # null, as Qwen3Config reads it: every head its own K/V.
    kv_heads = heads if config.get("num_key_value_heads") is None else integer(config, "num_key_value_heads", minimum=1)
    return ModelConfig(
        family=FAMILY,
        vocab_size=integer(config, "vocab_size", minimum=1),
        hidden_size=integer(config, "hidden_size", minimum=1),
        num_layers=layers,
        num_heads=heads,
        head_dim=integer(config, "head_dim", DEFAULT_HEAD_DIM, minimum=2),
        intermediate_size=integer(config, "intermediate_size", minimum=1),
        max_tokens=integer(config, "max_position_embeddings", DEFAULT_POSITIONS, minimum=1),
        norm_eps=number(config, "rms_norm_eps", 1e-6),
        activation=str(config.get("hidden_act", "silu")),
        gated_mlp=True,
        norm="pre",
        layer_kinds=(LayerKind(rope=_rope(config)),) * layers,
        biases=frozenset(),
        norm_kind="rms",
        embedding_norm=False,
        learned_positions=False,
        causal=True,
        num_kv_heads=kv_heads,
        qk_norm=True,
    )


def read(ck: Checkpoint) -> Params:
    """Qwen3Model's (or Qwen3ForCausalLM's `model.`) tensors -> the shared pytree."""

    def layer(i: int) -> dict[str, np.ndarray]:
        p = f"layers.{i}."
        return {
            **ck.norm(p + "input_layernorm", "ln1", "LD"),
            **ck.decoder_layer(i),
            **ck.norm(p + "post_attention_layernorm", "ln2", "LD"),
        }

    return {
        "embed": ck.embeddings("embed_tokens", None, None),
        "layers": ck.stack([layer(i) for i in range(ck.cfg.num_layers)]),
        "final": ck.norm("norm", "ln", "D"),
    }
