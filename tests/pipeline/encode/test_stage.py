"""The encode stage runs the dtype the job's driver recorded in the output's fingerprint, or none."""

import pytest

import kernels.compute_dtype as dtype_dispatch
from pipeline.encode import encoder_config
from pipeline.encode.encoder_config import EncoderConfig
from pipeline.encode.stage import EncodeBlock
from pipeline.errors import ConfigError


def test_an_encoder_whose_cpu_would_not_run_the_drivers_bfloat16_refuses_to_start(monkeypatch):
    """The driver's CPU had bfloat16 dot instructions and chose bfloat16; this node's CPU has none (its
    flags are given, so that the test holds on any CPU)."""
    monkeypatch.setattr(dtype_dispatch, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(encoder_config, "_warned", set())
    with pytest.raises(ConfigError, match="this encoder's node runs float32 where the job's driver chose bfloat16"):
        EncodeBlock(None, EncoderConfig(dtype="bfloat16"))


def test_an_encoder_runs_the_drivers_float32_on_any_cpu(monkeypatch):
    monkeypatch.setattr(dtype_dispatch, "cpu_flags", lambda: frozenset({"avx512_bf16", "amx_bf16"}))
    assert EncodeBlock(None, EncoderConfig(dtype="float32")).encoder.dtype == "float32"
