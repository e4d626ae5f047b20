"""The decoders transformers builds as Llama's (LlamaModel, MistralModel, Qwen2Model, Qwen3Model), run as encoders.

All four: token embeddings with neither scaling nor norm; each layer `x + attention(rmsnorm(x))`, then
`x + mlp(rmsnorm(x))`; a final RMSNorm (x / rms(x) * weight in float32, epsilon `rms_norm_eps`). Attention is
causal (a token sees the earlier tokens of its own sequence; but see is_causal below), grouped-query
(`num_key_value_heads` K/V heads, each shared by num_heads / num_kv_heads query heads, projected once and
attended to by each: `Checkpoint.attention_in`), RoPE rotate-half (theta `rope_parameters.rope_theta` or
`rope_theta`; the default type, or Llama 3.1's `llama3` frequencies, `Rope.llama3`). The MLP is SwiGLU:
down(act(gate(x)) * up(x)).

What differs is one `Decoder` per family (`DECODER` in each family's module):
  - Qwen3 norms q and k per head over head_dim (`q_norm`, `k_norm`) before RoPE; its head_dim defaults to 128.
  - Qwen2's q, k and v projections have biases, its o_proj none, always.
  - Llama's attention projections (all four) have biases where `attention_bias`, its MLP's where `mlp_bias`.
  - Mistral attends within `sliding_window` on every layer where it is not null; Qwen2's layers slide as
    `layer_types` says, or from `max_window_layers` on where `use_sliding_window`. transformers' rule is
    s > t - sliding_window (masking_utils' sliding_window_overlay), causal: `LayerKind.window` sliding_window - 1.
    Qwen3 and Llama do not slide (a Qwen3 layer that would is refused, as it was before the families met).
With `is_causal: false` in config.json (transformers 5.2 and later read it in create_causal_mask: "decoder-only
models with bi-directional attention"; sentence-transformers then pools by the mean where nothing says otherwise)
a token sees its whole sequence, and a sliding layer the tokens at |t - s| <= sliding_window.
gte-Qwen2 describes its attention as bidirectional: it runs here as its config.json says, as in transformers.

sentence-transformers pools these models' embeddings by their last token (e5-mistral-7b-instruct,
SFR-Embedding-Mistral, gte-Qwen2, Qwen3-Embedding), the EOS their tokenizer's post-processor appends, or by
the mean: `pool` serves both.

Tensors as transformers saves the base model (`layers.N.self_attn.q_proj.weight`, `norm.weight`), or with the
`model.` prefix of *ForCausalLM, whose `lm_head` is never read.
"""

from __future__ import annotations

import dataclasses
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

ANCHOR = "embed_tokens.weight"
DEFAULT_THETA = 10_000.0  # every one of these configs' default_theta


@dataclasses.dataclass(frozen=True)
class Decoder:
    """What one family's config and tensors add to the shared decoder."""

    family: str
    max_positions: int  # max_position_embeddings where config.json leaves it out
    head_dim: int | None = None  # where config.json leaves it out; None: hidden_size // num_attention_heads
    qk_norm: bool = False
    # "fixed": q, k, v with biases, o_proj without (Qwen2); "flags": `attention_bias` and `mlp_bias` (Llama);
    # None: no biases, `attention_bias` true refused (Qwen3, Mistral).
    biases: str | None = None
    # How layers slide: "all" (Mistral: `sliding_window` on every layer), "qwen" (`layer_types`, or
    # use_sliding_window from max_window_layers on), "refused" (Qwen3: as qwen, any sliding layer refused), None.
    sliding: str | None = None


def _rope(config: Mapping[str, Any], family: str) -> Rope:
    """`rope_parameters` (transformers 5) or `rope_theta` with `rope_scaling` (older files): the default type, or
    `llama3` with its factor, low_freq_factor, high_freq_factor and original_max_position_embeddings."""
    params = mapping(config, "rope_parameters") or mapping(config, "rope_scaling")
    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = number(params, "rope_theta", None) or number(config, "rope_theta", DEFAULT_THETA)
    if number(params, "partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedModel(
            f"{family}: partial_rotary_factor {params['partial_rotary_factor']!r} is not implemented"
        )
    if rope_type == "llama3":
        keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        return Rope(theta, llama3=tuple(number(params, key) for key in keys))
    if rope_type != "default":
        raise UnsupportedModel(f"{family}: RoPE scaling {rope_type!r} is not implemented; known: default, llama3")
    return Rope(theta)


def _windows(config: Mapping[str, Any], d: Decoder, layers: int, causal: bool) -> list[int | None]:
    """Each layer's `LayerKind.window`: None, or sliding_window - 1 for transformers' causal s > t - sliding_window,
    sliding_window for its bidirectional |t - s| <= sliding_window (masking_utils' two overlays)."""
    if d.sliding is None:
        return [None] * layers
    sliding_window = config.get("sliding_window")
    if d.sliding == "all":
        types = [SLIDING_ATTENTION if sliding_window is not None else FULL_ATTENTION] * layers
    else:
        # As Qwen2Config and Qwen3Config derive them; Qwen3's fixture has no sliding_window, only the flag.
        start = integer(config, "max_window_layers", 28)
        slides = bool(config.get("use_sliding_window")) and (d.sliding == "refused" or sliding_window is not None)
        derived = [SLIDING_ATTENTION if slides and i >= start else FULL_ATTENTION for i in range(layers)]
        types = layer_types(config, d.family, layers, derived)
    sliding = [i for i, kind in enumerate(types) if kind == SLIDING_ATTENTION]
    if sliding and d.sliding == "refused":
        raise UnsupportedModel(
            f"{d.family}: sliding window attention (layers {sliding[0]}..{sliding[-1]}) is not implemented; "
            "only full attention (use_sliding_window false)"
        )
    if not sliding:
        return [None] * layers
    if sliding_window is None or (d.sliding == "qwen" and not config.get("use_sliding_window")):
        raise UnsupportedModel(f"{d.family}: layer_types slide (layers {sliding}) without a sliding_window in use")
    max_tokens = integer(config, "max_position_embeddings", d.max_positions, minimum=1)
    window = window_or_full(integer(config, "sliding_window", minimum=1) - causal, max_tokens)
    return [window if kind == SLIDING_ATTENTION else None for kind in types]


def _biases(config: Mapping[str, Any], d: Decoder) -> frozenset[str]:
    if d.biases == "fixed":
        return frozenset({"qkv"})
    if d.biases == "flags":
        attention = {"qkv", "out"} if config.get("attention_bias") else set()
        return frozenset(attention | ({"mlp_in", "mlp_out"} if config.get("mlp_bias") else set()))
    if config.get("attention_bias", False):
        raise UnsupportedModel(f"{d.family}: attention_bias true is not implemented (only false, as {d.family}'s)")
    return frozenset()


def config_from_hf(config: Mapping[str, Any], d: Decoder) -> ModelConfig:
    causal = config.get("is_causal", True)
    if not isinstance(causal, bool):
        raise ValueError(f"is_causal {causal!r} is not true or false")
    layers = integer(config, "num_hidden_layers", minimum=1)
    hidden = integer(config, "hidden_size", minimum=1)
    heads = integer(config, "num_attention_heads", minimum=1)
    # null, as the configs read it: every head its own K/V.
    kv_heads = heads if config.get("num_key_value_heads") is None else integer(config, "num_key_value_heads", minimum=1)
    # As the attention modules read it: head_dim, or where absent (null too) the family's default.
    head_dim = d.head_dim or hidden // heads
    head_dim = head_dim if config.get("head_dim") is None else integer(config, "head_dim", minimum=2)
    return ModelConfig(
        family=d.family,
        vocab_size=integer(config, "vocab_size", minimum=1),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        head_dim=head_dim,
        intermediate_size=integer(config, "intermediate_size", minimum=1),
        max_tokens=integer(config, "max_position_embeddings", d.max_positions, minimum=1),
        norm_eps=number(config, "rms_norm_eps", 1e-6),
        activation=str(config.get("hidden_act", "silu")),
        gated_mlp=True,
        norm="pre",
        layer_kinds=tuple(LayerKind(w, _rope(config, d.family)) for w in _windows(config, d, layers, causal)),
        biases=_biases(config, d),
        norm_kind="rms",
        embedding_norm=False,
        learned_positions=False,
        causal=causal,
        num_kv_heads=kv_heads,
        qk_norm=d.qk_norm,
    )


def read(ck: Checkpoint) -> Params:
    """The base model's (or *ForCausalLM's `model.`) tensors -> the shared pytree."""

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
