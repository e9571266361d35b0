"""shardsafe.torch: the safetensors torch API over libshardsafe.

save_file(tensors, filename, metadata=None, fsync=False, align=0)
load_file(filename, device="cpu") -> dict of tensors in their own memory
save(tensors, metadata=None) -> bytes
load(data) -> dict
"""

import torch as _torch

from . import _files
from ._errors import InvalidArgumentError

__all__ = ["save_file", "load_file", "save", "load"]


def _storage_ptr(t):
    try:
        return t.untyped_storage().data_ptr()  # torch >= 2.0
    except AttributeError:
        return t.storage().data_ptr()


def _refuse_shared(tensors):
    """Tensors sharing storage are refused, as safetensors does: the file
    would hold two copies and loading would not share them again."""
    by_storage = {}
    for name, t in tensors.items():
        if isinstance(t, _torch.Tensor) and t.layout == _torch.strided and t.numel() > 0:
            by_storage.setdefault((t.device, _storage_ptr(t)), []).append(name)
    shared = [sorted(names) for names in by_storage.values() if len(names) > 1]
    if shared:
        raise InvalidArgumentError(
            f"some tensors share memory: {sorted(shared)}; this would duplicate "
            "it on disk and loading would not share it again: save one of each "
            "group, or .clone() the others")


def save_file(tensors, filename, metadata=None, fsync=False, align=0):
    """Write a dict of contiguous CPU tensors.  Non-contiguous tensors and
    tensors sharing storage are refused (InvalidArgumentError); dtypes
    safetensors lacks: DtypeError."""
    _files.save_file("pt", tensors, filename, metadata, fsync, align, check=_refuse_shared)


def load_file(filename, device="cpu"):
    return _files.load_file("pt", filename, device)


def save(tensors, metadata=None):
    return _files.save("pt", tensors, metadata, check=_refuse_shared)


def load(data):
    return _files.load("pt", data)
