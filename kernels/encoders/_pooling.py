"""Sentence embeddings from hidden states, per packed sequence (segment), and what comes after pooling."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp

from kernels.encoders._config import POOLING_MODES, PROJECTION_ACTIVATIONS, Params
from kernels.precision import MATMUL_PRECISION


def pool(hidden_BTD, segments_BT, n_slots: int, mode: str):
    """[B, n_slots, D] float32: slot j pools the tokens of segment j + 1 of its row (zeros if absent).

    mean: over the segment's tokens. cls: its first token. lasttoken: its last token.
    """
    if mode not in POOLING_MODES:
        raise ValueError(f"unknown pooling mode {mode!r}; expected one of {', '.join(POOLING_MODES)}")
    hidden = hidden_BTD.astype(jnp.float32)
    T = hidden.shape[1]
    member_BTS = segments_BT[:, :, None] == jnp.arange(1, n_slots + 1)
    if mode == "mean":
        # A sum as a matmul: at DEFAULT precision a GPU would round every hidden value to TF32.
        summed_BSD = jnp.einsum("BTD,BTS->BSD", hidden, member_BTS.astype(jnp.float32), precision=MATMUL_PRECISION)
        count_BS = member_BTS.sum(axis=1)
        return summed_BSD / jnp.maximum(count_BS, 1)[..., None].astype(jnp.float32)
    t_T = jnp.arange(T)[None, :, None]
    if mode == "cls":
        index_BS = jnp.where(member_BTS, t_T, T).min(axis=1)
    else:
        index_BS = jnp.where(member_BTS, t_T, -1).max(axis=1)
    picked_BSD = jnp.take_along_axis(hidden, jnp.clip(index_BS, 0, T - 1)[..., None], axis=1)
    return jnp.where(member_BTS.any(axis=1)[..., None], picked_BSD, 0.0)


def normalize(x_SD, eps: float = 1e-12):
    """L2-normalises the last axis, with torch.nn.functional.normalize's epsilon (sentence-transformers' Normalize)."""
    return x_SD / jnp.maximum(jnp.linalg.norm(x_SD, axis=-1, keepdims=True), eps)


_PROJECTION_ACTIVATIONS = {"tanh": jnp.tanh, "identity": lambda x: x}


def project(x_BSI, weights: Sequence[Params], activations: Sequence[str]):
    """sentence-transformers' Dense modules in turn: activation(x w_IO + b_O), each layer's I the last one's O.

    In float32 at full precision, as the pooled vectors are: these few small matmuls per sequence cost
    nothing beside the encoder, and a TF32 or bfloat16 rounding here would land in every output."""
    for layer, activation in zip(weights, activations, strict=True):
        if activation not in PROJECTION_ACTIVATIONS:
            known = ", ".join(PROJECTION_ACTIVATIONS)
            raise ValueError(f"unknown projection activation {activation!r}; known: {known}")
        x_BSI = jnp.einsum("...i,io->...o", x_BSI, layer["w_IO"], precision=MATMUL_PRECISION)
        if "b_O" in layer:
            x_BSI = x_BSI + layer["b_O"]
        x_BSI = _PROJECTION_ACTIVATIONS[activation](x_BSI)
    return x_BSI
