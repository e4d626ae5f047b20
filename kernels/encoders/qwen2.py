"""Qwen2 (`model_type: qwen2`: gte-Qwen2-1.5B/7B-instruct, stella_en_1.5B_v5), one of `decoder`'s families.

As transformers' Qwen2Model: the shared decoder with biases on the q, k and v projections (always; o_proj has
none), sliding layers as `layer_types` says or from `max_window_layers` on where `use_sliding_window`.
"""

from __future__ import annotations

import functools

from kernels.encoders import decoder

FAMILY = "qwen2"
ANCHOR = decoder.ANCHOR
DECODER = decoder.Decoder(FAMILY, max_positions=32_768, biases="fixed", sliding="qwen")
config_from_hf = functools.partial(decoder.config_from_hf, d=DECODER)
read = decoder.read
