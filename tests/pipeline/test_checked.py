"""The configs the Python API takes are held to their annotations at construction."""

from pathlib import Path

import pytest

from pipeline import JobConfig
from pipeline.config import CapacityConfig, Resources
from pipeline.extract.sandbox import ExtractConfig


@pytest.mark.parametrize(
    "fields, message",
    [
        # A true string: it once wiped a finished output and embedded it again.
        ({"overwrite": "no"}, "overwrite must be bool, got 'no'"),
        # Read one character at a time: "input w does not exist".
        ({"inputs": "words"}, r"inputs must be tuple\[str, \.\.\.\], got 'words'"),
        ({"inputs": ("a", 1)}, r"inputs must be tuple\[str, \.\.\.\], got \('a', 1\)"),
        ({"output": Path("out")}, "output must be str, got PosixPath"),
        ({"max_tokens": "128"}, "max_tokens must be int or None, got '128'"),
        ({"group_size": True}, "group_size must be int, got True"),
        ({"encoder": {"dim": 64}}, "encoder must be EncoderConfig, got {'dim': 64}"),
    ],
)
def test_a_job_config_field_of_the_wrong_type_is_refused_naming_it(fields, message):
    with pytest.raises(TypeError, match=f"^JobConfig field {message}"):
        JobConfig(**({"inputs": ("a",), "output": "out"} | fields))


def test_nested_configs_are_held_to_theirs_and_a_float_field_takes_an_int():
    with pytest.raises(TypeError, match="^ExtractConfig field timeout_s must be int, got '10'$"):
        ExtractConfig(timeout_s="10")
    with pytest.raises(TypeError, match="^CapacityConfig field sample_docs must be int, got 2.5$"):
        CapacityConfig(inputs=("a",), sample_docs=2.5)
    assert Resources(encode_cpus=2).encode_cpus == 2
    assert CapacityConfig(inputs=("a",), encoder_tokens_per_s=1000).encoder_tokens_per_s == 1000
