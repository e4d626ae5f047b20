"""The encode stage's per-block work: packs of chunk rows in, the chunk rows with their embeddings out.

Ray Data runs it in the encoder actors (see `pipeline.run.job`), which own their
node's accelerator or cores; like the CPU stages (`pipeline.run.stages`) it knows
nothing of Ray, so tests call it directly.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa

from pipeline.encode import model_dir
from pipeline.encode.compile_cache import compilation_cache_counts, enable_compilation_cache
from pipeline.encode.cpu_devices import use_cpu_devices
from pipeline.encode.encoder_config import EncoderConfig
from pipeline.encode.packs import unpack
from pipeline.errors import ConfigError, ModelError, UserError
from pipeline.run.stage_clock import EncoderCall, Record, StageClock
from pipeline.schemas import embedded_schema, rows_digest


class EncodeBlock:
    """Packs [p rows] -> their chunk rows [n rows] with an `embedding`, token ids dropped. Owns this process's devices.

    Packs (`pipeline.encode.packs`) make a call of p rows about p windows of tokens, however short the chunks.
    """

    # Batches traced with --profile: the first compiles, the rest show steady state.
    PROFILED_CALLS = 3

    def __init__(
        self,
        model: str | None,
        encoder: EncoderConfig,
        compile_cache: str | None = None,
        record: Record | None = None,
        profile: str | None = None,
        cpu_devices: int | None = None,
        model_fingerprint: str | None = None,
    ):
        """`cpu_devices`: on a CPU encoder actor, the devices the driver placed it with
        (`EncoderPlacement.devices_per_actor`); None elsewhere. `model_fingerprint`: the model's on the driver,
        which its output records; None takes this node's model as it is."""
        # JAX is imported here, in the encoder's process: the driver names this class and never loads JAX.
        from pipeline.encode.encoder import Encoder

        load_started = time.time()
        enable_compilation_cache(compile_cache)
        if cpu_devices is not None:
            use_cpu_devices(cpu_devices)
        # A node that must not encode for this job refuses at its first call, not here: an actor whose constructor
        # raises has its traceback printed whole by its worker and by the raylet, where a call's error reaches the
        # driver, and the user, as one line (`pipeline.run.console.worker_errors_in_one_line`).
        self.refusal: UserError | None = None
        try:
            spec = model_dir.resolve(model)
        except UserError as e:  # this node's copy: missing, cut short, its fetch failed
            self.refusal = e
            return
        if model_fingerprint is not None and spec.fingerprint != model_fingerprint:
            # A node's own copy (its cache of a URI, a path on its own disk) cut short, or of another version.
            self.refusal = ModelError(
                f"this encoder's node holds other files for model {spec.model_id} than the job's driver "
                f"(fingerprint {spec.fingerprint} here, {model_fingerprint} there): every node must hold the same"
            )
            return
        self.encoder = Encoder(spec, encoder)
        if self.encoder.dtype != encoder.dtype:
            self.refusal = ConfigError(
                f"this encoder's node runs {self.encoder.dtype} where the job's driver chose {encoder.dtype}, "
                "as its output's fingerprint records: its CPU lacks the driver's bfloat16 dot instructions; "
                "run with --dtype float32"
            )
        self.schema = embedded_schema(self.encoder.dim)
        self.clock = StageClock(record)
        self.profile_dir = None if profile is None else os.path.join(profile, self.clock.worker.replace(":", "-"))
        self.calls = 0
        self.loaded = (load_started, time.time())

    def __call__(self, packs: pa.Table) -> pa.Table:
        if self.refusal is not None:
            raise self.refusal
        self.calls += 1
        chunks = unpack(packs)
        if self.profile_dir is None or self.calls > self.PROFILED_CALLS:
            return self._encode(chunks, packs.num_rows)
        import jax  # loaded by the encoder already

        with jax.profiler.trace(self.profile_dir):
            return self._encode(chunks, packs.num_rows)

    def _encode(self, batch: pa.Table, packs: int) -> pa.Table:
        self.clock.begin(f"encode:{rows_digest(batch)}")
        ok = batch.column("error_type").is_null().to_numpy(zero_copy_only=False)
        ok_idx = ok.nonzero()[0]
        token_ids = batch.column("token_ids").take(ok_idx).to_pylist()
        with self.clock.timing("encode") as counts:
            emb_ND, stats = self.encoder.encode_ids(token_ids)
            counts.update(chunks=len(token_ids), tokens=stats.real_tokens, batches=stats.batches)
        self.clock.count("encode", rows_in=packs, rows_out=batch.num_rows)
        state = EncoderCall(
            stats,
            tuple(sorted(self.encoder.compiled_shapes)),
            compilation_cache_counts(),
            self.loaded,
            self.encoder.ran(),
        )
        self.clock.send(encoder=state)

        dim = self.encoder.dim
        flat = pa.array(emb_ND.reshape(-1), pa.float32())
        ok_embeddings = pa.FixedSizeListArray.from_arrays(flat, dim)
        # Scatter the embeddings back among the error rows, which get null.
        position = ok.cumsum() - 1
        embedding = ok_embeddings.take(pa.array(position, mask=~ok))
        table = batch.drop_columns(["token_ids"])
        return (
            table.append_column(self.schema.field("embedding"), embedding).select(self.schema.names).cast(self.schema)
        )
