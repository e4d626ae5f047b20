"""An encoder actor killed mid-job, four times in one run (`ray.kill` and SIGKILL): nothing lost or duplicated.

Ray Data restarts a dead actor of an ActorPoolStrategy map and retries its
in-flight batches on the new incarnation (its defaults for actor pools:
max_restarts=-1, max_task_retries=-1); the sink's deterministic part names and
the ledger make the retried rows land once. Each kill waits until the restarted actor has encoded a
batch, so every incarnation works, and proves that it loaded its compiled
programs from the persistent cache instead of compiling them.
"""

from __future__ import annotations

from pipeline.results import read_report

import scenarios


def test_encoder_killed_four_times_loses_and_duplicates_nothing(own_ray, tmp_path):
    corpus = scenarios.write_corpus(tmp_path / "corpus", scenarios.FILES, scenarios.SHARD_DOCS)
    cfg = scenarios.job(corpus, tmp_path)  # a fresh cache: the first incarnation compiles, the others must not
    run = scenarios.run(cfg, scenarios.KillEncoder(["ray.kill", "SIGKILL", "ray.kill", "SIGKILL"]))
    out = cfg.output

    assert run.injected == 4, "the job ended before every kill landed: make the corpus bigger"
    scenarios.check_exactly_once(out, scenarios.expected_inputs(corpus), run.report)

    success = read_report(out)
    incarnations = success["compile_cache"]
    assert len(incarnations) == 5, incarnations  # the first actor and its four restarts, each with batches
    # Each restarted actor loaded programs from the cache, and no program was
    # compiled twice: a miss is only ever a shape that no incarnation had yet. (At
    # most: an actor killed between compiling a shape and its next report takes
    # that miss with it.)
    shapes = {tuple(shape) for per_actor in success["compiled_shapes"].values() for shape in per_actor}
    assert 0 < sum(c["misses"] for c in incarnations.values()) <= len(shapes), (incarnations, shapes)
    assert sum(c["hits"] > 0 for c in incarnations.values()) == 4, incarnations
