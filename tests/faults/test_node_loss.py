"""A worker node lost mid-job on a three-node Ray cluster: the job completes on the rest, exactly once.

The removed node takes its encoder actor, its share of the other stages and the
blocks in its object store with it. Ray restarts the actors elsewhere and
rebuilds lost blocks from their lineage; re-run writers land on the same part
names, and the ledger counts each group once.
"""

from __future__ import annotations

import ray

from pipeline.encode.encoder_config import EncoderConfig

import scenarios


def test_worker_node_removed_mid_job_loses_and_duplicates_nothing(tmp_path):
    corpus = scenarios.write_corpus(tmp_path / "corpus", scenarios.FILES, scenarios.SHARD_DOCS)
    # Encoder calls are sized in windows of tokens (16 batches each): at the default batch of 4 this corpus of
    # about 100 windows is two calls, which the head's encoder may take alone. Batches of one make it about 7
    # calls over the three encoders, so that one on a worker node works before the job ends.
    cfg = scenarios.job(corpus, tmp_path, encoder=EncoderConfig(batch_size=1))
    with scenarios.three_node_cluster() as (cluster, workers):
        remover = scenarios.RemoveNode(cluster, workers)
        run = scenarios.run(cfg, remover)
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert run.injected == 1, "the job ended before a worker's encoder had encoded a batch"
    assert remover.removed.node_id not in alive and len(alive) == 2
    scenarios.check_exactly_once(cfg.output, scenarios.expected_inputs(corpus), run.report)
