"""The embedding job: a Ray Data graph from input files to committed Parquet and `_SUCCESS`.

    list inputs, record them in groups (driver thread) -> recorded parts read back (one read task)
      -> read + extract (tasks) -> tokenise + chunk (CPU actors) -> encode (accelerator actors)
      -> write parts (writer actors) -> summary rows (driver)

The driver holds no state per input file: the listing streams to `_inputs/` as it
is made (`pipeline.run.feed`), and the ledger keeps a tally per group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import NamedTuple

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from pipeline import kinds
from pipeline.config import JobConfig, chunks_and_encoder
from pipeline.encode import model_dir
from pipeline.encode.encoder_config import DEFAULT_BATCH_SIZE, EncoderConfig
from pipeline.encode.placement import EncoderPlacement, check_encoders, place_encoders
from pipeline.encode.stage import EncodeBlock
from pipeline.errors import ClusterError, ConfigError, InputError, StorageError, first_line
from pipeline.extract import resolve_extractor
from pipeline.extract.sandbox import ExtractConfig
from pipeline.io import shards
from pipeline.io.listing import Page, list_pages, tree
from pipeline.io.shards import ShardFields
from pipeline.io.uris import is_uri, redact
from pipeline.output import sink
from pipeline.output.fingerprint import fingerprint
from pipeline.output.groups import GroupCutter
from pipeline.output.inputs import Record
from pipeline.output.layout import FORMAT, left_out
from pipeline.output.ledger import Ledger
from pipeline.output.resume import Resume, clear_staging, finished, held_alone, open_output
from pipeline.run.allocator import arrow_on_malloc, limit_arenas
from pipeline.run.console import configure_ray_data, progress_shown, ray_init_args, worker_errors_in_one_line
from pipeline.run.feed import RecordedInputs, Recorder, Window, in_flight_groups, read_recorded
from pipeline.run.listing_feed import STALL_SECONDS, ListingFailed
from pipeline.run.report import ProgressLine, RunReport, startup
from pipeline.run.shutdown import Interrupted, interruptible, raise_if_stopped
from pipeline.run.stage_clock import Flow
from pipeline.run.stages import ChunkBlock, extract_block
from pipeline.run.stderr_filter import known_ray_noise_dropped
from pipeline.run.tally import RUN_COORDINATOR_PREFIX, RunCoordinator, SendToTally
from pipeline.text.chunking import ChunkingConfig

log = logging.getLogger("docembed")

# Seconds to wait for a TCP connection to RAY_ADDRESS's cluster before saying nothing answers there.
CONNECT_TIMEOUT_S = 10
LOCAL_RAY_HINT = "unset RAY_ADDRESS to run on a private local Ray"
# Where Ray puts the logs of a session it started (its temporary directory: ray._common.utils, private).
RAY_LOGS_HINT = "Ray's own logs: ray/session_latest/logs in RAY_TMPDIR, else TMPDIR, else /tmp"
# Document rows per block handed to the tokenise + chunk actors.
CHUNK_BATCH = 16
# Full encoder batches per encoder call: enough that length buckets fill and a
# call's partial tail is small beside them, few enough that encoding starts
# while extraction still runs (a call waits until its rows have arrived).
ENCODE_CALL_BATCHES = 16


def encode_call_packs(placement: EncoderPlacement, encoder: EncoderConfig) -> int:
    """Packs per encoder call: ENCODE_CALL_BATCHES batches at full length on the actor's devices, as a pack
    is about one window of tokens (pipeline.encode.packs), whatever the chunks' lengths."""
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
    spec: model_dir.ModelSpec  # the model as this driver resolved it: every node's stages must load the same

    def flow(self) -> Flow:
        """The stages as `dataset` runs them, with the rows a call of each waits for: the extraction, fused with
        the chunk stage, CHUNK_BATCH work rows (and unfused, the chunk stage as many documents); the encoders
        a call each; a writer any row."""
        calls = encode_call_packs(self.placement, self.cfg.encoder) * self.placement.actors
        return Flow((("read", CHUNK_BATCH), ("chunk", CHUNK_BATCH), ("encode", calls), ("write", 1)))

    def dataset(self, source: RecordedInputs) -> ray.data.Dataset:
        """The Ray Data graph over the recorded listing: summary rows of committed parts come out of it."""
        cfg, placement, record = self.cfg, self.placement, self.record
        call_packs = encode_call_packs(placement, cfg.encoder)
        # Small input blocks, never mixing groups, so extraction spreads over workers; a
        # shard is one block that streams out many. The read asks for no CPU (see feed.py).
        return (
            read_recorded(source)
            .map_batches(
                extract_block,
                fn_kwargs={"fields": self.fields, "extract": self.extract, "record": record},
                batch_size=None,
                batch_format="pyarrow",
                num_cpus=placement.stage_cpus,
            )
            .map_batches(
                ChunkBlock,
                # Packs, as EncodeBlock takes them.
                fn_constructor_args=(cfg.model, self.chunking, record, call_packs, self.spec.tokenizer_identity),
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
                    self.spec.fingerprint,
                ),
                batch_size=call_packs,
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
                fn_constructor_args=(cfg.output, self.metadata, record, record.wrote),
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
    if address := os.environ.get("RAY_ADDRESS"):
        _check_answers(address)
        try:
            ray.init(**ray_init_args(verbosity))
        except ConnectionError as e:  # "auto" with no cluster on this machine: Ray's first sentence says so
            reason = str(e).split(". ")[0].rstrip(".")
            raise ConfigError(f"RAY_ADDRESS={address}: {reason}; {LOCAL_RAY_HINT}") from None
        return False
    # A laptop run: a private local Ray for this process only. "local" starts
    # one even when another Ray runs on this machine (plain ray.init() would
    # join the most recently started one).
    try:
        ray.init(address="local", include_dashboard=False, **ray_init_args(verbosity))
    except Exception as e:  # Ray raises OSErrors, RuntimeErrors and bare Exceptions ("... timed out during startup")
        raise ClusterError(f"a local Ray did not start: {first_line(e)} ({RAY_LOGS_HINT})") from None
    return True


def _check_answers(address: str) -> None:
    """A cluster address (`host:port` or `ray://host:port`) at which nothing answers is one line: ray.init would
    retry it without end. Other forms ("auto", a URL) are Ray's to read."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit() or "/" in host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        reason = e.strerror or str(e)
        raise ConfigError(f"RAY_ADDRESS={address}: nothing answers there ({reason}); {LOCAL_RAY_HINT}") from None


def run(cfg: JobConfig) -> RunReport | None:
    """Runs the job. Returns its report, or None when `cfg.output` already holds a finished run."""
    started = time.time()
    # Before Ray's threads start and the listing's first buffer: the driver's memory per file (pipeline.run.allocator).
    limit_arenas()
    arrow_on_malloc()
    spec = model_dir.resolve(cfg.model)
    chunking, encoder = chunks_and_encoder(spec, cfg)
    # The stages load the model as resolved here (a hub id pinned to its commit) at the chunks' window.
    cfg = dataclasses.replace(cfg, model=spec.source, encoder=encoder)
    model_dir.check_weights(spec)
    for flag, directory in (("--compile-cache", cfg.compile_cache), ("--profile", cfg.profile)):
        _writable_directory(flag, directory)
    # Resolved here, once: the name is part of the output's fingerprint, as the extractors' texts differ.
    extract = dataclasses.replace(cfg.extract, pdf_extractor=resolve_extractor(cfg.extract.pdf_extractor))
    listing = _listing_with_documents(cfg.inputs, left_out(tree(cfg.output)))
    sink.check_writable(cfg.output)
    raise_if_stopped()  # a stop swallowed by an import above: before the output's lease, nothing is written
    with held_alone(cfg.output) as still_held:
        if _finished_before_ray(cfg, spec, chunking, extract):
            return None
        try:
            owns_ray = _init_ray(cfg.verbosity)
        except SystemExit as e:  # SIGTERM meets Ray's driver handler from within ray.init: sys.exit(signum)
            if e.code != signal.SIGTERM:
                raise
            raise Interrupted(signal.SIGTERM) from None
        # After Ray's start, so that the processes it starts never hold the filter's pipe.
        with known_ray_noise_dropped(), interruptible():
            ray_ready, placed = time.time(), None
            try:
                placed = _placed(cfg, spec, chunking, extract)
                return _run_on_ray(placed, started, ray_ready, spec, chunking, extract, listing, still_held)
            except Interrupted as e:
                # `_run_on_ray` begins the output first: a stop before it has written nothing there to resume.
                e.output_begun = placed is not None
                if owns_ray:
                    ray.shutdown()  # a private local Ray: its workers, actors and their sandboxes stop with it
                with contextlib.suppress(StorageError):  # the store may be why it was stopped; the next run clears it
                    clear_staging(cfg.output)
                raise


def _writable_directory(flag: str, directory: str | None) -> None:
    """ConfigError now where a local directory the encoder actors write to cannot be made (a file is in the
    way): they would fail after the output was begun. Cluster nodes have the same paths as the driver's."""
    if directory is None or is_uri(directory):  # the profiler writes gs:// too
        return
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{flag} {directory}: {e.strerror or e}") from None


def _listing_with_documents(locations: tuple[str, ...], own: Callable[[str], bool]) -> Iterator[Page]:
    """The listing, once it has found a document: InputError before anything is written or started unless it does.

    A fresh run records this same listing, so the pages read to find the first document are not asked for twice.
    The files of docembed outputs (`own`: the run's, and any other under an input) are never inputs.
    """
    pages = list_pages(list(locations), leave_out=own)
    seen, skipped = [], 0
    for page in pages:
        seen.append(page)
        if page.entries.num_rows:
            return itertools.chain(seen, pages)
        skipped += page.skipped
    raise InputError(
        f"no documents ({kinds.described()}) under {redact(', '.join(locations))} ({skipped} other files skipped)"
    )


class Placed(NamedTuple):
    """What is decided on Ray before anything is written: the config as the encoders will run it, where they run,
    the shards' fields and the output's manifest."""

    cfg: JobConfig
    placement: EncoderPlacement
    fields: ShardFields
    manifest: dict


def _placed(cfg: JobConfig, spec: model_dir.ModelSpec, chunking: ChunkingConfig, extract: ExtractConfig) -> Placed:
    placement = place_encoders(
        cfg.accelerator, ray.nodes(), cpu_actors=cfg.resources.encode_actors, cpu_per_actor=cfg.resources.encode_cpus
    )
    check_encoders(placement, cfg.encoder, spec)
    log.debug("docembed: %s", placement.describe())
    # The dtype the encoders will run, named so in the fingerprint and in _SUCCESS.
    cfg = dataclasses.replace(cfg, encoder=cfg.encoder.running_on(placement.kind))
    return Placed(cfg, placement, _shard_fields(cfg), _manifest(cfg, spec, chunking, extract))


def _shard_fields(cfg: JobConfig) -> ShardFields:
    return ShardFields(id=cfg.id_field, text=cfg.text_field)


def _manifest(cfg: JobConfig, spec: model_dir.ModelSpec, chunking: ChunkingConfig, extract: ExtractConfig) -> dict:
    """The output's fingerprint of what makes its numbers, and its inputs. The inputs make no number of the output,
    so they are not in its fingerprint; but a rerun over other inputs must not resume this output, whose recorded
    listing it would finish instead."""
    inputs = sorted({tree(location) for location in cfg.inputs})
    return {**fingerprint(spec, chunking, cfg.encoder, extract.pdf_extractor, _shard_fields(cfg)), "inputs": inputs}


def _finished_before_ray(
    cfg: JobConfig, spec: model_dir.ModelSpec, chunking: ChunkingConfig, extract: ExtractConfig
) -> bool:
    """Whether the output holds this run finished (`resume.finished`), asked before Ray starts where the encoders'
    platform cannot change the fingerprint: float32 runs as float32 on every one (`kernels.compute_dtype`),
    where bfloat16 may run as float32 on a CPU. A rerun over a finished output then starts no Ray: 1.2 s, not 5.8 s,
    over the samples' (2-core Xeon). Otherwise `_open` asks it on Ray, with the placement's dtype."""
    return cfg.encoder.dtype == "float32" and finished(
        cfg.output, overwrite=cfg.overwrite, manifest=_manifest(cfg, spec, chunking, extract)
    )


def _run_on_ray(
    placed: Placed,
    started: float,
    ray_ready: float,
    spec: model_dir.ModelSpec,
    chunking: ChunkingConfig,
    extract: ExtractConfig,
    listing: Iterator[Page],
    still_held: Callable[[], None],
) -> RunReport | None:
    cfg, placement, fields, manifest = placed
    salt = f"{FORMAT}|{manifest['fingerprint']}|{fields.id}|{fields.text}"
    opened = _open(cfg, manifest, listing, still_held)
    if opened is None:
        return None
    state, ledger, pages = opened
    record = state.record
    coordinator_name = f"{RUN_COORDINATOR_PREFIX}{uuid.uuid4().hex[:12]}"
    metadata = {"docembed.fingerprint": manifest["fingerprint"], "docembed.model": manifest["model"]}
    tally = SendToTally(coordinator_name)
    graph = JobGraph(cfg, chunking, extract, placement, fields, metadata, tally, spec)
    coordinator = _on_this_node(RunCoordinator, coordinator_name, STALL_SECONDS, graph.flow())
    recorder = Recorder(cfg.output, record, pages, GroupCutter(cfg.group_size, salt), ledger, coordinator)
    report = RunReport.start(cfg, spec, chunking, extract)
    report.add_summaries(
        [{**m["counts"], "error_types": json.dumps(m["counts"]["error_types"])} for m in state.done.values()],
        resumed=True,
    )
    # A pack is about one window of tokens and holds the chunks of one chunk-stage call, so at most CHUNK_BATCH
    # files.
    call_packs = encode_call_packs(placement, cfg.encoder)
    window = Window(call_packs * chunking.max_tokens, call_packs * CHUNK_BATCH, placement.actors, cfg.group_size)
    # Until a group commits, a PDF is taken to fill at least one pack (a window of tokens; a page of prose is
    # about two): the most files a call may hold would let 6,144 PDFs into the stages before the first commit.
    pdf_window = in_flight_groups(call_packs, placement.actors, cfg.group_size)
    source = RecordedInputs(
        cfg.output, coordinator, frozenset(state.done), fields, shards.UNIT_BYTES, window.groups, pdf_window
    )
    try:
        if pages is not None or ledger.todo:
            recorder.start()

            def update(line: ProgressLine, final: bool) -> None:
                line.update(report, ledger.done, ledger.todo, listing=recorder.listing, force=final)

            fetch_stages = lambda: ray.get(coordinator.stages.remote())  # noqa: E731
            with progress_shown(cfg.verbosity, update, started=started, stages=fetch_stages):
                _run_groups(graph.dataset(source), report, ledger, recorder, window, still_held)
        encoders, stages, report.read_window = ray.get(
            [coordinator.encoders.remote(), coordinator.stages.remote(), coordinator.read_window.remote()]
        )
    finally:
        recorder.stop()
        ledger.close()  # before the coordinator, which a marker landing tells
        ray.kill(coordinator)
    report.inputs, report.skipped = recorder.inputs, recorder.skipped
    report.first_group_seconds = ledger.first_done_at and ledger.first_done_at - started
    marks = {
        "Ray ready": ray_ready,
        "first part of the listing recorded": recorder.first_recorded_at,
        "first group committed": ledger.first_done_at,
    }
    report.startup = startup(started, marks, stages, encoders)
    report.finish(time.time() - started, encoders, stages)
    _mark_done(cfg.output, report, ledger, state, manifest["fingerprint"], still_held)
    return report


def _open(
    cfg: JobConfig, manifest: dict, listing: Iterator[Page], still_held: Callable[[], None]
) -> tuple[Resume, Ledger, Iterator[Page] | None] | None:
    """Opens the output (only now, with every argument checked, is anything written): what it holds, the ledger
    that knows its recorded groups, and the listing's pages still to record (None: recorded whole). None when the
    output holds this run finished."""
    state = open_output(cfg.output, overwrite=cfg.overwrite, manifest=manifest)
    if state is None:
        return None
    record = state.record
    if state.done:
        log.info(
            "docembed: resuming %s: %d of %d recorded groups already done%s",
            redact(cfg.output),
            len(state.done),
            len(record.groups),
            "" if record.complete else " (the listing goes on after the recorded part)",
        )
    _say_recorded_group_size(record, cfg.group_size)
    ledger = Ledger(cfg.output, state, still_held)
    ledger.expect(record.groups)
    if record.complete:
        pages = None
    elif record.last_uri is None:
        pages = listing
    else:  # the listing goes on after the part a stopped run recorded
        pages = list_pages(list(cfg.inputs), start_after=record.last_uri, leave_out=left_out(tree(cfg.output)))
    return state, ledger, pages


def _mark_done(
    output: str, report: RunReport, ledger: Ledger, state: Resume, fingerprint: str, still_held: Callable[[], None]
) -> None:
    """Writes `_SUCCESS` once every group is done, every document counted once, and the output still this run's."""
    ledger.finish()
    if report.docs_ok + report.docs_failed != ledger.documents:
        raise RuntimeError(
            f"{ledger.documents} documents but {report.docs_ok} embedded and {report.docs_failed} failed: "
            "refusing to mark the output done"
        )
    success = report.to_json()
    success["output"] = {
        "fingerprint": fingerprint,
        "documents": ledger.documents,
        "groups": ledger.done,
        "groups_resumed": len(state.done),
    }
    still_held()
    sink.write_success(output, success)


def _say_recorded_group_size(record: Record, group_size: int) -> None:
    """Says when --group-size is not what cut the recorded listing's groups: a resume keeps those groups (their ids
    are recorded, their finished parts named by their markers), so the new size cuts only what is listed after them."""
    if not record.group_sizes - {group_size}:
        return
    applies = "changes nothing here" if record.complete else "applies only to the inputs listed after the recorded part"
    log.info(
        "docembed: --group-size %d %s: the recorded groups (cut at --group-size %s) are kept; --overwrite starts "
        "afresh with it",
        group_size,
        applies,
        ", ".join(map(str, sorted(record.group_sizes))),
    )


def _on_this_node(actor_class, name: str, *args) -> ray.actor.ActorHandle:
    """An actor on the driver's node: the job outlives any other node, and so must the counters and the feed."""
    node = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return actor_class.options(scheduling_strategy=node, name=name).remote(*args)


def _run_groups(
    ds: ray.data.Dataset,
    report: RunReport,
    ledger: Ledger,
    recorder: Recorder,
    window: Window,
    still_held: Callable[[], None],
) -> None:
    """Streams the groups through the stages as the listing is recorded; the ledger marks each group done as its
    last part lands (its marker written beside the loop), and the read's window follows what the committed groups
    held. A failed listing stops the stages (its read fails) and is raised as itself.

    The writers' summary rows come from the run's coordinator (`recorder.feed`), which has them before a writer's
    block leaves it, so each block seen here means its rows are there to take. The blocks themselves (empty)
    are never read: see `sink.WriteBlock`. Ray Data's executor stops when its iterator is collected, which an
    exception leaving the loop does at once. A run whose output another run has taken over (`still_held`) stops
    before its next commit.
    """

    def committed(marker: dict, done: int) -> None:  # in the ledger's thread that wrote the marker
        recorder.feed.commit.remote(done, window.committed(marker["counts"]))  # the read's window counts commits

    with worker_errors_in_one_line():
        try:
            for _ in ds.iter_internal_ref_bundles():
                still_held()
                report.add_summaries(ledger.add(ray.get(recorder.feed.take_written.remote()), committed))
            ledger.landed()
        except Interrupted:
            recorder.stop()
            raise
        except Exception:
            recorder.stop()
            if recorder.error is not None and not isinstance(recorder.error, ListingFailed):
                raise recorder.error from None
            raise
        recorder.join()
