"""A model's weights files: which of them hold its tensors, their digest, and reading them in either format.

    files(folder)          # [model.safetensors] or [the index, *its shards]; else PyTorch's, in the same forms
    dense_file(folder)     # a Dense module's one file: model.safetensors, else pytorch_model.bin
    digest(files)          # sha256 of one file; of the files' own digests where sharded
    shapes(files)          # {name: shape} from the headers (safetensors) or the pickle (PyTorch): no tensor read
    tensors(file)          # {name: ndarray}, as saved

The one place that tells the formats apart, by the file's suffix: safetensors through its own library, PyTorch's
through `pipeline.encode.torch_pickle`, which runs no torch and none of the pickle's code. What the tensors mean
to a model (its config's shapes, the Dense modules' names) is `pipeline.encode.model_dir`'s.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from pipeline.encode import torch_pickle
from pipeline.encode.model_json import read_object
from pipeline.errors import ModelError

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
TORCH_WEIGHTS_FILE = "pytorch_model.bin"
# (one file, the index of a sharded copy) in the order transformers and sentence-transformers look for them.
LAYOUTS = ((WEIGHTS_FILE, WEIGHTS_INDEX), (TORCH_WEIGHTS_FILE, "pytorch_model.bin.index.json"))


def files(folder: Path) -> list[Path]:
    """The first of `LAYOUTS` in `folder`: one file, or the index followed by the shards it names."""
    for single, index in LAYOUTS:
        if (folder / single).is_file():
            return [folder / single]
        if (folder / index).is_file():
            return [folder / index, *_shards(folder / index)]
    raise ModelError(
        f"{folder} has no weights: neither {WEIGHTS_FILE} nor {TORCH_WEIGHTS_FILE}, nor a sharded copy of either"
    )


def _shards(index: Path) -> list[Path]:
    weight_map = read_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelError(f"{index} has no weight_map")
    shards = [index.parent / str(name) for name in sorted(set(weight_map.values()))]
    for shard in shards:
        if shard.parent != index.parent or not shard.is_file():
            raise ModelError(f"{index} names shard {shard.name!r}, which is not in {index.parent}")
    return shards


def tensor_files(folder: Path) -> list[Path]:
    """The files that hold tensors: `files` without the index."""
    return [file for file in files(folder) if file.suffix != ".json"]


def dense_file(folder: Path) -> Path:
    """A Dense module's one weights file, looked for as sentence-transformers does: safetensors first."""
    for name in (WEIGHTS_FILE, TORCH_WEIGHTS_FILE):
        if (folder / name).is_file():
            return folder / name
    raise ModelError(f"{folder} has no weights: neither {WEIGHTS_FILE} nor {TORCH_WEIGHTS_FILE}")


def digest(paths: list[Path]) -> str:
    """One file: its sha256. Sharded (the index, then the shards): the sha256 of each file's, joined."""
    if len(paths) == 1:
        return _sha256(paths[0])
    return hashlib.sha256("|".join(_sha256(path) for path in paths).encode()).hexdigest()


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def shapes(paths: list[Path]) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in the tensor files `paths`, from their headers alone."""
    from safetensors import SafetensorError, safe_open

    found = {}
    for path in paths:
        if path.suffix == ".bin":
            found |= torch_pickle.shapes(path)
            continue
        try:
            with safe_open(path, framework="numpy") as f:
                found |= {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
        except (SafetensorError, OSError, ValueError) as e:
            raise ModelError(f"cannot read {path}: {e}") from None
    return found


def tensors(path: Path) -> dict[str, np.ndarray]:
    """A tensor file's tensors, either format, in the dtypes they were saved in."""
    if path.suffix == ".bin":
        return torch_pickle.load(path)
    import ml_dtypes  # noqa: F401  registers bfloat16 with numpy, so bfloat16 checkpoints load
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError, TypeError) as e:
        raise ModelError(f"cannot read {path}: {e}") from None
