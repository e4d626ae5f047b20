"""`jobs/capacity.py`: per-core CPU stage rates on a sample, the encoder's rate, cores per chip."""

import re
import subprocess
import sys
import types

from pipeline.config import CapacityConfig
from pipeline.encode.encoder_config import EncoderConfig
from pipeline.io.shards import ShardFields
from pipeline.run.capacity import (
    CPU_STAGES,
    EncoderRate,
    cores_per_chip,
    measure_encoder,
    plan,
    render,
    sample_cpu_stages,
)
from pipeline.text.chunking import ChunkingConfig

from support import REPO, SAMPLES

CAPACITY = [sys.executable, str(REPO / "jobs" / "capacity.py")]


def test_the_sample_runs_every_cpu_stage_of_the_job():
    sample = sample_cpu_stages([str(SAMPLES)], 200, None, ChunkingConfig(256, 32), ShardFields())
    assert sample.documents == sample.inputs == 9
    assert set(sample.table.stages) == set(CPU_STAGES)
    assert sample.table.stages["chunk"].counts["chunks"] == len(sample.windows) == 21
    assert sample.encoded_tokens == 4828  # the demo corpus's figure in _SUCCESS
    assert sample.tokens_per_core_s > 0

    few = sample_cpu_stages([str(SAMPLES)], 3, None, ChunkingConfig(256, 32), ShardFields())
    assert 3 <= few.documents < 9  # spread over the input, stopped once enough were read


def test_cores_per_chip_is_the_ratio_of_rates_with_headroom():
    sample = sample_cpu_stages([str(SAMPLES / "text")], 200, None, ChunkingConfig(256, 32), ShardFields())
    chip = EncoderRate(sample.tokens_per_core_s * 10, "given")
    assert cores_per_chip(sample, chip, 1.0) == 10
    assert cores_per_chip(sample, chip, 1.25) == 13
    # A rate whose quotient comes out a last bit over: (r * 10) / r == 10.000000000000002.
    per_core = types.SimpleNamespace(tokens_per_core_s=511323.59389647166)
    assert cores_per_chip(per_core, EncoderRate(per_core.tokens_per_core_s * 10, "given"), 1.0) == 10
    text = render(sample, chip, 1.25)
    assert "with 1.25x headroom: 13" in text and "a host of N chips needs N x 13 cores" in text


def test_the_encoder_rate_is_measured_on_this_machine():
    rate = measure_encoder(None, EncoderConfig(), [[101, 2023, 102]] * 8)
    assert rate.tokens_per_chip_s > 0 and rate.cpu_host and "CPU" in rate.source


def test_the_encoder_is_measured_at_the_jobs_window():
    """At the model's 256 tokens the encoder once met the sample's 512-token windows, and failed on them."""
    assert "measured here on the CPU" in plan(CapacityConfig(inputs=(str(SAMPLES),), sample_docs=3, max_tokens=512))


def test_encoder_options_a_given_rate_makes_moot_are_named(caplog):
    cfg = CapacityConfig(
        inputs=(str(SAMPLES / "text"),),
        encoder_tokens_per_s=1e6,
        encoder=EncoderConfig(dtype="bfloat16", mesh=(("data", 3),)),
    )
    assert "given with --encoder-tokens-per-s" in plan(cfg)
    assert "docembed: --dtype, --mesh not used: --encoder-tokens-per-s gives the encoder's rate" in caplog.text


def test_command_line(tmp_path):
    ok = subprocess.run(
        CAPACITY + ["--input", str(SAMPLES), "--encoder-tokens-per-s", "1000000"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert ok.returncode == 0, ok.stderr
    assert re.search(r"encoder: 1,000,000 tokens/s per chip \(given", ok.stdout)
    assert re.search(r"with 1.25x headroom: \d+\n", ok.stdout)
    bad = subprocess.run(CAPACITY + ["--input", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.startswith("docembed: error: no documents")
    # Documents, but no text among them: no rate per core to divide by, whatever the encoder's.
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7 not really")
    argv = ["--input", str(tmp_path), "--encoder-tokens-per-s", "5000"]
    none = subprocess.run(CAPACITY + argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert none.returncode == 2 and none.stderr.startswith("docembed: error: the sample yielded no text"), none


def test_the_capacity_planner_runs_without_ray():
    """It runs the job's stage code in one process: importing it must not import Ray (nor start one)."""
    code = "import sys, pipeline.run.capacity; sys.exit(1 if 'ray' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
