"""The output's fingerprint names the compute dtype that runs, not the one asked.

The job's driver sets it with `EncoderConfig.running_on(placement.kind)` before
anything is written. A CPU with bfloat16 dot instructions cannot be had here
(an AMD EPYC Zen 3: AVX2, no AVX-512, no AMX), so its flags are pretended."""

import pytest

from pipeline.encode import model_dir
from pipeline.encode.encoder_config import EncoderConfig
from pipeline.io.shards import ShardFields
from pipeline.output.fingerprint import fingerprint, mismatch
from pipeline.text.chunking import ChunkingConfig

CHUNKING = ChunkingConfig(max_tokens=256, overlap=16)


@pytest.fixture(scope="module")
def spec():
    return model_dir.resolve(None)


def manifest(spec, dtype: str, platform: str) -> dict:
    return fingerprint(spec, CHUNKING, EncoderConfig(dtype=dtype).running_on(platform), "pdfium", ShardFields())


def test_bfloat16_asked_on_a_cpu_without_bfloat16_dots_is_recorded_as_float32(spec, cpu_flags):
    cpu_flags("avx2", "fma")
    asked = manifest(spec, "bfloat16", "cpu")
    assert asked["dtype"] == "float32"
    # The same numbers as a float32 run: a rerun with either --dtype resumes it.
    assert asked == manifest(spec, "float32", "cpu")


def test_bfloat16_that_runs_is_recorded_and_differs_from_float32(spec, cpu_flags):
    cpu_flags("avx512_bf16", "amx_bf16")
    bf16, f32 = manifest(spec, "bfloat16", "cpu"), manifest(spec, "float32", "cpu")
    assert bf16["dtype"] == "bfloat16" and f32["dtype"] == "float32"
    assert bf16["fingerprint"] != f32["fingerprint"]
    assert "dtype 'bfloat16' there, 'float32' now" in mismatch("out", bf16, f32)


def test_an_accelerator_records_bfloat16_whatever_the_drivers_cpu(spec, cpu_flags):
    cpu_flags("avx2")
    assert manifest(spec, "bfloat16", "tpu")["dtype"] == "bfloat16"


def test_a_refusal_names_what_differs_and_the_fingerprints_only_when_they_differ(spec):
    here = {**manifest(spec, "float32", "cpu"), "inputs": ["/data/a/"]}
    moved = {**here, "inputs": ["/data/b/"]}
    message = mismatch("/out", here, moved)
    assert "an unfinished run made from other inputs (inputs ['/data/a/'] there, ['/data/b/'] now);" in message
    assert "fingerprint" not in message and message.endswith("start afresh with --overwrite")
    other = {**here, **fingerprint(spec, ChunkingConfig(256, 32), EncoderConfig(), "pdfium", ShardFields())}
    message = mismatch("/out", here, other, finished=True)
    assert f"a finished run made with other settings (fingerprint {here['fingerprint']} there, " in message
    assert "; overlap 16 there, 32 now);" in message and message.endswith("--overwrite redoes it with these")
