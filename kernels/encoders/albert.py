"""ALBERT (`model_type: albert`: paraphrase-albert-small-v2 and its kin): BERT's post-norm layers over
factorised embeddings, the layers sharing their weights in groups.

As transformers' AlbertModel: word, position and token type embeddings `embedding_size` (E) wide, summed and
normed there, then projected to hidden_size by `encoder.embedding_hidden_mapping_in`. The encoder runs
num_hidden_layers steps; step i runs layer group int(i / (num_hidden_layers / num_hidden_groups)), whose
inner_group_num layers run one after another, so the model is num_hidden_layers * inner_group_num layers
deep and holds num_hidden_groups * inner_group_num of them. Each is BERT's: attention (`attention.query`,
`key`, `value`, `dense`), `attention.LayerNorm` over the residual, the MLP (`ffn`, `ffn_output`), and
`full_layer_layer_norm` over the residual.

Tensors as AlbertModel saves them, with or without the `albert.` prefix of AlbertForMaskedLM and friends;
the pooler and the MLM head are never read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.encoders import bert
from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import CheckpointMismatch, LayerKind, ModelConfig, Params, UnsupportedModel
from kernels.encoders._values import integer

FAMILY = "albert"
ANCHOR = "encoder.embedding_hidden_mapping_in.weight"
_LAYER = "encoder.albert_layer_groups.{}.albert_layers.{}."  # a group's inner layer


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    # BERT's keys, with AlbertConfig's defaults where they differ.
    cfg = bert.config_from_hf({"hidden_act": "gelu_new", "max_position_embeddings": 512, **config})
    steps = cfg.num_layers
    groups = integer(config, "num_hidden_groups", 1, minimum=1)
    inner = integer(config, "inner_group_num", 1, minimum=1)
    if groups > steps:
        raise UnsupportedModel(f"{FAMILY}: {groups} hidden groups for {steps} layers")
    # Step i's group's inner layers, in order, as "group.layer".
    shared = tuple(f"{int(i / (steps / groups))}.{k}" for i in range(steps) for k in range(inner))
    return dataclasses.replace(
        cfg,
        family=FAMILY,
        num_layers=len(shared),
        layer_kinds=(LayerKind(),) * len(shared),
        embedding_size=integer(config, "embedding_size", 128, minimum=1),
        shared_layers=shared,
    )


def read(ck: Checkpoint) -> Params:
    """AlbertModel's tensors -> the shared pytree, each shared layer's weights stacked once per use."""
    cfg = ck.cfg

    def layer(stored: str) -> dict[str, np.ndarray]:
        p = _LAYER.format(*stored.split("."))
        a = p + "attention."
        return {
            **ck.attention_in(a + "query", a + "key", a + "value"),
            **ck.attention_out(a + "dense"),
            **ck.norm(a + "LayerNorm", "ln1", "LD"),
            **ck.mlp_in(p + "ffn", "up"),
            **ck.mlp_out(p + "ffn_output"),
            **ck.norm(p + "full_layer_layer_norm", "ln2", "LD"),
        }

    stored = {s: layer(s) for s in dict.fromkeys(cfg.shared_layers)}
    # A group or an inner layer past the config's would go unread: the model run shallower than trained.
    groups, inner = (1 + max(int(s.split(".")[i]) for s in stored) for i in (0, 1))
    for extra in (f"{groups}.0", f"0.{inner}"):
        if ck.has(name := _LAYER.format(*extra.split(".")) + "ffn.weight"):
            raise CheckpointMismatch(
                f"the weights hold {name!r}, past the {groups} groups of {inner} layers config.json "
                "(num_hidden_groups, inner_group_num) says"
            )
    return {
        "embed": bert.embeddings(ck) | ck.embedding_projection("encoder.embedding_hidden_mapping_in"),
        "layers": ck.stack([stored[s] for s in cfg.shared_layers]),
    }
