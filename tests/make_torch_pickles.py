"""Writes the `pytorch_model.bin` fixtures of tests/fixtures/torch_pickle with torch's own `torch.save`.

- `tensors-zip.bin` and `tensors-legacy.bin`: one state dict in torch's zip format (torch 1.6 and later) and
  in its legacy one (`_use_new_zipfile_serialization=False`, what checkpoints saved before mid-2020 are), with
  every storage type a checkpoint holds, and views: a transposed tensor, a row at an offset, two names on one
  storage, an nn.Parameter and an empty tensor, in an OrderedDict with `_metadata` as `state_dict()` makes
  it. `tensors.npz` holds what each name must read as (bfloat16 as its uint16 bits).
- `distilbert-dense/`: the families fixture of that name with its weights as torch pickles: the model's in
  the zip format (as transformers' `save_pretrained(safe_serialization=False)` wrote it), its Dense modules'
  in the legacy one (as sentence-transformers 2 under an older torch wrote them).
- `xlm-roberta-sharded/`: that fixture's four shards as `pytorch_model-0000N-of-00004.bin`, with
  `pytorch_model.bin.index.json`, as transformers shards a checkpoint.

Needs torch (`.venv-bench`); the tests only read what this writes.

    .venv-bench/bin/python tests/make_torch_pickles.py
"""

from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[1]
FAMILIES = REPO / "tests" / "fixtures" / "families"
OUT = REPO / "tests" / "fixtures" / "torch_pickle"


def state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    tensors = {
        "float32": base,
        "float64": torch.randn(3, generator=g, dtype=torch.float64),
        "float16": torch.randn(2, 3, generator=g).half(),
        "bfloat16": torch.randn(5, generator=g).bfloat16(),
        "int64": torch.arange(7),
        "int32": torch.arange(-3, 3, dtype=torch.int32),
        "int16": torch.tensor([-2, 0, 2], dtype=torch.int16),
        "int8": torch.tensor([-128, 1, 127], dtype=torch.int8),
        "uint8": torch.tensor([0, 7, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "transposed": base.t(),  # strides (1, 6) into base's storage
        "row": base[2],  # offset 12 into base's storage
        "tied": base,  # a second name for the same tensor, as tied embeddings are saved
        "parameter": torch.nn.Parameter(torch.randn(2, 2, generator=g)),
        "empty": torch.zeros(0, 3),
    }
    # As nn.Module.state_dict() returns it: an OrderedDict with the modules' versions in an attribute.
    state = collections.OrderedDict(tensors)
    state._metadata = collections.OrderedDict({"": {"version": 1}, "encoder": {"version": 2}})
    return state


def expected(tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    def value(t: torch.Tensor) -> np.ndarray:
        t = t.detach().contiguous()
        return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()

    return {name: value(t) for name, t in tensors.items()}


def as_torch_pickles(name: str, legacy_dense: bool) -> Path:
    """A copy of families/`name` whose safetensors files are torch pickles of the same tensors."""
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(FAMILIES / name, out)
    for file in sorted(out.rglob("*.safetensors")):
        dense = file.parent != out
        target = file.with_name(file.name.replace("model", "pytorch_model", 1).replace(".safetensors", ".bin"))
        torch.save(load_file(file), target, _use_new_zipfile_serialization=not (dense and legacy_dense))
        file.unlink()
    index = out / "model.safetensors.index.json"
    if index.exists():
        config = json.loads(index.read_text())
        config["weight_map"] = {
            tensor: shard.replace("model", "pytorch_model", 1).replace(".safetensors", ".bin")
            for tensor, shard in config["weight_map"].items()
        }
        (out / "pytorch_model.bin.index.json").write_text(json.dumps(config, indent=2) + "\n")
        index.unlink()
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tensors = state_dict()
    torch.save(tensors, OUT / "tensors-zip.bin")
    torch.save(tensors, OUT / "tensors-legacy.bin", _use_new_zipfile_serialization=False)
    np.savez(OUT / "tensors.npz", **expected(tensors))
    as_torch_pickles("distilbert-dense", legacy_dense=True)
    as_torch_pickles("xlm-roberta-sharded", legacy_dense=False)
    (OUT / "VERSIONS.txt").write_text(f"torch {torch.__version__}\n")


if __name__ == "__main__":
    main()
