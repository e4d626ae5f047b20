"""Sentence embeddings from hidden states, per packed sequence (segment), and what comes after pooling."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from kernels.encoders._config import POOLING_MODES, PROJECTION_ACTIVATIONS, Params
from kernels.precision import MATMUL_PRECISION


def pool(hidden_BTD, segments_BT, n_slots: int, mode: str):
    """[B, n_slots, D * k] float32: slot j pools the tokens of segment j + 1 of its row (zeros if absent).

    `mode` is one of POOLING_MODES, or k of them joined by "+", whose vectors are concatenated in that order,
    as sentence-transformers concatenates a Pooling module's list of modes. Over the segment's tokens:
    mean; cls, its first token; lasttoken, its last; max, each feature's largest value; mean_sqrt_len_tokens,
    the sum over the square root of the count; weightedmean, the mean weighted by each token's position in
    its sequence, 1 for the first (SGPT's).
    """
    modes = mode.split("+")
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise ValueError(f"unknown pooling mode {unknown[0]!r}; expected one of {', '.join(POOLING_MODES)}")
    hidden = hidden_BTD.astype(jnp.float32)
    B, T, D = hidden.shape
    member_BTS = segments_BT[:, :, None] == jnp.arange(1, n_slots + 1)
    present_BS1 = member_BTS.any(axis=1)[..., None]
    t_T = jnp.arange(T)[None, :, None]
    first_BS = jnp.where(member_BTS, t_T, T).min(axis=1)
    count_BS = member_BTS.sum(axis=1).astype(jnp.float32)

    def weighted_sum(weights_BTS):
        # A sum as a matmul: at DEFAULT precision a GPU would round every hidden value to TF32.
        return jnp.einsum("BTD,BTS->BSD", hidden, weights_BTS, precision=MATMUL_PRECISION)

    def pick(index_BS):
        picked_BSD = jnp.take_along_axis(hidden, jnp.clip(index_BS, 0, T - 1)[..., None], axis=1)
        return jnp.where(present_BS1, picked_BSD, 0.0)

    def one(m: str):
        if m == "cls":
            return pick(first_BS)
        if m == "lasttoken":
            return pick(jnp.where(member_BTS, t_T, -1).max(axis=1))
        if m == "max":
            # Per (row, segment) over the flattened tokens: no [B, T, S, D] mask; slot 0 gathers the padding.
            ids_N = (jnp.arange(B)[:, None] * (n_slots + 1) + jnp.clip(segments_BT, 0, n_slots)).reshape(-1)
            top = jax.ops.segment_max(hidden.reshape(B * T, D), ids_N, num_segments=B * (n_slots + 1))
            return jnp.where(present_BS1, top.reshape(B, n_slots + 1, D)[:, 1:], 0.0)
        if m == "weightedmean":
            weights_BTS = jnp.where(member_BTS, t_T - first_BS[:, None, :] + 1, 0).astype(jnp.float32)
            return weighted_sum(weights_BTS) / jnp.maximum(weights_BTS.sum(axis=1), 1.0)[..., None]
        summed_BSD = weighted_sum(member_BTS.astype(jnp.float32))
        total_BS = count_BS if m == "mean" else jnp.sqrt(count_BS)
        return summed_BSD / jnp.maximum(total_BS, 1.0)[..., None]

    pooled = [one(m) for m in modes]
    return pooled[0] if len(pooled) == 1 else jnp.concatenate(pooled, axis=-1)


def normalize(x_SD, eps: float = 1e-12):
    """L2-normalises the last axis, with torch.nn.functional.normalize's epsilon (sentence-transformers' Normalize)."""
    return x_SD / jnp.maximum(jnp.linalg.norm(x_SD, axis=-1, keepdims=True), eps)


_PROJECTION_ACTIVATIONS = {"tanh": jnp.tanh, "identity": lambda x: x}


def project(x_BSI, weights: Sequence[Params], activations: Sequence[str], residuals: Sequence[bool] = ()):
    """sentence-transformers' Dense modules in turn: activation(x w_IO + b_O), each layer's I the last one's O;
    plus x where the layer's `residuals` entry is set (default none): x r_IO where it has r_IO, x itself
    otherwise (its I and O are the same).

    In float32 at full precision, as the pooled vectors are: these few small matmuls per sequence cost
    nothing beside the encoder, and a TF32 or bfloat16 rounding here would land in every output."""
    residuals = tuple(residuals) or (False,) * len(weights)
    for layer, activation, residual in zip(weights, activations, residuals, strict=True):
        if activation not in PROJECTION_ACTIVATIONS:
            known = ", ".join(PROJECTION_ACTIVATIONS)
            raise ValueError(f"unknown projection activation {activation!r}; known: {known}")
        y_BSO = jnp.einsum("...i,io->...o", x_BSI, layer["w_IO"], precision=MATMUL_PRECISION)
        if "b_O" in layer:
            y_BSO = y_BSO + layer["b_O"]
        y_BSO = _PROJECTION_ACTIVATIONS[activation](y_BSO)
        if residual:
            r_IO = layer.get("r_IO")
            y_BSO = y_BSO + (
                x_BSI if r_IO is None else jnp.einsum("...i,io->...o", x_BSI, r_IO, precision=MATMUL_PRECISION)
            )
        x_BSI = y_BSO
    return x_BSI
