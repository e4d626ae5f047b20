"""An encoder's architecture as its config.json gives it: plain data and checks, without JAX.

The job's driver reads and checks a model's config (and its weights' shapes)
before any encoder starts, and never imports JAX; `_blocks` runs what this
describes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.attention._buckets import RelativeBuckets
from kernels.encoders._values import integer

Params = dict[str, Any]

# config.json's hidden_act -> the activation's name in kernels.dense (gelu is the exact, erf one). transformers'
# gelu_python is gelu's formula written out, gelu_fast gelu_new's tanh formula factored another way.
ACTIVATIONS: dict[str, str] = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


class UnsupportedModel(ValueError):
    """config.json describes a model (family, option or layout) that no encoder here implements."""


class CheckpointMismatch(ValueError):
    """The weights lack a tensor the config calls for, or hold one of another shape."""


class WindowTooLong(ValueError):
    """More tokens per sequence than the model's positions cover."""


# How `pool` turns a sequence's hidden states into one vector (kernels.encoders._pooling); here, without
# JAX, for the driver that reads a model's pooling config.
POOLING_MODES = ("mean", "cls", "lasttoken", "max", "mean_sqrt_len_tokens", "weightedmean")
# The activations of the projections after pooling (sentence-transformers' Dense; `_pooling.project`).
PROJECTION_ACTIVATIONS = ("tanh", "identity")


@dataclasses.dataclass(frozen=True)
class Rope:
    """Rotary position embedding, rotate-half convention (GPT-NeoX, Hugging Face `rotate_half`).

    `ntk_factor`: GTE's fixed NTK scaling (`rope_scaling: {"type": "ntk"}`):
    theta times the factor, every frequency divided by factor^(2/H); with
    `ntk_mixed_b`, theta unchanged and frequency i divided by
    exp(log(factor) (i + 1)^b / (H/2)^b). As in Alibaba-NLP's `NTKScalingRotaryEmbedding`.

    `llama3`: Llama 3.1's frequencies (`rope_type: llama3`), (factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings): wavelengths under original / high_freq_factor kept, those over
    original / low_freq_factor divided by factor, those between interpolated. As transformers'
    `_compute_llama3_parameters`.
    """

    theta: float
    ntk_factor: float | None = None
    ntk_mixed_b: float | None = None
    llama3: tuple[float, float, float, float] | None = None

    def inv_freq(self, head_dim: int) -> np.ndarray:
        """[K] float32, computed as torch does in float32 so long positions land on the same angles."""
        f32 = np.float32
        exponents = np.arange(0, head_dim, 2, dtype=f32) / f32(head_dim)
        if self.llama3 is not None:
            return _llama3(f32(1.0) / f32(self.theta) ** exponents, *self.llama3)
        if self.ntk_factor is None:
            return (f32(1.0) / f32(self.theta) ** exponents).astype(f32)
        if self.ntk_mixed_b is None:
            inv = f32(1.0) / f32(self.theta * self.ntk_factor) ** exponents
            return (inv / f32(self.ntk_factor ** (2 / head_dim))).astype(f32)
        a = np.log(f32(self.ntk_factor)) / f32((head_dim / 2) ** self.ntk_mixed_b)
        lambdas = np.exp(a * np.arange(1, head_dim // 2 + 1, dtype=f32) ** f32(self.ntk_mixed_b))
        return (f32(1.0) / f32(self.theta) ** exponents / lambdas).astype(f32)


def _llama3(inv_W: np.ndarray, factor: float, low: float, high: float, original: float) -> np.ndarray:
    """Rope.llama3's frequencies from the default ones, in float32 as torch computes them (a number over a tensor
    is the number times the tensor's reciprocal, which rounds twice)."""
    f32 = np.float32
    wavelen_W = f32(2 * np.pi) * (f32(1) / inv_W)
    scaled_W = np.where(wavelen_W > f32(original / low), inv_W / f32(factor), inv_W)
    smooth_W = (f32(original) * (f32(1) / wavelen_W) - f32(low)) / f32(high - low)
    smoothed_W = (f32(1) - smooth_W) * scaled_W / f32(factor) + smooth_W * scaled_W
    medium_W = (wavelen_W >= f32(original / high)) & (wavelen_W <= f32(original / low))
    return np.where(medium_W, smoothed_W, scaled_W).astype(f32)


@dataclasses.dataclass(frozen=True)
class LayerKind:
    """How one layer attends. window: None (global) or w, a query at t sees keys at |t - s| <= w.
    rope: None where the family adds learned position embeddings instead."""

    window: int | None = None
    rope: Rope | None = None


ALL_BIASES = frozenset({"qkv", "out", "mlp_in", "mlp_out", "norm"})


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One encoder's architecture, read from its config.json by its family's `config_from_hf`."""

    family: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    head_dim: int
    intermediate_size: int
    max_tokens: int  # the longest sequence the model's positions cover
    norm_eps: float
    activation: str
    gated_mlp: bool  # activation(gate) * up, else activation(up)
    # "post": BERT's x = norm(x + block(x)). "pre": ModernBERT's and T5's x = x + block(norm(x)), with a final
    # norm; without a norm before layer 0's attention where the embeddings are already normed (ModernBERT).
    # "sandwich": Gemma3's x = x + norm(block(norm(x))), pre-norm with each block's output normed too
    # (`ln_attn_out_scale_LD`, `ln_mlp_out_scale_LD`).
    norm: str
    layer_kinds: tuple[LayerKind, ...]  # one per layer
    position_offset: int = 0  # learned positions: table row of position 0 (XLM-RoBERTa: padding_idx + 1)
    type_vocab_size: int = 0  # token type embeddings (type 0 is added) when > 0
    # Which modules have biases: "qkv", "out" (attention), "mlp_in", "mlp_out", "norm".
    biases: frozenset[str] = ALL_BIASES
    # MPNet's T5-style relative position bias: one table [heads, buckets] shared by every layer, added to
    # every layer's scores (the parameter `relative_bias_NR`).
    relative_buckets: RelativeBuckets | None = None
    # "layer": LayerNorm. "rms": T5's RMSNorm (no mean subtracted, no bias), for every norm of the model.
    norm_kind: str = "layer"
    # Whether the embeddings have a norm (T5's have none) and, without RoPE, learned position embeddings
    # (T5 has none: its only positions are the relative bias).
    embedding_norm: bool = True
    learned_positions: bool = True
    # What attention multiplies q.k by: None for 1/sqrt(head_dim); T5 does not scale (1.0).
    attention_scale: float | None = None
    # A decoder run as an encoder (Qwen3, Mistral, ...): a token attends to the earlier tokens of its sequence only.
    causal: bool = False
    # Grouped-query attention: the checkpoint's K/V heads (query head h uses K/V head
    # h // (num_heads // num_kv_heads)); None where every head has its own.
    num_kv_heads: int | None = None
    # Qwen3's and Gemma3's RMSNorm of each head's q and k over head_dim, before RoPE (`ln_q_scale_LH`,
    # `ln_k_scale_LH`).
    qk_norm: bool = False
    # What the token embeddings are multiplied by (Gemma3: sqrt(hidden_size)), rounded first to their dtype.
    embed_scale: float = 1.0
    # ALBERT's factorised embeddings: their width E, projected to hidden_size after their norm (`proj_ED`,
    # `proj_bias_D`); None where they are hidden_size wide.
    embedding_size: int | None = None
    # ALBERT's shared layers: the stored layer whose weights each layer runs, one per layer, as the family's
    # checkpoint names it (ALBERT: "group.layer"); () where every layer has its own. The shared weights are
    # stacked once per use, so that every family runs one scan body.
    shared_layers: tuple[str, ...] = ()

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise UnsupportedModel(
                f"{self.family}: unsupported activation (hidden_act) {self.activation!r}; "
                f"known: {', '.join(sorted(ACTIVATIONS))}"
            )
        if self.norm not in ("post", "pre", "sandwich"):
            raise ValueError(f"norm must be 'post', 'pre' or 'sandwich', got {self.norm!r}")
        if self.norm_kind not in ("layer", "rms"):
            raise ValueError(f"norm_kind must be 'layer' or 'rms', got {self.norm_kind!r}")
        if self.norm_kind == "rms" and "norm" in self.biases:
            raise ValueError("an RMSNorm has no bias: leave 'norm' out of biases")
        if self.num_kv_heads is not None and (self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads):
            raise UnsupportedModel(
                f"{self.family}: {self.num_heads} attention heads are not a multiple of {self.num_kv_heads} K/V heads"
            )
        if len(self.layer_kinds) != self.num_layers:
            raise ValueError(f"{len(self.layer_kinds)} layer kinds for {self.num_layers} layers")
        if self.shared_layers and len(self.shared_layers) != self.num_layers:
            raise ValueError(f"{len(self.shared_layers)} shared layers named for {self.num_layers} layers")
        for kind in self.layer_kinds:
            if kind.window is not None and kind.window >= self.max_tokens:
                raise UnsupportedModel(
                    f"{self.family}: sliding window {kind.window} is not shorter "
                    f"than the model's {self.max_tokens} positions"
                )

    @property
    def kv_heads(self) -> int:
        """The K/V heads: num_kv_heads under grouped-query attention, else num_heads."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def split_axes(self) -> dict[str, int]:
        """The lengths of the logical axes a mesh may split (kernels.sharding_rules): every parameter's
        heads axis is num_heads long, its kv_heads axis kv_heads and its mlp axis intermediate_size (a test
        holds every family to it). The mesh splits the K/V heads with the query heads that use them, so
        they are named only where fewer (grouped-query attention): otherwise they are the heads."""
        axes = {"heads": self.num_heads, "mlp": self.intermediate_size}
        return axes if self.kv_heads == self.num_heads else axes | {"kv_heads": self.kv_heads}

    @property
    def kinds(self) -> tuple[LayerKind, ...]:
        """The distinct layer kinds, in order of first use."""
        return tuple(dict.fromkeys(self.layer_kinds))


def bert_dims(config: Mapping[str, Any], family: str) -> dict[str, int]:
    """The sizes under the names BERT's config.json gives them (most families keep them), as ModelConfig fields.
    head_dim: given explicitly, or hidden_size / heads, which must divide."""
    hidden, heads = integer(config, "hidden_size", minimum=1), integer(config, "num_attention_heads", minimum=1)
    if not config.get("head_dim") and hidden % heads:
        raise UnsupportedModel(f"{family}: hidden_size {hidden} is not divisible by {heads} heads")
    return {
        "vocab_size": integer(config, "vocab_size", minimum=1),
        "hidden_size": hidden,
        "num_layers": integer(config, "num_hidden_layers", minimum=1),
        "num_heads": heads,
        "head_dim": integer(config, "head_dim", minimum=1) if config.get("head_dim") else hidden // heads,
        "intermediate_size": integer(config, "intermediate_size", minimum=1),
    }


# transformers' names of the layer types, in `layer_types` and as `rope_parameters`' keys (ModernBERT, Gemma3).
FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"


def layer_types(config: Mapping[str, Any], family: str, n_layers: int, derived: list[str]) -> list[str]:
    """config.json's `layer_types`, one of FULL_ATTENTION / SLIDING_ATTENTION per layer, or where it is absent
    or null the types the family derives from other keys (`derived`)."""
    types = config.get("layer_types")
    if types is None:
        return derived
    if not isinstance(types, list) or len(types) != n_layers or set(types) - {FULL_ATTENTION, SLIDING_ATTENTION}:
        raise UnsupportedModel(
            f"{family}: layer_types must list {n_layers} of {FULL_ATTENTION!r}/{SLIDING_ATTENTION!r}, got {types!r}"
        )
    return types


def window_or_full(window: int, max_tokens: int) -> int | None:
    """`LayerKind.window` of a sliding layer that sees |t - s| <= `window` in a model of `max_tokens` positions:
    None where that reaches every position, full attention, as transformers' masks then are."""
    return None if window >= max_tokens - 1 else window


def check_window(cfg: ModelConfig, n_tokens: int) -> None:
    """Raises WindowTooLong if sequences of `n_tokens` tokens exceed the model's positions."""
    if n_tokens > cfg.max_tokens:
        raise WindowTooLong(
            f"a window of {n_tokens} tokens is longer than this {cfg.family} model's {cfg.max_tokens} positions"
        )
