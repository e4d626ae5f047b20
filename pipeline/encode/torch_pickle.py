"""`pytorch_model.bin` read without PyTorch: a state dict's tensors as numpy arrays, and nothing else.

    tensors = load(path)    # {name: ndarray}, each contiguous, in the dtype it was saved in
    shapes(path)            # {name: shape}, from the pickle alone: no tensor is read

`torch.save` writes a pickle whose tensors point into raw storages: in a zip
archive (torch 1.6 and later: `<root>/data.pkl` and `<root>/data/<key>`), or,
in the legacy format, in the same file after the pickle (a count of elements,
then their bytes, per storage). A pickle runs whatever its names resolve to,
so this one is read as `torch.load(weights_only=True)` reads it: only the
names a state dict is made of resolve (`OrderedDict`, the tensor and parameter
rebuilders, the storage types); any other ends the read with a ModelError
before it is called. No torch is imported, nor anything the file names.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import pickle
import struct
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from pipeline.errors import ModelError

# torch's storage types -> the dtype of their elements. bfloat16 is ml_dtypes' numpy dtype.
STORAGE_DTYPES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER: the legacy format's first pickle


@dataclasses.dataclass(frozen=True)
class StorageRef:
    """A storage the pickle names: its key in the file and its elements' dtype (nothing read yet)."""

    key: str
    dtype: np.dtype


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """A tensor as the pickle describes it: a strided view, in elements, of a storage."""

    storage: StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage, storage_offset, size, stride, *_) -> TensorRef:
    """torch._utils._rebuild_tensor(_v2): the trailing requires_grad, hooks and metadata mean nothing here.
    Whatever the pickle passed is checked after (`_is_tensor`)."""
    return TensorRef(storage, storage_offset, tuple(size), tuple(stride))


def _rebuild_parameter(data, *_) -> TensorRef:
    """torch._utils._rebuild_parameter(_with_state): an nn.Parameter saved as such is its data."""
    return data


def _storage_type(name: str) -> np.dtype:
    import ml_dtypes  # registers bfloat16 with numpy

    dtype = STORAGE_DTYPES[name]
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


# Every name a state dict's pickle may hold, and what it resolves to here.
ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
} | {("torch", name): name for name in STORAGE_DTYPES}


class _StateDictUnpickler(pickle.Unpickler):
    def __init__(self, file: BinaryIO, where: Path):
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED:
            raise ModelError(
                f"{self.where} names {module}.{name}, which a state dict of tensors does not hold: "
                f"docembed does not unpickle it (a pickle may run any code it names)"
            )
        return ALLOWED[module, name]

    def persistent_load(self, pid):
        # ("storage", storage type, key, location, numel[, view]): the key is the data's name in the file. A view
        # of another storage is what torch before 1.0 could write; torch.save has written None there since.
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and pid[1] in STORAGE_DTYPES):
            raise ModelError(f"{self.where} refers to {str(pid)[:80]}, which is not a tensor's storage")
        if len(pid) > 5 and pid[5] is not None:
            raise ModelError(f"{self.where} holds a view of a storage, which torch before 1.0 wrote: not read")
        return StorageRef(str(pid[2]), _storage_type(pid[1]))


def _is_tensor(t) -> bool:
    """What `_rebuild_tensor` made of a storage and whole numbers, as torch.save writes them."""
    numbers = (t.offset, *t.shape, *t.stride) if isinstance(t, TensorRef) else ()
    return (
        isinstance(t, TensorRef)
        and isinstance(t.storage, StorageRef)
        and len(t.shape) == len(t.stride)
        and all(type(n) is int for n in numbers)
    )


def _tensor_refs(file: BinaryIO, where: Path) -> dict[str, TensorRef]:
    state = _StateDictUnpickler(file, where).load()
    if not isinstance(state, dict) or not all(_is_tensor(t) for t in state.values()):
        raise ModelError(f"{where} is not a state dict of tensors (name -> tensor)")
    return {str(name): tensor for name, tensor in state.items()}


def _plain(file: BinaryIO, where: Path):
    """One of the legacy format's leading pickles, which name nothing."""
    return _StateDictUnpickler(file, where).load()


class _Archive:
    """The zip format: `<root>/data.pkl`, the storages' bytes in `<root>/data/<key>`."""

    def __init__(self, path: Path):
        self.path = path
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            roots = [name[: -len("data.pkl")] for name in names if name.endswith("/data.pkl")]
            if len(roots) != 1:
                raise ModelError(f"{path} is a zip archive, but not one torch.save wrote (no single data.pkl)")
            self.root = roots[0]
            order = archive.read(f"{self.root}byteorder") if f"{self.root}byteorder" in names else b""
            self.byteorder = ">" if order.strip() == b"big" else "<"
            self.tensors = _tensor_refs(io.BytesIO(archive.read(f"{self.root}data.pkl")), path)

    def storages(self) -> dict[str, np.ndarray]:
        refs = {t.storage.key: t.storage for t in self.tensors.values()}
        with zipfile.ZipFile(self.path) as archive:
            return {
                key: np.frombuffer(archive.read(f"{self.root}data/{key}"), ref.dtype.newbyteorder(self.byteorder))
                for key, ref in refs.items()
            }


class _Legacy:
    """torch.save's format before 1.6: magic number, protocol, system pickles; the state dict; the storages'
    keys; then per key, in that order, its element count (8 bytes, little-endian) and its elements."""

    def __init__(self, path: Path):
        self.path = path
        with path.open("rb") as f:
            if _plain(f, path) != LEGACY_MAGIC:
                raise ModelError(f"{path} is neither a zip archive nor a pickle that torch.save wrote")
            _plain(f, path)  # the protocol version
            system = _plain(f, path)
            self.byteorder = "<" if not isinstance(system, dict) or system.get("little_endian", True) else ">"
            self.tensors = _tensor_refs(f, path)
            self.after_pickle = f.tell()  # the storages' keys, then their data: read only by `storages`

    def storages(self) -> dict[str, np.ndarray]:
        dtypes = {t.storage.key: t.storage.dtype for t in self.tensors.values()}
        storages = {}
        with self.path.open("rb") as f:
            f.seek(self.after_pickle)
            for key in _plain(f, self.path):
                (count,) = struct.unpack("<q", f.read(8))
                dtype = dtypes[str(key)].newbyteorder(self.byteorder)  # a storage no tensor uses: a KeyError
                data = f.read(count * dtype.itemsize)
                if len(data) < count * dtype.itemsize:
                    raise ValueError(f"storage {key} is cut short")
                storages[str(key)] = np.frombuffer(data, dtype)
        return storages


def _open(path: Path) -> _Archive | _Legacy:
    try:
        return _Archive(path) if zipfile.is_zipfile(path) else _Legacy(path)
    except (pickle.UnpicklingError, EOFError, zipfile.BadZipFile, KeyError, TypeError, ValueError, OSError) as e:
        raise ModelError(f"cannot read {path}: {e}") from None


def shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape, from the pickle alone."""
    return {name: tensor.shape for name, tensor in _open(path).tensors.items()}


def load(path: Path) -> dict[str, np.ndarray]:
    """Every tensor, contiguous and native-endian, in the dtype it was saved in."""
    file = _open(path)
    try:
        storages = file.storages()
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, struct.error, OSError) as e:
        raise ModelError(f"cannot read {path}: {e}") from None
    tensors = {}
    for name, tensor in file.tensors.items():
        storage = storages[tensor.storage.key]
        # as_strided reads wherever it is pointed: a view past its storage's end is a damaged file.
        end = tensor.offset + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride)) + 1
        if min(tensor.shape, default=1) > 0 and (min(tensor.offset, *tensor.stride) < 0 or end > storage.size):
            raise ModelError(f"{path}: tensor {name!r} reaches past its storage")
        view = np.lib.stride_tricks.as_strided(
            storage[tensor.offset :],
            tensor.shape,
            tuple(s * storage.itemsize for s in tensor.stride),
            writeable=False,
        )
        tensors[name] = np.ascontiguousarray(view, view.dtype.newbyteorder("="))
    return tensors
