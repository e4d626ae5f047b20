"""MPNet (`model_type: mpnet`: all-mpnet-base-v2, multi-qa-mpnet-base-dot-v1, paraphrase-mpnet-base-v2):
BERT's post-norm layers under other tensor names, RoBERTa's learned positions without token types, and one
T5-style relative position bias shared by every layer.

As transformers' MPNetModel: positions start after the pad id, which it fixes at 1 whatever config.json
says (`MPNetEmbeddings.padding_idx`), so position p reads row p + 2; every layer's scaled scores gain
`encoder.relative_attention_bias.weight` [buckets, heads] at the bucket of key - query distance, bucketed
with 32 buckets up to a distance of 128, which `MPNetEncoder.compute_position_bias` fixes whatever
config.json's relative_attention_num_buckets says (the table's rows). Checkpoints with or without the
`mpnet.` prefix of MPNetForMaskedLM; the pooler and LM head are never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.attention import RelativeBuckets
from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import LayerKind, ModelConfig, Params, UnsupportedModel, bert_dims
from kernels.encoders._values import integer, number

FAMILY = "mpnet"
ANCHOR = "embeddings.word_embeddings.weight"
# MPNetEmbeddings.padding_idx: positions are numbered from it + 1.
PADDING_IDX = 1
BUCKETS = RelativeBuckets(num_buckets=32, max_distance=128)


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    buckets = integer(config, "relative_attention_num_buckets", 32, minimum=1)
    if buckets != BUCKETS.num_buckets:
        raise UnsupportedModel(
            f"{FAMILY}: relative_attention_num_buckets {buckets} is not implemented; transformers' MPNet "
            f"buckets distances into {BUCKETS.num_buckets} whatever the table holds, and so does this"
        )
    # MPNetSelfAttention's heads are always hidden_size / num_attention_heads: a head_dim key is not read.
    dims = bert_dims({key: value for key, value in config.items() if key != "head_dim"}, FAMILY)
    offset = PADDING_IDX + 1
    return ModelConfig(
        family=FAMILY,
        **dims,
        max_tokens=integer(config, "max_position_embeddings", 512, minimum=offset + 1) - offset,
        norm_eps=number(config, "layer_norm_eps", 1e-12),
        activation=str(config.get("hidden_act", "gelu")),
        gated_mlp=False,
        norm="post",
        layer_kinds=(LayerKind(),) * dims["num_layers"],
        position_offset=offset,
        type_vocab_size=0,
        relative_buckets=BUCKETS,
    )


def read(ck: Checkpoint) -> Params:
    """MPNetModel's tensors -> the shared pytree."""
    cfg = ck.cfg

    def layer(i: int) -> dict[str, np.ndarray]:
        p = f"encoder.layer.{i}."
        a = p + "attention.attn."
        return {
            **ck.attention_in(a + "q", a + "k", a + "v"),
            **ck.attention_out(a + "o"),
            **ck.norm(p + "attention.LayerNorm", "ln1", "LD"),
            **ck.mlp_in(p + "intermediate.dense", "up"),
            **ck.mlp_out(p + "output.dense"),
            **ck.norm(p + "output.LayerNorm", "ln2", "LD"),
        }

    table_RN = ck.get("encoder.relative_attention_bias.weight", (BUCKETS.num_buckets, cfg.num_heads))
    embed = ck.embeddings(
        "embeddings.word_embeddings", None, "embeddings.LayerNorm", position="embeddings.position_embeddings"
    )
    return {
        "embed": embed | {"relative_bias_NR": table_RN.T},
        "layers": ck.stack([layer(i) for i in range(cfg.num_layers)]),
    }
