"""The encoder as the pipeline sees it: token ids in, embeddings out.

This is the one interface between the data plane and device compute. It lays a
mesh over this process's local devices, places the weights on it once (heads
and MLP split over `model`, replicated over `data`), packs sequences into
static-shape batches whose rows split evenly over `data` (several sequences per
row, each its own segment), and runs one jitted `shard_map` program per shape.
One device is the 1x1 mesh: the same program.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from kernels import encoders, sharding
from kernels.attention import ran as attention_ran
from kernels.compute_dtype import activation_dtype
from kernels.dense import ran as dense_ran
from pipeline.encode.batching import BatchingConfig, EncodeStats, make_batches
from pipeline.encode.cpu_devices import use_cpu_devices
from pipeline.encode.encoder_config import (
    DEFAULT_BATCH_SIZE,
    EncoderConfig,
    check_attention,
    check_dense,
    check_mesh,
    check_shape,
    compute_dtype,
)
from pipeline.encode.model_dir import ModelSpec, load_params, load_projections


class Encoder:
    """Model weights placed on a device mesh and the compiled programs that embed token ids."""

    def __init__(
        self,
        spec: ModelSpec,
        cfg: EncoderConfig = EncoderConfig(),
        *,
        tail_halvings: int = BatchingConfig.tail_halvings,
        devices: Sequence[jax.Device] | None = None,
    ):
        """`devices`: what the mesh is laid over; default this process's local devices (on CPU, one per
        core unless chosen before: see pipeline.encode.cpu_devices).
        `tail_halvings`: how far a call's last partial batch may shrink (see BatchingConfig)."""
        self.spec = spec
        self.cfg = cfg
        self.window, self.dim = check_shape(spec, cfg)
        if devices is None:
            use_cpu_devices()
            devices = jax.local_devices()
        self.mesh = sharding.make_mesh(check_mesh(spec, cfg, len(devices)), devices)
        rules = cfg.sharding
        self.dtype = compute_dtype(cfg.dtype, devices[0].platform)
        activations = activation_dtype(self.dtype, devices[0].platform)
        _check_kernels(cfg, spec, devices[0].platform)

        params = encoders.cast_params(load_params(spec), jnp.dtype(self.dtype), jnp.dtype(activations))
        params["layers"] = encoders.bfloat16_as_bits(params["layers"])  # as forward scans them
        # After the cast: the Dense modules project the pooled float32 vector in float32.
        params["projections"] = load_projections(spec)
        param_axes = encoders.param_axes(params)
        # Cast and split on the host, so each device receives only its own shard.
        self._params = jax.device_put(params, sharding.named_shardings(param_axes, rules, self.mesh))

        tokens_axes = encoders.logical("BT")
        self._batch_shardings = sharding.named_shardings((tokens_axes,) * 3, rules, self.mesh)
        self.batching = BatchingConfig(
            max_seq_len=self.window,
            batch_size=cfg.batch_size or DEFAULT_BATCH_SIZE.get(devices[0].platform, 8),
            packing=cfg.packing,
            tail_halvings=tail_halvings,
            row_multiple=sharding.axis_size(self.mesh, rules, "batch"),
        )
        embed = functools.partial(
            _embed,
            cfg=spec.arch,
            slots=self.batching.slots,
            pooling=spec.pooling,
            normalize=spec.normalize,
            activations=tuple(p.activation for p in spec.projections),
            residuals=tuple(p.residual for p in spec.projections),
            truncate_dim=spec.truncate_dim,
            dim=cfg.dim,
            attention_impl=cfg.attention,
            dense_impl=cfg.dense,
            rules=rules,
        )
        in_axes = (param_axes, tokens_axes, tokens_axes, tokens_axes)
        self._embed = jax.jit(
            sharding.shard_map(embed, self.mesh, rules, in_axes=in_axes, out_axes=encoders.logical("BSD"))
        )
        self.compiled_shapes: set[tuple[int, int]] = set()

    def encode_ids(self, token_ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, EncodeStats]:
        """Token id sequences (special tokens included) -> embeddings [n, dim] float32."""
        out = np.empty((len(token_ids), self.dim), dtype=np.float32)
        stats = EncodeStats()
        for batch in make_batches(token_ids, self.batching):
            self.compiled_shapes.add(batch.ids_BT.shape)
            tokens = jax.device_put((batch.ids_BT, batch.segments_BT, batch.positions_BT), self._batch_shardings)
            emb_BSD = np.asarray(self._embed(self._params, *tokens))
            out[batch.index] = emb_BSD[batch.row, batch.slot]
            stats.add(EncodeStats(batch.real_tokens, batch.ids_BT.size, 1))
        return out, stats

    def ran(self) -> dict:
        """What this encoder runs, for a run's report: its dtype, mesh and rows per data shard, and the
        attention and dense implementations its programs traced so far (what `auto` chose)."""
        return {
            "dtype": self.dtype,
            "mesh": dict(self.mesh.shape),
            "rows_per_shard": self.batching.batch_size,
            "packing": self.batching.packing,
            "attention": attention_ran(),
            "dense": dense_ran(),
        }


def _head(pooled_BSD, projections, activations, residuals, normalize: bool, truncate_dim: int | None, dim: int | None):
    """Pooled [B, S, D] -> the output [B, S, dim]: through the model's Dense modules (`projections`, their
    `activations` and `residuals`), normalised and cut to `truncate_dim` as the model says (not re-normalised, as
    sentence-transformers does not), then Matryoshka-truncated to `dim` and re-normalised (the first `dim`
    dimensions of a unit vector are not one)."""
    out_BSD = encoders.project(pooled_BSD, projections, activations, residuals)
    out_BSD = (encoders.normalize(out_BSD) if normalize else out_BSD)[..., :truncate_dim]
    return out_BSD if dim is None else encoders.normalize(out_BSD[..., :dim])


def _check_kernels(cfg: EncoderConfig, spec: ModelSpec, platform: str) -> None:
    """ConfigError now, where a named attention or dense kernel cannot run here, not a ValueError at the
    first call's trace (the job's driver checks both before it starts, with the same checks)."""
    check_attention(cfg.attention, platform, platform, spec)
    check_dense(cfg, platform, platform)


def _embed(
    params,
    ids_BT,
    segments_BT,
    positions_BT,
    *,
    cfg,
    slots,
    pooling,
    normalize,
    attention_impl,
    rules,
    dense_impl="auto",
    activations=(),
    residuals=(),
    truncate_dim=None,
    dim=None,
):
    """Per device: its rows [B/data, T] -> the embedding of each sequence in them [B/data, slots, D or dim].
    `params`: the encoder's, and under "projections" the Dense modules' (`model_dir.load_projections`)."""
    hidden_BTD = encoders.forward(
        params,
        ids_BT,
        segments_BT,
        positions_BT,
        cfg,
        attention_impl=attention_impl,
        dense_impl=dense_impl,
        rules=rules,
    )
    pooled_BSD = encoders.pool(hidden_BTD, segments_BT, slots, pooling)
    return _head(pooled_BSD, params["projections"], activations, residuals, normalize, truncate_dim, dim)
