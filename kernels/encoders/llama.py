"""Llama (`model_type: llama`: LlamaModel embedders), one of `decoder`'s families.

As transformers' LlamaModel: the shared decoder, its four attention projections with biases where
`attention_bias`, its MLP's three where `mlp_bias`; Llama 3.1's `llama3` RoPE frequencies where
rope_parameters (or rope_scaling) say so.
"""

from __future__ import annotations

import functools

from kernels.encoders import decoder

FAMILY = "llama"
ANCHOR = decoder.ANCHOR
DECODER = decoder.Decoder(FAMILY, max_positions=2048, biases="flags")
config_from_hf = functools.partial(decoder.config_from_hf, d=DECODER)
read = decoder.read
