"""The run's tally in a job: one RunTally actor that every stage reports to, and the stages' `record`.

Its own module, without JAX: `SendToTally` is an argument of every stage's
actors and tasks, and unpickling it imports the module that defines it.
"""

from __future__ import annotations

import dataclasses
import functools

import ray

from pipeline.run.stage_clock import Increment, RunTally

# The run's RunTally actor is named by this prefix and the run's id, so that tests and
# tools find it with `ray.util.list_named_actors()` and `ray.get_actor`.
RUN_TALLY_PREFIX = "docembed-run-tally-"
RunTallyActor = ray.remote(num_cpus=0)(RunTally)


@dataclasses.dataclass(frozen=True)
class SendToTally:
    """The stages' `record` in a job: each Increment goes to the run's RunTally actor.

    Adds where it was sent from (node, and actor when it is one), so that an
    encoder actor can be found by what it reported.

    It holds the tally's name, not its handle: it is a constructor argument of
    the stages' actors, which Ray restarts with the arguments they were created
    with, and a handle is a reference Ray must keep alive for that (it logs
    ray-project/ray#53727's error when an actor with restarts has one, and only
    Ray Data's own is dropped from the console: pipeline.run.stderr_filter). A name
    is plain bytes in the creation task; each process looks the actor up once.
    """

    tally_name: str

    @functools.cached_property
    def tally(self) -> ray.actor.ActorHandle:
        return ray.get_actor(self.tally_name)

    def __call__(self, increment: Increment) -> None:
        context = ray.get_runtime_context()
        where = {"node_id": context.get_node_id()}
        if increment.encoder is not None and context.get_actor_id() is not None:
            where.update(actor_id=context.get_actor_id(), actor=context.current_actor)
        self.tally.record.remote(dataclasses.replace(increment, where=where))
