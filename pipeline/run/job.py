"""The embedding job: a Ray Data graph from input files to committed Parquet and `_SUCCESS`.

    list inputs (driver) -> read + extract (tasks) -> tokenise + chunk (CPU actors)
      -> encode (accelerator actors) -> write parts (writer actors) -> summary rows (driver)

The driver only ever holds file names and per-block summary rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterator

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from pipeline import kinds
from pipeline.config import JobConfig
from pipeline.encode import model_dir
from pipeline.encode.encoder import DEFAULT_BATCH_SIZE, EncoderConfig, check_shape
from pipeline.encode.placement import EncoderPlacement, check_encoders, place_encoders
from pipeline.encode.stage import EncodeBlock
from pipeline.errors import InputError, StorageError
from pipeline.extract import resolve_extractor
from pipeline.extract.sandbox import ExtractConfig
from pipeline.io import shards
from pipeline.io.listing import InputFile, list_inputs
from pipeline.io.shards import ShardFields
from pipeline.io.uris import redact
from pipeline.output import sink
from pipeline.output.fingerprint import fingerprint
from pipeline.output.groups import Group, form_groups, work_blocks
from pipeline.output.layout import FORMAT
from pipeline.output.ledger import Ledger
from pipeline.output.resume import clear_staging, open_output
from pipeline.run.console import configure_ray_data, progress_shown, ray_init_args
from pipeline.run.report import ProgressLine, RunReport
from pipeline.run.shutdown import Interrupted, interruptible
from pipeline.run.stages import EXTRACT_BATCH, ChunkBlock, extract_block
from pipeline.run.stderr_filter import known_ray_noise_dropped
from pipeline.run.tally import RUN_TALLY_PREFIX, RunTallyActor, SendToTally
from pipeline.text.chunking import ChunkingConfig
from pipeline.text.tokenizer import Tokenizer

log = logging.getLogger("docembed")

# Document rows per block handed to the tokenise + chunk actors.
CHUNK_BATCH = 16
# Full encoder batches per encoder call: enough that length buckets fill and a
# call's partial tail is small beside them, few enough that encoding starts
# while extraction still runs (a call waits until its rows have arrived).
ENCODE_CALL_BATCHES = 16


def encode_call_rows(placement: EncoderPlacement, encoder: EncoderConfig) -> int:
    """Chunk rows per encoder call: ENCODE_CALL_BATCHES batches at full length on the actor's devices."""
    per_device = encoder.batch_size or DEFAULT_BATCH_SIZE[placement.kind]
    return ENCODE_CALL_BATCHES * per_device * placement.devices_per_actor


@dataclasses.dataclass(frozen=True)
class JobGraph:
    """What the stream of groups through the stages is made of, decided before it starts."""

    cfg: JobConfig
    chunking: ChunkingConfig
    extract: ExtractConfig
    placement: EncoderPlacement
    fields: ShardFields
    metadata: dict[str, str]  # Parquet metadata of every part
    record: SendToTally

    def dataset(self, groups: list[Group]) -> ray.data.Dataset:
        """The Ray Data graph over `groups`: summary rows of committed parts come out of it."""
        cfg, placement, record = self.cfg, self.placement, self.record
        # Many small input blocks (not a repartition, which would need a CPU of its own
        # while the actor pools hold theirs) so extraction spreads over workers; a
        # block never mixes groups, and a shard is one block that streams out many.
        return (
            ray.data.from_arrow(work_blocks(groups, EXTRACT_BATCH))
            .map_batches(
                extract_block,
                fn_kwargs={"fields": self.fields, "extract": self.extract, "record": record},
                batch_size=None,
                batch_format="pyarrow",
                num_cpus=placement.stage_cpus,
            )
            .map_batches(
                ChunkBlock,
                fn_constructor_args=(cfg.model, self.chunking, record),
                batch_size=CHUNK_BATCH,
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(min_size=1, max_size=placement.max_cpu_actors),
                num_cpus=placement.stage_cpus,
            )
            .map_batches(
                EncodeBlock,
                fn_constructor_args=(
                    cfg.model,
                    cfg.encoder,
                    cfg.compile_cache,
                    record,
                    cfg.profile,
                    placement.devices_per_actor if placement.kind == "cpu" else None,
                ),
                batch_size=encode_call_rows(placement, cfg.encoder),
                batch_format="pyarrow",
                # A dead encoder actor (killed, out of memory, its node gone) is restarted
                # and its in-flight batches retried, as often as it takes: Ray Data's own
                # defaults for actor pools (max_restarts=-1, max_task_retries=-1; passing
                # them here is deprecated), which tests/faults holds it to. The parts'
                # deterministic names and the ledger make a retried block land once.
                compute=ray.data.ActorPoolStrategy(size=placement.actors),
                **placement.ray_remote_args,
            )
            .map_batches(
                sink.WriteBlock,
                fn_constructor_args=(cfg.output, self.metadata, record),
                batch_size=None,
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=placement.writers),
                num_cpus=placement.stage_cpus,
            )
        )


def _init_ray(verbosity: str) -> bool:
    """Connects to Ray, or starts a private local one; True when this process started it (and so owns it)."""
    configure_ray_data(verbosity)
    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**ray_init_args(verbosity))
        return False
    # A laptop run: a private local Ray for this process only. "local" starts
    # one even when another Ray runs on this machine (plain ray.init() would
    # join the most recently started one).
    ray.init(address="local", include_dashboard=False, **ray_init_args(verbosity))
    return True


def run(cfg: JobConfig) -> RunReport | None:
    """Runs the job. Returns its report, or None when `cfg.output` already holds a finished run."""
    started = time.time()
    spec = model_dir.resolve(cfg.model)
    prompt = spec.prompt_text(cfg.prompt)
    tokenizer = Tokenizer(spec.path / "tokenizer.json", prompt=prompt)
    chunking = ChunkingConfig(
        max_tokens=cfg.max_tokens or spec.max_seq_length, overlap=cfg.overlap, prompt=prompt, mode=cfg.chunking
    )
    # The stages load the model as resolved here (a hub id pinned to its commit) at the chunks' window.
    encoder = dataclasses.replace(cfg.encoder, max_tokens=chunking.max_tokens)
    cfg = dataclasses.replace(cfg, model=spec.source, encoder=encoder)
    check_shape(spec, cfg.encoder)
    model_dir.check_weights(spec)
    chunking.validate(tokenizer.n_special, spec.arch.max_tokens)
    # Resolved here, once: the name is part of the output's fingerprint, as the extractors' texts differ.
    extract = dataclasses.replace(cfg.extract, pdf_extractor=resolve_extractor(cfg.extract.pdf_extractor))
    inputs, skipped = list_inputs(list(cfg.inputs))
    if not inputs:
        raise InputError(
            f"no documents ({kinds.described()}) under {redact(', '.join(cfg.inputs))} ({skipped} other files skipped)"
        )
    sink.check_writable(cfg.output)

    owns_ray = _init_ray(cfg.verbosity)
    # After Ray's start, so that the processes it starts never hold the filter's pipe.
    with known_ray_noise_dropped(), interruptible():
        try:
            return _run_on_ray(cfg, started, spec, chunking, extract, inputs, skipped)
        except Interrupted:
            if owns_ray:
                ray.shutdown()  # a private local Ray: its workers, actors and their sandboxes stop with it
            clear_staging(cfg.output)
            raise


def _run_on_ray(
    cfg: JobConfig,
    started: float,
    spec: model_dir.ModelSpec,
    chunking: ChunkingConfig,
    extract: ExtractConfig,
    inputs: list[InputFile],
    skipped: int,
) -> RunReport | None:
    placement = place_encoders(
        cfg.accelerator, ray.nodes(), cpu_actors=cfg.resources.encode_actors, cpu_per_actor=cfg.resources.encode_cpus
    )
    check_encoders(placement, cfg.encoder)
    log.debug("docembed: %s", placement.describe())
    # The dtype the encoders will run, named so in the fingerprint and in _SUCCESS.
    cfg = dataclasses.replace(cfg, encoder=cfg.encoder.running_on(placement.kind))
    # Only now, with every argument checked, is anything written.
    manifest = fingerprint(spec, chunking, cfg.encoder, extract.pdf_extractor)
    fields = ShardFields(id=cfg.id_field, text=cfg.text_field)
    salt = f"{FORMAT}|{manifest['fingerprint']}|{fields.id}|{fields.text}"
    groups = form_groups(inputs, cfg.group_size, salt)
    state = open_output(cfg.output, overwrite=cfg.overwrite, manifest=manifest, group_ids={g.id for g in groups})
    if state is None:
        return None
    if state.done:
        log.info(
            "docembed: resuming %s: %d of %d groups already done", redact(cfg.output), len(state.done), len(groups)
        )
    groups = _plan_big_shards(groups, set(state.done), fields, placement.stage_cpus)
    ledger = Ledger(cfg.output, groups, state)
    report = RunReport.start(cfg, spec, chunking, extract, inputs=len(inputs), skipped=skipped)
    report.add_summaries(
        [{**m["counts"], "error_types": json.dumps(m["counts"]["error_types"])} for m in state.done.values()]
    )
    todo = [g for g in groups if g.id not in state.done]
    # On the driver's node: the job outlives any other node, and so must the counters.
    tally_name = f"{RUN_TALLY_PREFIX}{uuid.uuid4().hex[:12]}"
    tally = RunTallyActor.options(
        name=tally_name,
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False),
    ).remote()
    metadata = {"docembed.fingerprint": manifest["fingerprint"], "docembed.model": manifest["model"]}
    graph = JobGraph(cfg, chunking, extract, placement, fields, metadata, SendToTally(tally_name))
    try:
        if todo:

            def update(line: ProgressLine, final: bool) -> None:
                line.update(report, 1 - len(ledger.todo) / len(ledger.members), force=final)

            stages = lambda: ray.get(tally.stages.remote())  # noqa: E731
            with progress_shown(cfg.verbosity, update, started=started, stages=stages):
                _run_groups(graph.dataset(todo), report, ledger)
        encoders, stages = ray.get([tally.encoders.remote(), tally.stages.remote()])
    finally:
        ray.kill(tally)
    report.finish(time.time() - started, encoders, stages)
    ledger.finish()
    if report.docs_ok + report.docs_failed != ledger.documents:
        raise RuntimeError(
            f"{ledger.documents} documents but {report.docs_ok} embedded and {report.docs_failed} failed: "
            "refusing to mark the output done"
        )
    success = report.to_json()
    success["output"] = {
        "fingerprint": manifest["fingerprint"],
        "documents": ledger.documents,
        "groups": len(groups),
        "groups_resumed": len(state.done),
    }
    sink.write_success(cfg.output, success)
    return report


def _plan_big_shards(groups: list[Group], done: set[str], fields: ShardFields, cpus: float) -> list[Group]:
    """`groups` with the units of each big shard still to do (pipeline.io.shards.plan_units): one
    task per shard, side by side on the CPU workers, each reading its shard's ids once."""
    unit_bytes = shards.UNIT_BYTES  # read here, in the driver: tests and bench/shards.py set it
    big = [g for g in groups if g.id not in done and g.members[0].is_shard]
    big = [g for g in big if shards.may_split(g.members[0].uri, g.members[0].size, unit_bytes)]
    plan = ray.remote(num_cpus=cpus)(shards.plan_units)
    with _storage_failures_in_one_line():
        plans = ray.get([plan.remote(f.uri, f.kind, f.size, fields, unit_bytes) for f in (g.members[0] for g in big)])
    planned = {g.id: dataclasses.replace(g, plan=p) for g, p in zip(big, plans) if p is not None}
    return [planned.get(g.id, g) for g in groups]


def _run_groups(ds: ray.data.Dataset, report: RunReport, ledger: Ledger) -> None:
    """Streams the groups through the stages; the ledger marks each group done as its last part lands."""
    summaries = iter(ds.iter_batches(batch_size=None, batch_format="pyarrow"))
    try:
        with _storage_failures_in_one_line():
            for summary in summaries:
                rows = summary.to_pylist()
                report.add_summaries(rows)
                for row in rows:
                    ledger.add(row)
    except Interrupted:
        summaries.close()  # now, not when the traceback lets go of it: Ray Data's executor stops the stages
        raise


@contextlib.contextmanager
def _storage_failures_in_one_line() -> Iterator[None]:
    """A StorageError raised in a worker, however Ray wrapped it on its way, as the driver's StorageError."""
    try:
        yield
    except Exception as e:
        cause = _storage_failure(e)
        if cause is None:
            raise
        raise StorageError(f"{cause} (groups finished so far are kept: rerun the same command to resume)") from None


def _storage_failure(e: BaseException) -> str | None:
    """The message of the StorageError behind a failure of the Ray Data job, however Ray wrapped it.

    A worker's exception reaches the driver as a RayTaskError around Ray Data's
    UserCodeException, whose cause did not survive pickling: only its text did.
    """
    seen, todo = set(), [e]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, StorageError) and not isinstance(e, ray.exceptions.RayError):
            return str(e)
        found = _REMOTE_STORAGE_ERROR.search(str(e))
        if found:
            return found.group(1).strip()
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return None


_REMOTE_STORAGE_ERROR = re.compile(r"pipeline\.errors\.StorageError: ([^\n]+)")
