"""The work's source: the listing, recorded part by part by the driver, read back by the stages as it grows.

    driver thread   Recorder        list_pages -> GroupCutter -> _inputs/part-<k> -> ledger.expect -> feed
    driver's node   ListingFeed     in the run's actor (`listing_feed`): how many parts are recorded, whether the
                                    listing ended or failed, and how many groups the driver has committed
    a worker        RecordedInputs  a Ray Data read that waits for each part, reads it, yields its work blocks,
                                    a window of groups ahead of the commits

Why a read that follows the record rather than `ray.data.from_arrow` over
tables built on the driver: the driver then holds no table, no block and no
Ray object per file (only a tally per group, in the ledger), and encoding
starts as soon as the first part is recorded, while the listing goes on. The
read is one task that mostly waits; it asks for no CPU, which also keeps Ray
Data from fusing it with the extraction tasks (it fuses only operators whose
resource requests match), so extraction still spreads over the CPU stages.

Each work block leaves the read as a Ray Data block of its own, as it is
yielded (`BlocksAsYielded`): Ray Data would otherwise merge what a read task
yields up to its target block size (128 MiB), which for a listing is the
whole corpus, one extraction task and nothing encoded until the listing ends.

The read stays at most `window` groups ahead of the driver's commits. Ray Data
holds back a stage by the bytes queued in front of the next, and tiny files
make blocks of a few KiB: without the window the read ran through the whole
record at once, and the driver held Ray Data's state for every queued block
(~40 KiB each; 400 blocks queued before the encoder at 32k tiny files). The
window is sized in encoder calls (`in_flight_groups`) so that the encoder never
waits for it: at first in the most files a call may hold, then in the files the
committed groups show a call to take (`Window`), which for PDFs is a hundred
times fewer. A window never holds the job up: a read that finds it full while
no stage holds the rows its call waits for (the stages' counts, `Flow`) grows
it (`ListingFeed.room`), and one that sees no commit for 30 s lets a group
through whatever the counts say.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.data import Datasource, ReadTask
from ray.data._internal.logical.interfaces import PhysicalPlan, Rule
from ray.data._internal.logical.optimizers import get_physical_ruleset
from ray.data._internal.output_buffer import OutputBlockSizeOption
from ray.data.block import BlockMetadata

from pipeline.io import shards
from pipeline.io.filesystems import filesystem_for
from pipeline.io.listing import Page
from pipeline.io.retries import failing_at
from pipeline.io.shards import ShardFields, ShardPlan
from pipeline.output import inputs
from pipeline.output.groups import GroupCutter, work_blocks
from pipeline.output.ledger import Ledger
from pipeline.run.listing_feed import ListingFailed
from pipeline.schemas import WORK_SCHEMA

# Rows of the first recorded part, doubling per part up to PART_ROWS: the first groups start at once, and a
# 10M-file listing is a few hundred parts.
FIRST_PART_ROWS = 64
PART_ROWS = 1 << 16
# A part is recorded at least this often while the listing has ready entries: a slow store's first groups
# never wait for a full part.
FLUSH_SECONDS = 1.0
STOP_SECONDS = 5.0
# Encoder calls' worth of files the read keeps ahead of the commits: the call being encoded, the next one
# ready behind it, and one filling.
IN_FLIGHT_CALLS = 3


def part_rows(k: int) -> int:
    return min(FIRST_PART_ROWS << min(k, 20), PART_ROWS)


def in_flight_groups(call_files: int, actors: int, group_size: int) -> int:
    """Groups the read keeps ahead of the commits: IN_FLIGHT_CALLS calls on each encoder actor of `call_files`,
    the most files an encoder call may hold. Tiny files at 64 a group, one 2-core CPU encoder (calls of 128
    packs of at most 16 files): 96 groups."""
    return max(2, -(-IN_FLIGHT_CALLS * call_files * actors // group_size))


class Window:
    """The read's window in groups, sized to what the encoder calls really take once groups commit.

    Before any commit the window assumes the most files a call may hold (`call_files`: tiny files, 16 to a
    pack), so the first calls never wait for it; a group of PDFs, that each fills at least one pack (the
    read's `pdf_window`). That bound is 3 calls of 2,048 files on a 2-core CPU, which a corpus of PDFs
    (about 24 to a call) never reaches: the read then ran through the whole record, and the chunk stage's
    packs of every PDF queued in front of the encoder, each queued block holding some 35 KiB of Ray Data's
    and Ray's state on the driver (docs/scale.md). So the committed groups' tokens per file (all
    of them so far: a sorted listing's neighbours are alike, and one odd group moves it little) say how many
    files a call of `call_tokens` takes, never more than the bound. A stretch of files bigger than the mean
    holds more calls in flight; smaller ones make the read wait for a commit, or at worst for the feed's
    stall, and never lose work.
    """

    def __init__(self, call_tokens: int, call_files: int, actors: int, group_size: int):
        self.call_tokens, self.call_files, self.actors, self.group_size = call_tokens, call_files, actors, group_size
        self.groups = in_flight_groups(call_files, actors, group_size)
        self.docs = self.tokens = 0  # of the groups committed in this run

    def committed(self, counts: dict) -> int:
        """A committed group's counts (docs_ok, docs_failed, tokens) -> the window now."""
        self.docs += counts["docs_ok"] + counts["docs_failed"]
        self.tokens += counts["tokens"]
        if self.tokens:
            files = max(1, min(self.call_files, self.call_tokens * self.docs // self.tokens))
            self.groups = in_flight_groups(files, self.actors, self.group_size)
        return self.groups


class Recorder:
    """The driver's side, in a thread: lists, cuts groups, records each part, then tells the ledger and the feed.

    `record` is what the output holds already (the ledger knows its groups);
    `pages` is None when it is whole (a rerun), otherwise the listing after its
    last URI. `error` holds what stopped the listing, for the driver to raise.
    """

    def __init__(
        self,
        output: str,
        record: inputs.Record,
        pages: Iterator[Page] | None,
        cutter: GroupCutter,
        ledger: Ledger,
        feed: ray.actor.ActorHandle,
    ):
        self.output, self.record, self.pages, self.cutter = output, record, pages, cutter
        self.ledger, self.feed = ledger, feed
        self.error: BaseException | None = None
        self.inputs, self.skipped = record.inputs, record.skipped
        self.first_recorded_at: float | None = None  # wall-clock time of this run's first recorded part
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="docembed-listing", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def listing(self) -> bool:
        """Whether the listing is still being recorded: until it ends, more groups may come."""
        return self._thread.is_alive()

    def join(self) -> None:
        """Waits for the whole listing to be recorded; raises what stopped it."""
        self._thread.join()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """Stops the listing at its next page (the driver is stopping). Waits a little for it: a page request
        that storage keeps failing retries for longer, and the thread dies with the process anyway."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=STOP_SECONDS)

    def _run(self) -> None:
        failure = None
        try:
            # Not waited for yet: the coordinator's process starts while the first part is listed and written.
            told = self.feed.recorded.remote(self.record.parts)
            if self.pages is not None:
                self._list()
            ray.get(told)  # before `end`, which the read must never see first
        except BaseException as e:  # the driver raises it; the read must stop waiting
            self.error, failure = e, f"{type(e).__name__}: {e}"
        if not self._stop.is_set():  # a stopping driver kills the feed itself
            ray.get(self.feed.end.remote(failure=failure))

    def _list(self) -> None:
        fs, root = filesystem_for(self.output)
        k, ready, flushed = self.record.parts, [], time.monotonic()
        for page in self.pages:
            if self._stop.is_set():
                raise ListingFailed("the driver is stopping")
            self.skipped += page.skipped  # wherever they lie on the page: approximate on resume (`Record.skipped`)
            entries = self.cutter.add(page.entries)
            if entries is not None:
                ready.append(entries)
            rows = sum(t.num_rows for t in ready)
            if rows and (rows >= part_rows(k) or time.monotonic() - flushed >= FLUSH_SECONDS):
                self._record(fs, root, k, ready)
                k, ready, flushed = k + 1, [], time.monotonic()
        rest = self.cutter.finish()
        if rest is not None:
            ready.append(rest)
        if ready:
            self._record(fs, root, k, ready)
            k += 1
        with failing_at(f"output {self.output}"):
            inputs.write_listed(fs, root, k, self.inputs, self.skipped)

    def _record(self, fs, root: str, k: int, tables: list[pa.Table]) -> None:
        part = pa.concat_tables(tables)
        with failing_at(f"output {self.output}"):
            inputs.write_part(fs, root, k, part, self.skipped, self.cutter.group_size)
        self.inputs += part.num_rows
        self.first_recorded_at = self.first_recorded_at or time.time()
        # The ledger knows a group before any of its rows can reach the driver.
        self.ledger.expect(inputs.groups_of(part))
        ray.get(self.feed.recorded.remote(k + 1))


READ_NAME = "RecordedInputs"


class BlocksAsYielded(Rule):
    """Ray Data's physical plan, with the recorded inputs' read handing on each block as it is yielded.

    No public Ray Data API sets one operator's output block size: a read
    task's yields are merged up to the dataset's `target_max_block_size`, and
    a smaller target for the whole dataset would slice every later stage's
    output into as many small blocks. So this rule, added to Ray Data's
    physical ruleset (a DeveloperAPI) by `register`, turns block shaping off
    for this one read, as Ray Data does for its own file listing. It reaches
    into Ray's private operator internals (Ray is pinned in constraints.txt);
    tests/pipeline/run/test_feed.py pins what it must do.
    """

    def apply(self, plan: PhysicalPlan) -> PhysicalPlan:
        todo = [plan.dag]
        while todo:
            op = todo.pop()
            todo += op.input_dependencies
            if op.name.startswith(f"Read{READ_NAME}"):  # fused or not, the read is the first transform
                read = op._map_transformer._transform_fns[0]
                read._output_block_size_option = OutputBlockSizeOption.of(disable_block_shaping=True)
        return plan

    @classmethod
    def register(cls) -> None:
        ruleset = get_physical_ruleset()
        if cls not in list(ruleset):
            ruleset.add(cls)


def read_recorded(source: RecordedInputs) -> ray.data.Dataset:
    """The job's source: one read task over the record, asking for no CPU, each work block handed on as yielded."""
    BlocksAsYielded.register()
    return ray.data.read_datasource(source, override_num_blocks=1, num_cpus=0)


class RecordedInputs(Datasource):
    """The record's parts as work blocks (WORK_SCHEMA), in order, as the driver records them.

    `done`: groups a rerun keeps (their rows are skipped); `unit_bytes`: the
    driver's `shards.UNIT_BYTES` (tests lower it); `window`: groups the read may
    keep ahead of the commits that the driver reports to `feed`, until the
    driver sends its own (`Window`); `pdf_window`: the same for a group of PDFs.
    """

    def __init__(
        self,
        output: str,
        feed: ray.actor.ActorHandle,
        done: frozenset[str],
        fields: ShardFields,
        unit_bytes: int,
        window: int,
        pdf_window: int | None = None,
    ):
        self.output, self.feed, self.done = output, feed, done
        self.fields, self.unit_bytes, self.window, self.pdf_window = fields, unit_bytes, window, pdf_window

    def get_name(self) -> str:
        return READ_NAME

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
        unknown = BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None)
        return [ReadTask(self._blocks, unknown, schema=WORK_SCHEMA)]

    def _blocks(self) -> Iterator[pa.Table]:
        done = pa.array(sorted(self.done), pa.string())
        # Groups counted as the driver counts its commits: those the rerun kept, then each one started here.
        started = len(self.done)
        group, k, yielded = None, 0, 0
        while ray.get(self.feed.wait_for.remote(k)):
            part = inputs.read_part(self.output, k)
            todo = part.filter(pc.invert(pc.is_in(part.column("group"), value_set=done)))
            for block in work_blocks(todo, self._plan):
                block_group = block.column("group")[0].as_py()
                if block_group != group:  # a group's blocks come one after another
                    # Asked at each group: the driver may have sized the window since (`Window`).
                    pdfs = self.pdf_window is not None and block.column("kind")[0].as_py() == "pdf"
                    ray.get(self.feed.room.remote(started, self.pdf_window if pdfs else self.window, yielded))
                    group, started = block_group, started + 1
                yielded += block.num_rows
                yield block
            k += 1

    def _plan(self, shard: dict) -> ShardPlan | None:
        """A big shard's units (`shards.plan_units`), planned here, in the read: a task of its own would wait for
        a CPU that the running stages hold. The blocks before it are already on their way."""
        return shards.plan_units(shard["uri"], shard["kind"], shard["size"], self.fields, self.unit_bytes)
