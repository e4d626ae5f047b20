"""BERT (`model_type: bert`): learned positions, post-norm, GELU MLP, biases everywhere.

Checkpoints as `BertModel` saves them, with or without the `bert.` prefix of
`BertForMaskedLM` and friends; the pooler and MLM head are never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import LayerKind, ModelConfig, Params, UnsupportedModel, bert_dims
from kernels.encoders._values import integer, number

FAMILY = "bert"
ANCHOR = "embeddings.word_embeddings.weight"


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise UnsupportedModel(
            f"{FAMILY}: unsupported position_embedding_type {position_type!r}; only 'absolute' is implemented"
        )
    dims = bert_dims(config, FAMILY)
    return ModelConfig(
        family=FAMILY,
        **dims,
        max_tokens=integer(config, "max_position_embeddings", minimum=1),
        norm_eps=number(config, "layer_norm_eps", 1e-12),
        activation=str(config.get("hidden_act", "gelu")),
        gated_mlp=False,
        norm="post",
        layer_kinds=(LayerKind(),) * dims["num_layers"],
        type_vocab_size=integer(config, "type_vocab_size", 2),
    )


def read(ck: Checkpoint) -> Params:
    """BERT-layout tensors (also XLM-RoBERTa's, under `roberta.`) -> the shared pytree."""
    cfg = ck.cfg

    def layer(i: int) -> dict[str, np.ndarray]:
        p = f"encoder.layer.{i}."
        return {
            **ck.attention_in(p + "attention.self.query", p + "attention.self.key", p + "attention.self.value"),
            **ck.attention_out(p + "attention.output.dense"),
            **ck.norm(p + "attention.output.LayerNorm", "ln1", "LD"),
            **ck.mlp_in(p + "intermediate.dense", "up"),
            **ck.mlp_out(p + "output.dense"),
            **ck.norm(p + "output.LayerNorm", "ln2", "LD"),
        }

    return {"embed": embeddings(ck), "layers": ck.stack([layer(i) for i in range(cfg.num_layers)])}


def embeddings(ck: Checkpoint) -> dict[str, np.ndarray]:
    """BertEmbeddings' tensors (word, position, token type, LayerNorm): BERT's, XLM-RoBERTa's and ALBERT's."""
    return ck.embeddings(
        "embeddings.word_embeddings",
        "embeddings.token_type_embeddings",
        "embeddings.LayerNorm",
        position="embeddings.position_embeddings",
    )
