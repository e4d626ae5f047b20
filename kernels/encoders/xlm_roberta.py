"""XLM-RoBERTa (`model_type: xlm-roberta`, and RoBERTa's identical `roberta`): BERT's layers and
tensor names (prefix `roberta.`), with learned positions that start after the pad id.

Hugging Face numbers a sequence's tokens padding_idx + 1, padding_idx + 2, ...
(`create_position_ids_from_input_ids`), so position p reads row p + pad + 1 and a
model with 8,194 position rows (bge-m3) covers 8,192 tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kernels.encoders import bert
from kernels.encoders._config import ModelConfig
from kernels.encoders._values import integer

FAMILY = "xlm-roberta"
ANCHOR = bert.ANCHOR


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    offset = integer(config, "pad_token_id", 1) + 1
    cfg = bert.config_from_hf(config)
    return dataclasses.replace(
        cfg,
        family=FAMILY,
        position_offset=offset,
        max_tokens=cfg.max_tokens - offset,
        type_vocab_size=integer(config, "type_vocab_size", 1),
    )


read = bert.read
