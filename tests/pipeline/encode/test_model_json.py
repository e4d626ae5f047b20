"""A model directory's JSON files: each way one can be wrong is one ModelError line naming the file."""

import pytest

from pipeline.encode.model_json import read_json, read_object
from pipeline.errors import ModelError


def test_a_file_is_read_and_an_absent_one_is_its_default(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 384}')
    assert read_object(tmp_path / "config.json") == {"hidden_size": 384}
    assert read_object(tmp_path / "absent.json", {}) == {}
    assert read_json(tmp_path / "modules.json", default=[]) == []


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda path: None, r"model directory .* has no config.json$"),
        (lambda path: path.write_text('{"hidden_size": 3'), r"cannot read .*config.json: "),
        (lambda path: path.mkdir(), r"cannot read .*config.json: "),
        (lambda path: path.write_text("[1, 2]"), r"config.json holds a JSON list, not an object$"),
    ],
    ids=["absent", "cut-short", "a-folder", "a-list"],
)
def test_a_file_without_an_object_is_one_line(tmp_path, make, message):
    make(tmp_path / "config.json")
    with pytest.raises(ModelError, match=message) as e:
        read_object(tmp_path / "config.json")
    assert "\n" not in str(e.value)
