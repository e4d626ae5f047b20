"""The run report: what `_SUCCESS` records and what the job prints at the end."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import time

from pipeline.config import JobConfig
from pipeline.encode.batching import EncodeStats
from pipeline.encode.model_dir import ModelSpec
from pipeline.extract.sandbox import ExtractConfig
from pipeline.run.stage_clock import EncoderTotals, StageTable
from pipeline.text.chunking import ChunkingConfig


@dataclasses.dataclass
class RunReport:
    model_id: str
    model_fingerprint: str
    config: dict
    # The listing's counts, known when the listing has been recorded whole: set as the run ends.
    inputs: int = 0
    skipped: int = 0
    docs_ok: int = 0
    docs_failed: int = 0
    chunks: int = 0
    tokens: int = 0
    error_types: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # docs, chunks and tokens of the groups an earlier run finished: in the counts, not in this run's throughput
    resumed: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    wall_seconds: float = 0.0
    first_group_seconds: float | None = None  # from the start to this run's first committed group
    startup: list[tuple[str, float]] = dataclasses.field(default_factory=list)  # see `startup`
    encode: EncodeStats = dataclasses.field(default_factory=EncodeStats)
    compiled_shapes: dict[str, list] = dataclasses.field(default_factory=dict)
    compile_cache: dict[str, dict] = dataclasses.field(default_factory=dict)  # per encoder: hits, misses
    ran: dict[str, dict] = dataclasses.field(default_factory=dict)  # per encoder: what it ran (`Encoder.ran`)
    stages: StageTable = dataclasses.field(default_factory=StageTable)
    read_window: dict = dataclasses.field(default_factory=dict)  # `ListingFeed.read_window`
    finished_at: str = ""

    @classmethod
    def start(
        cls,
        cfg: JobConfig,
        spec: ModelSpec,
        chunking: ChunkingConfig,
        extract: ExtractConfig,
    ) -> RunReport:
        """`extract` with its PDF extractor resolved: the name of the one that ran."""
        config = {
            "inputs": list(cfg.inputs),
            "model": spec.recorded_source,
            "model_path": str(spec.path.absolute()),
            "max_seq_length": spec.max_seq_length,
            "pooling": spec.pooling,
            "normalize": spec.normalize,
            "chunking": dataclasses.asdict(chunking),
            "encoder": dataclasses.asdict(cfg.encoder),
            "extract": dataclasses.asdict(extract),
        }
        return cls(spec.model_id, spec.fingerprint, config)

    def add_summaries(self, rows: list[dict], *, resumed: bool = False) -> None:
        """Committed groups' counts: this run's, or (`resumed`) those an earlier run of this output finished."""
        for row in rows:
            self.docs_ok += row["docs_ok"]
            self.docs_failed += row["docs_failed"]
            self.chunks += row["chunks"]
            self.tokens += row["tokens"]
            self.error_types.update(json.loads(row["error_types"]))
            if resumed:
                docs = row["docs_ok"] + row["docs_failed"]
                self.resumed.update(groups=1, docs=docs, chunks=row["chunks"], tokens=row["tokens"])

    def finish(self, wall_seconds: float, encoders: dict[str, EncoderTotals], stages: StageTable) -> None:
        self.wall_seconds = wall_seconds
        self.stages = stages
        self.finished_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for name, totals in encoders.items():
            self.encode.add(totals.stats)
            self.compiled_shapes[name] = [list(s) for s in totals.compiled_shapes]
            self.compile_cache[name] = totals.compile_cache
            self.ran[name] = totals.ran

    @property
    def padding_efficiency(self) -> float:
        return self.encode.real_tokens / self.encode.computed_tokens if self.encode.computed_tokens else 0.0

    def to_json(self) -> dict:
        wall = max(self.wall_seconds, 1e-9)
        return {
            "counts": {
                "inputs": self.inputs,
                "skipped": self.skipped,
                "docs_ok": self.docs_ok,
                "docs_failed": self.docs_failed,
                "chunks": self.chunks,
                "tokens": self.tokens,
            },
            "errors_by_type": dict(self.error_types),
            "model": {"id": self.model_id, "fingerprint": self.model_fingerprint},
            "config": self.config,
            "wall_seconds": round(self.wall_seconds, 3),
            "first_group_seconds": None if self.first_group_seconds is None else round(self.first_group_seconds, 3),
            "startup_seconds": [list(step) for step in self.startup],
            "throughput": {  # this run's own work
                "docs_per_s": round((self.docs_ok + self.docs_failed - self.resumed["docs"]) / wall, 3),
                "chunks_per_s": round((self.chunks - self.resumed["chunks"]) / wall, 3),
                "tokens_per_s": round((self.tokens - self.resumed["tokens"]) / wall, 1),
            },
            "padding_efficiency": round(self.padding_efficiency, 4),
            "encoder_batches": self.encode.batches,
            "compiled_shapes": self.compiled_shapes,
            "compile_cache": self.compile_cache,
            "encoders_ran": self.ran,
            "stages": self.stages.to_json(self.wall_seconds),
            "bottleneck": self.stages.bottleneck(self.wall_seconds),
            "read_window": self.read_window,
            "finished_at": self.finished_at,
        }

    def ran_line(self) -> str:
        """What the encoders ran, each setting once: 'float32, mesh data=2, attention blockwise, dense xla'."""
        said = []
        for ran in self.ran.values():
            mesh = ",".join(f"{axis}={size}" for axis, size in ran.get("mesh", {}).items())
            for part in (
                ran.get("dtype"),
                f"mesh {mesh}",
                *(f"attention {a['impl']} at {a['kv_seq']} keys" for a in ran.get("attention", [])),
                *(f"dense {d['impl']} ({d['weights']} weights)" for d in ran.get("dense", [])),
            ):
                if part not in said:
                    said.append(part)
        return ", ".join(said) or "no encoder call"

    def summary(self) -> str:
        """A few lines for a person reading the job log."""
        t = self.to_json()["throughput"]
        # A shard is one input of many documents: then the documents are counted too, which the rest add up to.
        docs = self.docs_ok + self.docs_failed
        documents = f", {docs} documents" if docs != self.inputs else ""
        lines = [
            f"docembed: {self.inputs} inputs ({self.skipped} skipped){documents}: {self.docs_ok} embedded, "
            f"{self.docs_failed} failed; {self.chunks} chunks, {self.tokens} tokens in {self.wall_seconds:.1f}s",
            f"  throughput {t['tokens_per_s']:.0f} tokens/s, {t['docs_per_s']:.2f} docs/s; "
            f"padding efficiency {self.padding_efficiency:.1%}; "
            f"compiled shapes per encoder {[len(s) for s in self.compiled_shapes.values()]}",
            f"  {self.stages.line(self.wall_seconds)}",
            "  start-up: " + (", ".join(f"{step} {t:.1f}s" for step, t in self.startup) or "none"),
            f"  ran: {self.ran_line()}",
            f"  model {self.model_id} (fingerprint {self.model_fingerprint})",
        ]
        if self.error_types:
            lines.append("  errors: " + ", ".join(f"{k} x{v}" for k, v in self.error_types.most_common()))
        if self.changed_inputs:
            lines.append(
                f"  warning: files that differ in size from this output's recorded listing: {self.changed_inputs}; "
                "they changed after the run that listed them started, and were read as they are now, while groups "
                "finished before hold what was read then (--overwrite reads every file again)"
            )
        return "\n".join(lines)

    @property
    def changed_inputs(self) -> int:
        """Files this run read whose size is not the one its listing recorded (`pipeline.run.stages`)."""
        read = self.stages.stages.get("read")
        return read.counts["changed"] if read is not None else 0


# The stages whose first call marks a step of a run's start.
STARTUP_STAGES = ("read", "extract", "tokenise", "encode", "write")


def startup(
    started: float, marks: dict[str, float | None], stages: StageTable, encoders: dict[str, EncoderTotals]
) -> list[tuple[str, float]]:
    """(step, seconds from the run's start) for each of its first steps, in the order they came (`started`:
    time.time; a list, as _SUCCESS's JSON sorts a dict's keys).

    `marks`: the driver's own steps (Ray ready, first part of the listing recorded, first group committed;
    None when the run had no such step). Then the first encoder's load (its start and end) and each stage's
    first call, from what the workers reported: the gaps say where a short run's time goes.
    """
    steps = dict(marks)
    loads = [e.loaded for e in encoders.values() if not math.isnan(e.loaded[0])]
    if loads:
        steps["encoder load started"], steps["encoder loaded"] = min(loads)
    for stage in STARTUP_STAGES:
        if stage in stages.stages:
            steps[f"first {stage} call"] = stages.stages[stage].first
    timed = sorted((t, step) for step, t in steps.items() if t is not None)
    return [(step, round(t - started, 3)) for t, step in timed]


class ProgressLine:
    """A line for a person watching `ray job logs`, at most every `every_s` seconds.

    Ray Data's own progress shows each operator; this line says what the job as
    a whole has done: documents and tokens per second, errors so far, an ETA
    from the share of this run's groups that is finished, and how busy each
    stage is. On a resumed run the rates and the ETA are this run's own: the
    groups an earlier run finished are counted in the progress only. While
    the listing goes on, the groups still to come are not known, nor the ETA.
    `stages` fetches the run's StageTable so far (only when a line is due).
    """

    def __init__(self, every_s: float = 10.0, clock=time.time, emit=print, started: float | None = None, stages=None):
        self.every_s, self.clock, self.emit, self.stages = every_s, clock, emit, stages
        self.last = clock()
        self.started = self.last if started is None else started

    def update(self, report: RunReport, done: int, todo: int, *, listing: bool = False, force: bool = False) -> None:
        """`done` groups are committed (resumed ones too), `todo` recorded ones not yet; `listing`: more may come."""
        now = self.clock()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        docs = report.docs_ok + report.docs_failed
        # The rates are this run's own work, as in `RunReport.to_json`: not what an earlier run of the output did.
        docs_per_s = (docs - report.resumed["docs"]) / elapsed
        tokens_per_s = (report.tokens - report.resumed["tokens"]) / elapsed
        mine = done - report.resumed["groups"]
        eta = "unknown"
        if not listing and todo == 0:
            eta = "0s"
        elif not listing and mine > 0:
            eta = f"{elapsed * todo / mine:.0f}s"
        done_fraction = done / max(1, done + todo)
        line = (
            f"docembed: progress {done_fraction:.0%}: {docs} docs ({report.docs_failed} failed), "
            f"{report.tokens} tokens; "
            f"{docs_per_s:.1f} docs/s, {tokens_per_s:,.0f} tokens/s; ETA {eta}"
        )
        if self.stages is not None:
            line += f"; {self.stages().line(elapsed)}"
        self.emit(line)
