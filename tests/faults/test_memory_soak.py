"""Memory soak: a job of at least 1,000 encoder batches keeps the encoder's memory and program count flat.

`--batch-size 1`, a 64-token window and documents of about 45 tokens, no two of which fit one row, make
every batch a single row, so 1,000 documents are 1,000 batches (a batch costs 64 tokens, whatever its
shape). While it runs, the encoder actor's resident memory and the compilation cache are sampled;
after warm-up (the first quarter of its batches) memory grows under 5% and no program is compiled.

What it catches: growth compares the medians of the first and last thirds of the soaked samples, some 500
batches apart, against 5% of the actor's ~600 MiB. Measured with bytes kept per batch in the actor
(AMD EPYC, 2 cores): 96 KiB (one batch's hidden states, 64 x 384 float32) +8.9%, 48 KiB +5.8%, both
failures; without a leak, +0.4% to +1.6%. It soaks calls, not FLOPs, so the window is small: 256-token rows
cost it twice the CPU (a 96 KiB leak then gave +5.4%). This was 2,000 batches: twice the batches halve the
smallest leak seen, at twice the time (BENCHMARKS.md, "Memory soak").
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pipeline.encode.encoder_config import EncoderConfig
from pipeline.results import read_report

import scenarios

BATCHES = 1000
WINDOW, SENTENCES = 64, 2  # notes of about 45 tokens: each fills a 64-token row alone, one row per batch


def test_encoder_memory_and_programs_stay_flat_over_1000_batches(own_ray, tmp_path):
    corpus = scenarios.write_corpus(tmp_path / "corpus", 0, BATCHES, SENTENCES)
    # One device (a mesh of data=1 over the actor's one-per-core CPU devices), so that a batch is one row
    # whatever the node's core count: the soak counts encoder calls.
    cfg = scenarios.job(corpus, tmp_path, max_tokens=WINDOW, encoder=EncoderConfig(batch_size=1, mesh=(("data", 1),)))
    sampler = scenarios.MemorySampler(Path(cfg.compile_cache))
    run = scenarios.run(cfg, sampler)
    out = cfg.output
    scenarios.check_exactly_once(out, scenarios.expected_inputs(corpus), run.report)

    success = read_report(out)
    assert success["encoder_batches"] >= BATCHES
    (shapes,) = success["compiled_shapes"].values()  # one encoder actor, never restarted
    assert [1, WINDOW] in shapes and all(rows * length <= WINDOW for rows, length in shapes), shapes  # one budget
    (soaked,) = sampler.after_warm_up().values()
    assert len(soaked) >= 10, sampler.samples
    growth = scenarios.rss_growth(soaked)
    rss = [s.rss / 2**20 for s in soaked]
    print(
        f"soak: {success['encoder_batches']} batches in {run.seconds:.0f}s; encoder RSS after warm-up "
        f"{rss[0]:.0f} -> {rss[-1]:.0f} MiB (min {min(rss):.0f}, max {max(rss):.0f}) over {len(rss)} samples, "
        f"growth {growth:+.1%} (medians of first and last thirds)"
    )
    assert growth < 0.05, [dataclasses.astuple(s) for s in soaked]
    assert len({s.cache_entries for s in soaked}) == 1, "a program was compiled after warm-up"
