"""Mistral (`model_type: mistral`: e5-mistral-7b-instruct, SFR-Embedding-Mistral, Linq-Embed-Mistral), one of
`decoder`'s families.

As transformers' MistralModel: the shared decoder without biases, every layer attending within
`sliding_window` where it is not null (v0.1's 4096; null in later configs).
"""

from __future__ import annotations

import functools

from kernels.encoders import decoder

FAMILY = "mistral"
ANCHOR = decoder.ANCHOR
DECODER = decoder.Decoder(FAMILY, max_positions=131_072, sliding="all")
config_from_hf = functools.partial(decoder.config_from_hf, d=DECODER)
read = decoder.read
