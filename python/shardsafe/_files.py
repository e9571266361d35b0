"""save_file / load_file / save / load for one framework (shared by
shardsafe.numpy and shardsafe.torch)."""

import os
import tempfile

from . import _C
from ._errors import InvalidArgumentError
from ._frameworks import framework


def save_file(fw_name, tensors, filename, metadata=None, fsync=False, align=0, check=None):
    """Write `tensors` (dict name -> array) to `filename` atomically with
    the library's streaming writer (byte-identical to the reference)."""
    fw = framework(fw_name)
    if not isinstance(tensors, dict):
        raise InvalidArgumentError("tensors must be a dict of name -> tensor")
    if check is not None:
        check(tensors)
    items = []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(f"tensor name {name!r} is not a str")
        dname, shape, buf = fw.tensor_bytes(name, t)
        items.append((name, dname, tuple(shape), buf))
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise InvalidArgumentError("metadata must be a dict of str to str")
    _C.save_file(os.fspath(filename), items, metadata, bool(fsync), int(align))


def load_file(fw_name, filename, device="cpu"):
    """Every tensor of the file, each in its own writable memory."""
    from . import safe_open
    with safe_open(filename, fw_name, device=device, copy=True) as f:
        return {k: f.get_tensor(k) for k in f.offset_keys()}


def save(fw_name, tensors, metadata=None, check=None):
    """The file image as bytes (written through a temporary file)."""
    with tempfile.TemporaryDirectory(prefix="shardsafe-") as d:
        path = os.path.join(d, "t.safetensors")
        save_file(fw_name, tensors, path, metadata, check=check)
        with open(path, "rb") as fh:
            return fh.read()


def load(fw_name, data):
    """Tensors of a file image (bytes), validated like a file."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError("load: data must be bytes")
    with tempfile.TemporaryDirectory(prefix="shardsafe-") as d:
        path = os.path.join(d, "t.safetensors")
        with open(path, "wb") as fh:
            fh.write(data)
        return load_file(fw_name, path)
