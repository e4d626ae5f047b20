"""The run's one actor on the driver's node, and the stages' `record` that reports to it.

`RunCoordinator` holds the run's small shared state: the listing feed that the
read waits on (`pipeline.run.listing_feed`), the tally that every stage
reports to (`pipeline.run.stage_clock.RunTally`), and the writers' summary
rows until the driver takes them (`pipeline.output.sink.WriteBlock`). One
actor, not one each: a Ray worker process costs about 0.7 s of CPU to start
(Ray's import and its core worker), and a job on a fresh local Ray started
nine of them, its own and Ray Data's, before its first read.

Its own module, without JAX: `SendToTally` is an argument of every stage's
actors and tasks, and unpickling it imports the module that defines it.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import ray

from pipeline.run.listing_feed import STALL_SECONDS, ListingFeed
from pipeline.run.stage_clock import Flow, Increment, RunTally

# The stages are taken as starved only after this long without an increment: a call's counts come as it ends,
# and a fused call of the CPU stages sends the extraction's before its chunk stage's last.
SETTLE_SECONDS = 0.5

# The run's coordinator is named by this prefix and the run's id, so that tests and tools find its tally with
# `ray.util.list_named_actors()` and `ray.get_actor`: the name docs/run-report.md gave the tally's own actor.
RUN_COORDINATOR_PREFIX = "docembed-run-tally-"


@ray.remote(num_cpus=0)
class RunCoordinator(ListingFeed, RunTally):
    """The feed, the tally and the writers' summaries in one process.

    An async actor, for the feed's waits. The tally's methods are plain ones,
    and Ray runs a plain method of an async actor on its event loop: each runs
    whole between the feed's awaits, as it did in an actor of its own.
    """

    def __init__(self, stall_seconds: float = STALL_SECONDS, flow: Flow | None = None):
        """`flow`: the job's stages and the rows their calls wait for; None: the stages never count as starved,
        and a full window waits for a commit or a stall."""
        ListingFeed.__init__(self, stall_seconds)
        RunTally.__init__(self)
        self.flow = flow
        self.written: list[dict] = []  # the writers' summary rows, until the driver takes them

    def starved(self, yielded: int) -> bool:
        """From the stages' counts (`Flow.starved`), once no increment has come for SETTLE_SECONDS."""
        settled = time.monotonic() - self.recorded_at >= SETTLE_SECONDS
        return self.flow is not None and settled and self.flow.starved(self.stages(), yielded)

    def wrote(self, rows: list[dict]) -> None:
        self.written.extend(rows)

    def take_written(self) -> list[dict]:
        rows, self.written = self.written, []
        return rows


@dataclasses.dataclass(frozen=True)
class SendToTally:
    """The stages' `record` in a job: each Increment goes to the run's RunCoordinator.

    Adds where it was sent from (node, and actor when it is one), so that an
    encoder actor can be found by what it reported.

    Waits until the increment is recorded, one round trip per stage call
    (no cost seen in the job against the encoder alone on 16,000 tiny files):
    the stage's output then leaves the worker after its increment is in the
    tally, so the driver, which reads the tally once the last output has
    arrived, misses none. Sent and not waited for, the last increments could
    land after that read: the coordinator is an async actor, which runs calls
    from different processes in no set order. A stage still running once the
    coordinator is gone (the driver stopping) goes on.

    It holds the coordinator's name, not its handle: it is a constructor
    argument of the stages' actors, which Ray restarts with the arguments they
    were created with, and a handle is a reference Ray must keep alive for that
    (it logs ray-project/ray#53727's error when an actor with restarts has one,
    and only Ray Data's own is dropped from the console:
    pipeline.run.stderr_filter). A name is plain bytes in the creation task;
    each process looks the actor up once.
    """

    coordinator_name: str

    @functools.cached_property
    def coordinator(self) -> ray.actor.ActorHandle:
        return ray.get_actor(self.coordinator_name)

    def __call__(self, increment: Increment) -> None:
        context = ray.get_runtime_context()
        where = {"node_id": context.get_node_id()}
        if increment.encoder is not None and context.get_actor_id() is not None:
            where.update(actor_id=context.get_actor_id(), actor=context.current_actor)
        self._wait(self.coordinator.record.remote(dataclasses.replace(increment, where=where)))

    def wrote(self, rows: list[dict]) -> None:
        """A writer's summary rows (`pipeline.output.sink.WriteBlock`), for the driver to take."""
        self._wait(self.coordinator.wrote.remote(rows))

    @staticmethod
    def _wait(call: ray.ObjectRef) -> None:
        try:
            ray.get(call)
        except ray.exceptions.RayActorError:
            pass  # the run is over (its driver killed the coordinator, or died with it): no one reads the tally
