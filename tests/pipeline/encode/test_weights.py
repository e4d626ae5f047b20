"""Which files hold a model's tensors, their digest, their shapes and their tensors, in both formats."""

import hashlib
import json
import shutil

import numpy as np
import pytest

from pipeline.encode import weights
from pipeline.errors import ModelError

from support import FAMILY_FIXTURES, REPO

TORCH_FIXTURES = REPO / "tests" / "fixtures" / "torch_pickle"
SHARDED = "xlm-roberta-sharded"


def test_safetensors_are_read_where_both_are_there(tmp_path):
    both = tmp_path / "both"
    shutil.copytree(FAMILY_FIXTURES / "distilbert-dense", both)
    shutil.copy(TORCH_FIXTURES / "distilbert-dense" / "pytorch_model.bin", both)
    assert weights.files(both) == [both / "model.safetensors"]
    assert weights.dense_file(both / "2_Dense") == both / "2_Dense" / "model.safetensors"


@pytest.mark.parametrize("root, shard", [(FAMILY_FIXTURES, ".safetensors"), (TORCH_FIXTURES, ".bin")])
def test_a_sharded_copy_is_its_index_then_its_shards_in_order(root, shard):
    found = weights.files(root / SHARDED)
    assert found[0].name.endswith(".index.json") and [f.suffix for f in found[1:]] == [shard] * 4
    assert weights.tensor_files(root / SHARDED) == found[1:] == sorted(found[1:])


def test_the_digest_is_the_files_sha256_or_that_of_each_files_joined():
    (single,) = weights.files(FAMILY_FIXTURES / "distilbert-dense")
    assert weights.digest([single]) == hashlib.sha256(single.read_bytes()).hexdigest()
    sharded = weights.files(FAMILY_FIXTURES / SHARDED)
    each = "|".join(hashlib.sha256(f.read_bytes()).hexdigest() for f in sharded)
    assert weights.digest(sharded) == hashlib.sha256(each.encode()).hexdigest()


@pytest.mark.parametrize("root", [FAMILY_FIXTURES, TORCH_FIXTURES])
def test_shapes_from_the_headers_are_the_tensors_shapes(root):
    files = weights.tensor_files(root / SHARDED)
    tensors = {name: array for f in files for name, array in weights.tensors(f).items()}
    assert weights.shapes(files) == {name: array.shape for name, array in tensors.items()}
    assert all(isinstance(array, np.ndarray) for array in tensors.values())


@pytest.mark.parametrize(
    "index, message",
    [
        ("{not json", "cannot read .*model.safetensors.index.json"),
        ("[1, 2]", "model.safetensors.index.json holds a JSON list, not an object"),
        (json.dumps({"weight_map": {}}), "has no weight_map"),
        (json.dumps({"weight_map": {"w": "../elsewhere.safetensors"}}), "names shard 'elsewhere.safetensors'"),
        (json.dumps({"weight_map": {"w": "missing.safetensors"}}), "names shard 'missing.safetensors'"),
    ],
    ids=["not-json", "not-an-object", "empty-map", "outside", "missing"],
)
def test_an_index_that_names_no_shards_here_is_one_line(tmp_path, index, message):
    (tmp_path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ModelError, match=message) as e:
        weights.files(tmp_path)
    assert "\n" not in str(e.value)


def test_a_folder_without_weights_names_both_formats(tmp_path):
    with pytest.raises(ModelError, match="neither model.safetensors nor pytorch_model.bin, nor a sharded copy"):
        weights.files(tmp_path)
    with pytest.raises(ModelError, match="neither model.safetensors nor pytorch_model.bin$"):
        weights.dense_file(tmp_path)


def test_a_damaged_safetensors_file_is_one_line(tmp_path):
    damaged = tmp_path / "model.safetensors"
    damaged.write_bytes((FAMILY_FIXTURES / "distilbert-dense" / "model.safetensors").read_bytes()[:100])
    for read in (lambda: weights.shapes([damaged]), lambda: weights.tensors(damaged)):
        with pytest.raises(ModelError, match="cannot read .*model.safetensors"):
            read()
