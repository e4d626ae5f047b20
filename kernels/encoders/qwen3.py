"""Qwen3 (`model_type: qwen3`: Qwen3-Embedding-0.6B/4B/8B), one of `decoder`'s families.

As transformers' Qwen3Model: the shared decoder with q and k RMS-normed per head over head_dim (`q_norm`,
`k_norm`) before RoPE, heads `head_dim` wide (128 where config.json leaves it out) whatever hidden_size /
num_attention_heads is. No biases (`attention_bias` true is refused), no sliding window (a layer that would
slide is refused), RoPE the default or `llama3`.
"""

from __future__ import annotations

import functools

from kernels.encoders import decoder

FAMILY = "qwen3"
ANCHOR = decoder.ANCHOR
DECODER = decoder.Decoder(FAMILY, max_positions=32_768, head_dim=128, qk_norm=True, sliding="refused")
config_from_hf = functools.partial(decoder.config_from_hf, d=DECODER)
read = decoder.read
