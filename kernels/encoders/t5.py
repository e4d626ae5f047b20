"""T5's encoder (`model_type: t5`: sentence-t5-base/-large/-xl, gtr-t5-base/-large/-xl; and `mt5`, mT5's, which
is T5 v1.1's): pre-norm blocks with RMSNorm, no biases, unscaled attention, no position embeddings, and one
relative position bias.

As transformers' T5EncoderModel (T5Stack): token embeddings with neither scaling nor norm; each block
`x + attention(rmsnorm(x))`, then `x + mlp(rmsnorm(x))`; a final RMSNorm (`T5LayerNorm`: x / rms(x) *
weight, in float32, epsilon `layer_norm_epsilon`). q.k is not divided by sqrt(d_kv), and the heads are
num_heads * d_kv wide, which need not be d_model. Block 0's `relative_attention_bias` [buckets, heads] is
the only one: its bias, bucketed bidirectionally with relative_attention_num_buckets up to
relative_attention_max_distance, is added to every block's scores. The MLP is `feed_forward_proj`:
"relu" (wi, wo), "gated-gelu" (T5 v1.1, flan: gelu_new(wi_0) * wi_1, wo), or any `ACT` or `gated-ACT`.

T5 has no position limit: the bias buckets any distance. `max_tokens` is the length the model was
trained on, config.json's `n_positions` (older configs, sentence-t5's and gtr-t5's among them, write
512) or else T5's 512: the window where sentence_bert_config.json and the tokenizer name none, and the
longest `check_window` lets through, as the buckets past max_distance were only ever trained up to it.

Tensors as T5EncoderModel or T5Model (or their MT5 twins) saves them, without a model prefix: the token embeddings are
`shared` or `encoder.embed_tokens` (tied; either or both present), the rest under `encoder.`. A
T5Model's decoder is never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.attention import RelativeBuckets
from kernels.encoders._checkpoint import Checkpoint
from kernels.encoders._config import ACTIVATIONS, LayerKind, ModelConfig, Params, UnsupportedModel
from kernels.encoders._values import integer, number

FAMILY = "t5"
ANCHOR = "encoder.final_layer_norm.weight"
# T5's pre-training length, the window of a config without n_positions.
DEFAULT_POSITIONS = 512


def _mlp(feed_forward_proj: str) -> tuple[str, bool]:
    """feed_forward_proj -> (activation, gated), as T5Config reads it: "gated-gelu" is gelu_new."""
    gated, _, act = feed_forward_proj.rpartition("-")
    act = "gelu_new" if feed_forward_proj == "gated-gelu" else act
    if gated not in ("", "gated") or act not in ACTIVATIONS:
        raise UnsupportedModel(
            f"{FAMILY}: feed_forward_proj {feed_forward_proj!r} is not implemented; "
            f"supported: ACT or gated-ACT for ACT in {', '.join(sorted(ACTIVATIONS))}"
        )
    return act, gated == "gated"


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    # Defaults as T5Config's.
    activation, gated = _mlp(str(config.get("feed_forward_proj", "relu")))
    layers = integer(config, "num_layers", 6, minimum=1)
    return ModelConfig(
        family=FAMILY,
        vocab_size=integer(config, "vocab_size", 32128, minimum=1),
        hidden_size=integer(config, "d_model", 512, minimum=1),
        num_layers=layers,
        num_heads=integer(config, "num_heads", 8, minimum=1),
        head_dim=integer(config, "d_kv", 64, minimum=1),
        intermediate_size=integer(config, "d_ff", 2048, minimum=1),
        max_tokens=integer(config, "n_positions", DEFAULT_POSITIONS, minimum=2),
        norm_eps=number(config, "layer_norm_epsilon", 1e-6),
        activation=activation,
        gated_mlp=gated,
        norm="pre",
        layer_kinds=(LayerKind(),) * layers,
        biases=frozenset(),
        relative_buckets=RelativeBuckets(
            integer(config, "relative_attention_num_buckets", 32, minimum=1),
            integer(config, "relative_attention_max_distance", 128, minimum=1),
        ),
        norm_kind="rms",
        embedding_norm=False,
        learned_positions=False,
        attention_scale=1.0,
    )


def read(ck: Checkpoint) -> Params:
    """T5EncoderModel's (or T5Model's encoder's) tensors -> the shared pytree."""
    cfg = ck.cfg

    def layer(i: int) -> dict[str, np.ndarray]:
        attn, ff = f"encoder.block.{i}.layer.0.", f"encoder.block.{i}.layer.1."
        a, m = attn + "SelfAttention.", ff + "DenseReluDense."
        return {
            **ck.norm(attn + "layer_norm", "ln1", "LD"),
            **ck.attention_in(a + "q", a + "k", a + "v"),
            **ck.attention_out(a + "o"),
            **ck.norm(ff + "layer_norm", "ln2", "LD"),
            # gated: act(wi_0(x)) * wi_1(x), as T5DenseGatedActDense
            **(
                ck.mlp_in(m + "wi_0", "gate") | ck.mlp_in(m + "wi_1", "up")
                if cfg.gated_mlp
                else ck.mlp_in(m + "wi", "up")
            ),
            **ck.mlp_out(m + "wo"),
        }

    word = "encoder.embed_tokens" if ck.has("encoder.embed_tokens.weight") else "shared"
    table_RN = ck.get(
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        (cfg.relative_buckets.num_buckets, cfg.num_heads),
    )
    return {
        "embed": ck.embeddings(word, None, None) | {"relative_bias_NR": table_RN.T},
        "layers": ck.stack([layer(i) for i in range(cfg.num_layers)]),
        "final": ck.norm("encoder.final_layer_norm", "ln", "D"),
    }
