"""A BERT-family encoder as pure functions over a parameter pytree.

Shape letters used in names and docstrings:
  B batch, T tokens (sequence), D hidden, N heads, H head_dim, F MLP hidden,
  L layers, V vocabulary, P positions.

Layers are stacked along a leading L axis and run with `lax.scan`, so a model of
any depth compiles one layer body; the attention kernel is chosen by name and
reached only through `kernels.attention.attention`.

Each letter names a logical axis (`AXES`); parameter names end in their shape
letters, so `param_axes` reads every parameter's logical axes off its name and
`kernels.sharding` turns them into mesh placements. Under `shard_map` the same
`forward` runs on each device's shards: heads and F split, the contractions
over them completed by a psum.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from kernels.attention import attention
from kernels.sharding import ShardingRules, sum_shards

Params = dict[str, Any]

AXES = {
    "B": "batch",
    "T": "seq",
    "D": "embed",
    "N": "heads",
    "H": "head_dim",
    "F": "mlp",
    "L": "layers",
    "V": "vocab",
    "P": "positions",
}

_ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}


@dataclasses.dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> "BertConfig":
        """Builds the config from a Hugging Face `config.json` dict of a BERT-architecture model."""
        cfg = cls(
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=int(config["num_attention_heads"]),
            intermediate_size=int(config["intermediate_size"]),
            max_position_embeddings=int(config["max_position_embeddings"]),
            type_vocab_size=int(config.get("type_vocab_size", 2)),
            layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
            hidden_act=str(config.get("hidden_act", "gelu")),
        )
        if cfg.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {cfg.hidden_act!r}; known: {sorted(_ACTIVATIONS)}")
        if cfg.hidden_size % cfg.num_heads:
            raise ValueError(f"hidden_size {cfg.hidden_size} is not divisible by {cfg.num_heads} heads")
        position_type = config.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ValueError(f"unsupported position_embedding_type {position_type!r}; only 'absolute' is implemented")
        return cfg


def params_from_hf(tensors: Mapping[str, np.ndarray], cfg: BertConfig) -> Params:
    """Maps a Hugging Face BERT state dict (numpy arrays) onto this module's pytree.

    Accepts both bare (`encoder.layer.0...`) and prefixed (`bert.encoder...`) names.
    HF linear weights are [out, in]; they are transposed once here so the forward
    pass reads as einsums over named axes.
    """
    t = {name.removeprefix("bert."): np.asarray(value, np.float32) for name, value in tensors.items()}
    D, N, H, L = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.num_layers

    def get(name: str) -> np.ndarray:
        if name not in t:
            raise KeyError(f"weights are missing tensor {name!r}; is this a BERT-architecture checkpoint?")
        return t[name]

    def stack(suffix: str, reshape=lambda w: w) -> np.ndarray:
        return np.stack([reshape(get(f"encoder.layer.{i}.{suffix}")) for i in range(L)])

    def heads_in(w):  # [N*H, D] -> DNH
        return w.T.reshape(D, N, H)

    return {
        "embed": {
            "word_VD": get("embeddings.word_embeddings.weight"),
            "position_PD": get("embeddings.position_embeddings.weight"),
            "token_type_D": get("embeddings.token_type_embeddings.weight")[0],
            "ln_scale_D": get("embeddings.LayerNorm.weight"),
            "ln_bias_D": get("embeddings.LayerNorm.bias"),
        },
        "layers": {
            "q_LDNH": stack("attention.self.query.weight", heads_in),
            "k_LDNH": stack("attention.self.key.weight", heads_in),
            "v_LDNH": stack("attention.self.value.weight", heads_in),
            "q_bias_LNH": stack("attention.self.query.bias", lambda b: b.reshape(N, H)),
            "k_bias_LNH": stack("attention.self.key.bias", lambda b: b.reshape(N, H)),
            "v_bias_LNH": stack("attention.self.value.bias", lambda b: b.reshape(N, H)),
            "out_LNHD": stack("attention.output.dense.weight", lambda w: w.T.reshape(N, H, D)),
            "out_bias_LD": stack("attention.output.dense.bias"),
            "ln1_scale_LD": stack("attention.output.LayerNorm.weight"),
            "ln1_bias_LD": stack("attention.output.LayerNorm.bias"),
            "up_LDF": stack("intermediate.dense.weight", lambda w: w.T),
            "up_bias_LF": stack("intermediate.dense.bias"),
            "down_LFD": stack("output.dense.weight", lambda w: w.T),
            "down_bias_LD": stack("output.dense.bias"),
            "ln2_scale_LD": stack("output.LayerNorm.weight"),
            "ln2_bias_LD": stack("output.LayerNorm.bias"),
        },
    }


def logical(letters: str) -> P:
    """Shape letters -> logical axes: 'BTD' -> P('batch', 'seq', 'embed')."""
    return P(*(AXES[letter] for letter in letters))


def param_axes(params: Params) -> Any:
    """The params pytree with each array replaced by its logical axes, read off
    the name's shape suffix (`q_LDNH` -> P('layers', 'embed', 'heads', 'head_dim'))."""

    def axes(path, leaf):
        name = path[-1].key
        letters = name.rsplit("_", 1)[-1]
        if len(letters) != np.ndim(leaf):
            raise ValueError(f"parameter {name!r} of shape {np.shape(leaf)} does not match its suffix {letters!r}")
        return logical(letters)

    return jax.tree_util.tree_map_with_path(axes, params)


def cast_params(params: Params, dtype: jnp.dtype) -> Params:
    """Casts matmul weights to the compute dtype; layer-norm parameters stay float32."""

    def cast(path, leaf):
        is_norm = any(getattr(k, "key", "").startswith("ln") for k in path)
        return leaf if is_norm else leaf.astype(dtype)

    return jax.tree_util.tree_map_with_path(cast, params)


def _layer_norm(x_BTD, scale_D, bias_D, eps: float):
    # Statistics in float32 whatever the compute dtype: bfloat16 variance of
    # 384 values loses most of its mantissa.
    x = x_BTD.astype(jnp.float32)
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps) * scale_D + bias_D
    return y.astype(x_BTD.dtype)


def encoder_layer(x_BTD, layer: Params, lengths_B, cfg: BertConfig, attention_impl: str, rules: ShardingRules | None):
    """One post-norm transformer block: attention then MLP, each with a residual.

    With the heads and F axes split, the in-projections (QKV, up) need no
    communication; the out-projections (out, down) give partial sums over the
    local heads or F slice, completed by `sum_shards` before their bias and
    residual, which must be added once, not once per shard.
    """
    q = jnp.einsum("BTD,DNH->BTNH", x_BTD, layer["q_LDNH"]) + layer["q_bias_LNH"]
    k = jnp.einsum("BTD,DNH->BTNH", x_BTD, layer["k_LDNH"]) + layer["k_bias_LNH"]
    v = jnp.einsum("BTD,DNH->BTNH", x_BTD, layer["v_LDNH"]) + layer["v_bias_LNH"]
    ctx_BTNH = attention(q, k, v, kv_lengths=lengths_B, impl=attention_impl)
    attn_BTD = jnp.einsum("BTNH,NHD->BTD", ctx_BTNH.astype(x_BTD.dtype), layer["out_LNHD"])
    attn_BTD = sum_shards(attn_BTD, "heads", rules) + layer["out_bias_LD"]
    x_BTD = _layer_norm(x_BTD + attn_BTD, layer["ln1_scale_LD"], layer["ln1_bias_LD"], cfg.layer_norm_eps)

    h_BTF = _ACTIVATIONS[cfg.hidden_act](jnp.einsum("BTD,DF->BTF", x_BTD, layer["up_LDF"]) + layer["up_bias_LF"])
    mlp_BTD = sum_shards(jnp.einsum("BTF,FD->BTD", h_BTF, layer["down_LFD"]), "mlp", rules) + layer["down_bias_LD"]
    return _layer_norm(x_BTD + mlp_BTD, layer["ln2_scale_LD"], layer["ln2_bias_LD"], cfg.layer_norm_eps)


def forward(
    params: Params,
    ids_BT,
    lengths_B,
    cfg: BertConfig,
    *,
    attention_impl: str = "auto",
    rules: ShardingRules | None = None,
):
    """Token ids [B, T] (right-padded; `lengths_B` real tokens each) -> hidden states [B, T, D].

    The compute dtype is the dtype of the weights (see `cast_params`). Called on
    whole arrays, `rules` is None. Inside `shard_map` over a mesh laid out by
    `rules`, params and ids are this device's shards (B, heads and F split as
    the rules say) and the result is this device's rows, replicated over the
    heads/F mesh axis.
    """
    emb = params["embed"]
    T = ids_BT.shape[1]
    x_BTD = emb["word_VD"][ids_BT] + emb["position_PD"][:T] + emb["token_type_D"]
    x_BTD = _layer_norm(x_BTD, emb["ln_scale_D"], emb["ln_bias_D"], cfg.layer_norm_eps)

    def body(x, layer):
        return encoder_layer(x, layer, lengths_B, cfg, attention_impl, rules), None

    x_BTD, _ = jax.lax.scan(body, x_BTD, params["layers"])
    return x_BTD


def pool(hidden_BTD, lengths_B, *, mode: str, normalize: bool):
    """Sentence embedding [B, D] float32 from hidden states: mean over real tokens, or CLS."""
    hidden = hidden_BTD.astype(jnp.float32)
    if mode == "cls":
        out_BD = hidden[:, 0]
    elif mode == "mean":
        mask_BT = jnp.arange(hidden.shape[1])[None, :] < lengths_B[:, None]
        summed = jnp.einsum("BTD,BT->BD", hidden, mask_BT.astype(jnp.float32))
        out_BD = summed / jnp.maximum(lengths_B, 1)[:, None].astype(jnp.float32)
    else:
        raise ValueError(f"unknown pooling mode {mode!r}; expected 'mean' or 'cls'")
    if normalize:
        # Same epsilon as torch.nn.functional.normalize, which sentence-transformers uses.
        out_BD = out_BD / jnp.maximum(jnp.linalg.norm(out_BD, axis=-1, keepdims=True), 1e-12)
    return out_BD
