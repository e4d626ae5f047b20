"""DistilBERT (`model_type: distilbert`): BERT's post-norm layers under other names, without token types.

Config: `dim`, `n_layers`, `n_heads`, `hidden_dim`, `activation`,
`max_position_embeddings`; every LayerNorm's epsilon is transformers' fixed 1e-12.
Tensors as `DistilBertModel` saves them, with or without the `distilbert.` prefix
of `DistilBertForMaskedLM` and friends (whose vocab_transform and projector are
never read): `embeddings.{word,position}_embeddings`, `embeddings.LayerNorm`,
`transformer.layer.N.attention.{q,k,v,out}_lin`, `sa_layer_norm`, `ffn.lin1`,
`ffn.lin2`, `output_layer_norm`.

`sinusoidal_pos_embds` fixes the position table at initialisation, but the table is
a parameter that transformers saves and loads over its initial value: the
checkpoint's table is what runs either way, so it is read as a learned one. A
checkpoint without it is refused as lacking the tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import LayerKind, ModelConfig, Params, UnsupportedModel
from kernels.encoders._values import integer

FAMILY = "distilbert"
ANCHOR = "embeddings.word_embeddings.weight"
# DistilBertConfig.attribute_map: the BERT names it also accepts for its own keys.
_ALIASES = {"dim": "hidden_size", "n_heads": "num_attention_heads", "n_layers": "num_hidden_layers"}


def _size(config: Mapping[str, Any], key: str, default: int) -> int:
    """`key`, or its BERT alias, or DistilBertConfig's default where the config.json gives neither."""
    alias = _ALIASES.get(key)
    return integer(config, alias if key not in config and alias in config else key, default, minimum=1)


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    dim, heads = _size(config, "dim", 768), _size(config, "n_heads", 12)
    if dim % heads:
        raise UnsupportedModel(f"{FAMILY}: dim {dim} is not divisible by {heads} heads")
    layers = _size(config, "n_layers", 6)
    return ModelConfig(
        family=FAMILY,
        vocab_size=_size(config, "vocab_size", 30522),
        hidden_size=dim,
        num_layers=layers,
        num_heads=heads,
        head_dim=dim // heads,
        intermediate_size=_size(config, "hidden_dim", 4 * 768),
        max_tokens=_size(config, "max_position_embeddings", 512),
        norm_eps=1e-12,
        activation=str(config.get("activation", "gelu")),
        gated_mlp=False,
        norm="post",
        layer_kinds=(LayerKind(),) * layers,
        type_vocab_size=0,
    )


def read(ck: Checkpoint) -> Params:
    cfg = ck.cfg

    def layer(i: int) -> dict[str, np.ndarray]:
        p = f"transformer.layer.{i}."
        a = p + "attention."
        return {
            **ck.attention_in(a + "q_lin", a + "k_lin", a + "v_lin"),
            **ck.attention_out(a + "out_lin"),
            **ck.norm(p + "sa_layer_norm", "ln1", "LD"),
            **ck.mlp_in(p + "ffn.lin1", "up"),
            **ck.mlp_out(p + "ffn.lin2"),
            **ck.norm(p + "output_layer_norm", "ln2", "LD"),
        }

    return {
        "embed": ck.embeddings(
            "embeddings.word_embeddings", None, "embeddings.LayerNorm", position="embeddings.position_embeddings"
        ),
        "layers": ck.stack([layer(i) for i in range(cfg.num_layers)]),
    }
