"""The encoder as the pipeline sees it: token ids in, embeddings out.

This is the one interface between the data plane and device compute. It places
the weights on the local devices once, packs sequences into static-shape batches
and runs one jitted program per shape.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from kernels import bert
from pipeline.batching import BatchingConfig, plan_batches
from pipeline.errors import ConfigError
from pipeline.model import ModelSpec, load_params

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    dtype: str = "float32"  # compute dtype: "float32" or "bfloat16"
    attention: str = "auto"  # an implementation name from kernels.attention
    batch_size: int = 32  # rows per batch at the longest bucket

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")


@dataclasses.dataclass
class EncodeStats:
    real_tokens: int = 0
    computed_tokens: int = 0
    batches: int = 0

    def add(self, other: "EncodeStats") -> None:
        self.real_tokens += other.real_tokens
        self.computed_tokens += other.computed_tokens
        self.batches += other.batches


class Encoder:
    """Model weights on device and the compiled programs that embed token ids."""

    def __init__(self, spec: ModelSpec, cfg: EncoderConfig = EncoderConfig(), *, shrink_tail: bool = False):
        self.spec = spec
        self.cfg = cfg
        self.batching = BatchingConfig(max_seq_len=spec.max_seq_length, batch_size=cfg.batch_size, shrink_tail=shrink_tail)
        self._params = jax.device_put(bert.cast_params(load_params(spec), DTYPES[cfg.dtype]))
        self._embed = jax.jit(
            functools.partial(
                _embed, cfg=spec.bert, pooling=spec.pooling, normalize=spec.normalize, attention_impl=cfg.attention
            )
        )
        self.compiled_shapes: set[tuple[int, int]] = set()

    def encode_ids(self, token_ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, EncodeStats]:
        """Token id sequences (special tokens included) -> embeddings [n, dim] float32."""
        out = np.empty((len(token_ids), self.spec.dim), dtype=np.float32)
        stats = EncodeStats()
        for batch in plan_batches(token_ids, self.batching):
            self.compiled_shapes.add(batch.ids_BT.shape)
            emb_BD = self._embed(self._params, batch.ids_BT, batch.lengths_B)
            out[batch.rows] = np.asarray(emb_BD)[: len(batch.rows)]
            stats.add(EncodeStats(batch.real_tokens, batch.ids_BT.size, 1))
        return out, stats


def _embed(params, ids_BT, lengths_B, *, cfg, pooling, normalize, attention_impl):
    hidden_BTD = bert.forward(params, ids_BT, lengths_B, cfg, attention_impl=attention_impl)
    return bert.pool(hidden_BTD, lengths_B, mode=pooling, normalize=normalize)
