"""pytorch_model.bin read without torch, against files torch.save wrote (tests/make_torch_pickles.py).

A model directory with only torch's pickles gives the same parameters, bit for bit, as its safetensors copy;
a pickle that names anything a state dict does not hold is refused before it runs.
"""

import io
import pickle
import zipfile

import jax
import ml_dtypes
import numpy as np
import pytest

from pipeline.encode import model_dir, torch_pickle, weights
from pipeline.errors import ModelError

from support import FAMILY_FIXTURES, REPO

FIXTURES = REPO / "tests" / "fixtures" / "torch_pickle"


@pytest.mark.parametrize("file", ["tensors-zip.bin", "tensors-legacy.bin"])
def test_every_dtype_and_view_reads_as_torch_saved_it(file):
    expected = dict(np.load(FIXTURES / "tensors.npz"))
    tensors = torch_pickle.load(FIXTURES / file)
    assert tensors.keys() == expected.keys()
    for name, want in expected.items():
        got = tensors[name]
        if name == "bfloat16":
            assert got.dtype == ml_dtypes.bfloat16
            got = got.view(np.uint16)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), name
        assert got.flags.c_contiguous, name
    assert torch_pickle.shapes(FIXTURES / file) == {name: want.shape for name, want in expected.items()}


def test_shapes_read_the_pickle_alone(tmp_path):
    """The legacy format keeps its storages after the pickle: shapes need none of them."""
    data = (FIXTURES / "tensors-legacy.bin").read_bytes()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(data[:-100])  # into the last storages
    assert torch_pickle.shapes(cut)["float32"] == (4, 6)
    with pytest.raises(ModelError, match="cannot read"):
        torch_pickle.load(cut)


# {"weight": print("this ran")}, as a hostile pytorch_model.bin calls os.system: written by hand, as
# pickle.dumps(print) names whatever replaced print in this process (Ray's tqdm patch, once a Ray ran here).
RUNS = b"}S'weight'\ncbuiltins\nprint\n(S'this ran'\ntRs."


def zipped(pickled: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
    return buffer.getvalue()


@pytest.mark.parametrize("layout", ["pickle", "zip"])
def test_a_pickle_naming_anything_else_is_refused_before_it_runs(tmp_path, capsys, layout):
    file = tmp_path / "pytorch_model.bin"
    file.write_bytes(zipped(RUNS) if layout == "zip" else pickle.dumps(torch_pickle.LEGACY_MAGIC) + RUNS)
    with pytest.raises(ModelError, match=r"names builtins\.print, which a state dict of tensors does not hold"):
        torch_pickle.load(file)
    assert "this ran" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, message",
    [
        (b"not a checkpoint", "cannot read"),
        (pickle.dumps({"a": 1}), "neither a zip archive nor a pickle that torch.save wrote"),
        (zipped(pickle.dumps({"weight": [1.0, 2.0]})), "is not a state dict of tensors"),
        (b"PK\x05\x06" + bytes(18), "not one torch.save wrote"),
        # {"w": torch._utils._rebuild_tensor_v2(1, 0, (2,), (1,))}: a tensor on a number, not a storage
        (zipped(b"}S'w'\nctorch._utils\n_rebuild_tensor_v2\n(I1\nI0\n(I2\nt(I1\nttRs."), "not a state dict"),
    ],
    ids=["text", "other-pickle", "zip-not-tensors", "empty-zip", "tensor-on-a-number"],
)
def test_files_torch_did_not_write_are_one_line(tmp_path, content, message):
    file = tmp_path / "pytorch_model.bin"
    file.write_bytes(content)
    with pytest.raises(ModelError, match=message) as e:
        torch_pickle.load(file)
    assert "\n" not in str(e.value)


def test_a_tensor_past_the_end_of_its_storage_is_refused(tmp_path):
    """A storage cut short (a damaged download): as_strided would read past it."""
    damaged = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(FIXTURES / "tensors-zip.bin") as source, zipfile.ZipFile(damaged, "w") as out:
        for entry in source.namelist():
            data = source.read(entry)
            out.writestr(entry, data[:8] if entry.endswith("/data/0") else data)
    with pytest.raises(ModelError, match="reaches past its storage"):
        torch_pickle.load(damaged)


@pytest.mark.parametrize("name", ["distilbert-dense", "xlm-roberta-sharded"])
def test_a_model_in_torch_pickles_has_the_safetensors_copys_parameters(name):
    """The model's own weights (one zip file, or four shards and their index) and its Dense modules' (the
    legacy format) load to exactly the arrays of the same model in safetensors."""
    pickles, safetensors = model_dir.resolve(FIXTURES / name), model_dir.resolve(FAMILY_FIXTURES / name)
    assert [f.suffix for f in weights.files(pickles.files)][-1] == ".bin"
    assert pickles.arch == safetensors.arch
    model_dir.check_weights(pickles)
    got, got_tree = jax.tree.flatten([model_dir.load_params(pickles), *model_dir.load_projections(pickles)])
    want, want_tree = jax.tree.flatten([model_dir.load_params(safetensors), *model_dir.load_projections(safetensors)])
    assert got_tree == want_tree
    assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want, strict=True))
