"""Fault scenarios: a corpus, faults injected into a running job, and the exactly-once tally.

The tests in tests/faults assert on these and bench/faults.py prints their
figures, so both run the very same scenarios (the bench puts this directory on
its import path). A scenario runs `pipeline.run_job` in this process, against
the Ray the caller started, while a sidecar thread waits on the job's own
progress (the batches each encoder actor has reported to the job's RunTally
actor, found by its name) and then strikes: there are no sleeps to tune for a loaded machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import statistics
import threading
import time
from pathlib import Path

import psutil
import ray
from ray.cluster_utils import Cluster

from pipeline import JobConfig, run_job
from pipeline.io.uris import doc_id_of
from pipeline.results import read_errors, read_report, read_table
from pipeline.run.report import RunReport
from pipeline.run.stage_clock import EncoderTotals
from pipeline.run.tally import RUN_COORDINATOR_PREFIX

from support import SAMPLES, start_local_ray

DOCUMENT_SUFFIXES = (".pdf", ".txt", ".md")
# The corpus the actor and node faults strike in: many single-document files
# (small blocks, spread over every encoder actor) and a shard. The job's encoder
# calls of 16 batches (128 rows on CPU) give it many calls to strike between.
FILES, SHARD_DOCS = 800, 200
WAIT_S = 300  # for any one condition; only reached when something is broken
POLL_S = 0.2  # each look costs the cluster an actor call: not too often on a loaded machine


def note(i: int, sentences: int = 1) -> str:
    return " ".join(
        f"Note {i}.{k}: a short record about item {(i + k) * 7 % 13}, written so that a corpus holds many documents."
        for k in range(sentences)
    )


def write_corpus(root: Path, files: int, shard_docs: int = 0, sentences: int = 1) -> Path:
    """The samples (real PDFs, one of them locked: an error row), `files` notes and a jsonl shard of more.

    Single-document files travel in many small blocks, which Ray Data spreads
    over every encoder actor; a shard's documents stay together in few.
    """
    shutil.copytree(SAMPLES, root / "samples")
    (root / "notes").mkdir()
    for i in range(files):
        (root / "notes" / f"note-{i:05d}.txt").write_text(note(i, sentences))
    if shard_docs:
        rows = (json.dumps({"id": f"n{i}", "text": note(files + i, sentences)}) for i in range(shard_docs))
        (root / "shard.jsonl").write_text("\n".join(rows) + "\n")
    return root


def expected_inputs(root: Path) -> set[str]:
    """Every document of a corpus as its doc_id: a file's path (`doc_id_of`: "%" and "#" percent-encoded), or
    `shard#id` for a shard's row."""
    ids = {doc_id_of(str(p)) for p in root.rglob("*") if p.suffix in DOCUMENT_SUFFIXES}
    for shard in root.rglob("*.jsonl"):
        ids |= {f"{doc_id_of(str(shard))}#{json.loads(line)['id']}" for line in shard.read_text().splitlines()}
    return ids


@dataclasses.dataclass
class Tally:
    """What an output holds against what went in."""

    inputs: int
    outputs: int  # distinct documents in embeddings/ or errors/
    lost: int  # inputs in neither
    duplicated: int  # repeated (doc_id, chunk_index) rows, repeated error rows, documents in both
    gapped: int  # documents whose chunk indices are not 0..n-1
    foreign: int  # documents in the output that are no input


def tally(output: str, expected: set[str]) -> Tally:
    chunks = read_table(output).select(["doc_id", "chunk_index"]).to_pylist()
    failed = read_errors(output).column("doc_id").to_pylist()
    by_doc: dict[str, list[int]] = {}
    for row in chunks:
        by_doc.setdefault(row["doc_id"], []).append(row["chunk_index"])
    keys = {(r["doc_id"], r["chunk_index"]) for r in chunks}
    docs = set(by_doc) | set(failed)
    return Tally(
        inputs=len(expected),
        outputs=len(docs),
        lost=len(expected - docs),
        duplicated=len(chunks) - len(keys) + len(failed) - len(set(failed)) + len(set(by_doc) & set(failed)),
        gapped=sum(sorted(ix) != list(range(len(ix))) for ix in by_doc.values()),
        foreign=len(docs - expected),
    )


def check_exactly_once(output: str, expected: set[str], report: RunReport) -> Tally:
    """Asserts that every input is in `output` once, and that `_SUCCESS` says so too."""
    t = tally(output, expected)
    assert (t.lost, t.duplicated, t.gapped, t.foreign) == (0, 0, 0, 0), t
    success = read_report(output)
    counts = success["counts"]
    assert counts["docs_ok"] + counts["docs_failed"] == success["output"]["documents"] == len(expected)
    assert counts["chunks"] == read_table(output).num_rows and counts["docs_failed"] == read_errors(output).num_rows
    assert (report.docs_ok, report.docs_failed) == (counts["docs_ok"], counts["docs_failed"])
    # The stages' counts too: a call Ray retried after its actor died replaced its first attempt's report.
    stages = success["stages"]
    assert stages["read"]["docs"] == len(expected), stages["read"]
    assert stages["encode"]["chunks"] == counts["chunks"], stages["encode"]
    assert stages["write"]["rows"] == counts["chunks"] + counts["docs_failed"], stages["write"]
    return t


# --- the job's encoder actors, as they reported themselves to its RunCoordinator ---------------


def encoders() -> dict[str, EncoderTotals]:
    """Every encoder process that has reported to the running job ("host:pid" -> its totals); {} between jobs."""
    names = [n for n in ray.util.list_named_actors() if n.startswith(RUN_COORDINATOR_PREFIX)]
    if not names:
        return {}
    try:
        return ray.get(ray.get_actor(names[-1]).encoders.remote())
    except (ValueError, ray.exceptions.RayActorError):  # the job ended between the two calls
        return {}


def alive_encoders() -> list[EncoderTotals]:
    """Encoder processes still running, oldest report first."""
    return [e for e in encoders().values() if psutil.pid_exists(e.pid)]


def reported_batches() -> dict[int, int]:
    """Encoder actor pid -> batches it has encoded, as the running job's RunTally has heard."""
    return {e.pid: e.stats.batches for e in encoders().values()}


class Sidecar(threading.Thread):
    """A thread beside a running job: strikes or watches; stops waiting when the job has ended.

    `injected` counts the faults it caused.
    """

    def __init__(self):
        super().__init__(daemon=True)
        self.injected = 0
        self.job_done = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        try:
            self.inject()
        except BaseException as e:  # re-raised in the test's thread by `finish`
            self.error = e

    def inject(self) -> None:
        raise NotImplementedError

    def wait_for(self, condition) -> bool:
        """Until `condition()` holds (True) or the job has ended (False)."""
        deadline = time.monotonic() + WAIT_S
        while not condition():
            if self.job_done.is_set():
                return False
            if time.monotonic() > deadline:
                raise TimeoutError(f"{type(self).__name__}: waited {WAIT_S}s for {condition.__doc__}")
            time.sleep(POLL_S)
        return True

    def busy_encoder(self, node_id: str | None = None) -> EncoderTotals | None:
        """A live encoder actor (on `node_id`, if given) that has encoded batches since it last started."""
        for encoder in alive_encoders():
            if encoder.stats.batches > 0 and (node_id is None or encoder.where["node_id"] == node_id):
                return encoder
        return None

    def finish(self) -> None:
        self.job_done.set()
        self.join()
        if self.error is not None:
            raise self.error


class KillEncoder(Sidecar):
    """Kills a busy encoder actor once per entry of `methods`, each time after its restarted self has worked.

    "ray.kill": `ray.kill(actor, no_restart=False)`, Ray's own way;
    "SIGKILL": the actor's worker process killed by the OS, as the OOM killer does.
    """

    def __init__(self, methods: list[str]):
        super().__init__()
        self.methods = methods

    def inject(self) -> None:
        for method in self.methods:
            victim = None

            def busy():
                """an encoder actor that has encoded a batch"""
                nonlocal victim
                victim = self.busy_encoder()
                return victim is not None

            if not self.wait_for(busy):
                return
            if method == "ray.kill":
                ray.kill(victim.where["actor"], no_restart=False)
            else:
                os.kill(victim.pid, signal.SIGKILL)
            self.injected += 1

            def restarted(victim=victim):
                """the killed encoder actor to come back and encode"""
                return any(
                    e.where["actor_id"] == victim.where["actor_id"] and e.pid != victim.pid and e.stats.batches > 0
                    for e in alive_encoders()
                )

            if not self.wait_for(restarted):
                return


class RemoveNode(Sidecar):
    """Removes one of `workers` from `cluster`: the first whose encoder actor has encoded a batch."""

    def __init__(self, cluster: Cluster, workers: list):
        super().__init__()
        self.cluster, self.workers = cluster, workers
        self.removed = None

    def inject(self) -> None:
        def busy():
            """an encoder actor on a worker node that has encoded a batch"""
            self.removed = next((n for n in self.workers if self.busy_encoder(n.node_id)), None)
            return self.removed is not None

        if self.wait_for(busy):
            self.cluster.remove_node(self.removed)
            self.injected += 1


def job(corpus: Path, work: Path, **options) -> JobConfig:
    """The job over `corpus`, with its output and a fresh compilation cache under `work`."""
    return JobConfig(
        inputs=(str(corpus),), output=str(work / "out"), compile_cache=str(work / "compile-cache"), **options
    )


@dataclasses.dataclass
class Run:
    report: RunReport
    seconds: float
    injected: int


def run(cfg: JobConfig, sidecar: Sidecar | None = None) -> Run:
    """Runs the job in this process with `sidecar` striking meanwhile."""
    if sidecar is not None:
        sidecar.start()
    started = time.monotonic()
    try:
        report = run_job(cfg)
    finally:
        if sidecar is not None:
            sidecar.finish()
    return Run(report, time.monotonic() - started, sidecar.injected if sidecar else 0)


# --- Rays to run on -----------------------------------------------------------------------


@contextlib.contextmanager
def local_ray():
    start_local_ray()
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def three_node_cluster():
    """A head and two workers on this machine; yields (cluster, its worker nodes).

    The job plans one CPU encoder actor per node, each wanting a whole CPU. The
    head's single CPU goes to its encoder; the workers hold the other stages and
    a CPU to spare, so a removed worker's actors can start again on the other.
    """
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        workers = [cluster.add_node(num_cpus=3), cluster.add_node(num_cpus=3)]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster, workers
    finally:
        ray.shutdown()
        cluster.shutdown()


@dataclasses.dataclass(frozen=True)
class Sample:
    pid: int
    batches: int  # the actor's batches so far, as last reported
    rss: int  # bytes
    cache_entries: int  # files in the compilation cache: one more for every program compiled


class MemorySampler(Sidecar):
    """Samples each live encoder actor's resident memory, and the compilation cache, every `every_s` seconds."""

    def __init__(self, cache: Path, every_s: float = 0.25):
        super().__init__()
        self.cache, self.every_s = cache, every_s
        self.samples: list[Sample] = []

    def inject(self) -> None:
        while not self.job_done.wait(self.every_s):
            entries = sum(1 for _ in self.cache.rglob("*")) if self.cache.is_dir() else 0
            for encoder in alive_encoders():
                with contextlib.suppress(psutil.NoSuchProcess):
                    rss = psutil.Process(encoder.pid).memory_info().rss
                    self.samples.append(Sample(encoder.pid, encoder.stats.batches, rss, entries))

    def after_warm_up(self, warm_up: float = 0.25) -> dict[int, list[Sample]]:
        """Per encoder actor, its samples once it had done `warm_up` of its batches."""
        by_pid: dict[int, list[Sample]] = {}
        for s in self.samples:
            by_pid.setdefault(s.pid, []).append(s)
        return {pid: [s for s in ss if s.batches >= warm_up * ss[-1].batches > 0] for pid, ss in by_pid.items()}


def rss_growth(samples: list[Sample]) -> float:
    """Resident memory growth from the first third of `samples` to the last (medians: spikes are no leak)."""
    third = max(1, len(samples) // 3)
    first = statistics.median(s.rss for s in samples[:third])
    last = statistics.median(s.rss for s in samples[-third:])
    return last / first - 1
