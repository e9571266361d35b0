"""shardsafe: crash-safe safetensors files and checkpoints (libshardsafe).

    from shardsafe import safe_open, open_checkpoint
    import shardsafe.numpy, shardsafe.torch

File API (mirrors the `safetensors` package):
    shardsafe.numpy.save_file / load_file / save / load
    shardsafe.torch.save_file / load_file / save / load
    safe_open(path, framework="np"|"pt") -> keys(), metadata(),
        get_tensor(name), get_slice(name)[a:b, ::2]
Checkpoints (step directories, save paths, HF index folders, plain files):
    open_checkpoint(path, framework="np"|"pt") -> keys(), get_tensor(name,
        dtype=...), get_slice(name)[...], progress(), blobs(), read_blob()

Errors are ShardsafeError subclasses carrying the library's message:
FormatError (ChecksumError), ShardsafeIOError (ShardsafeFileNotFoundError),
NotFoundError (a KeyError), MismatchError (DtypeError),
InvalidArgumentError.  See docs/python.md.
"""

from ._errors import (ChecksumError, DtypeError, FormatError,  # noqa: F401
                      InvalidArgumentError, MismatchError, NotFoundError,
                      ShardsafeError, ShardsafeFileNotFoundError,
                      ShardsafeIOError)
from . import _C
from ._frameworks import framework as _framework, parse_index as _parse_index
from .manager import CheckpointManager  # noqa: F401
from .dist import Shard  # noqa: F401
from . import dist, training  # noqa: F401,E402

__version__ = _C.version
library_version = _C.version

__all__ = [
    "safe_open", "open_checkpoint", "CheckpointManager", "Shard", "ShardsafeError", "FormatError",
    "ChecksumError", "ShardsafeIOError", "ShardsafeFileNotFoundError",
    "NotFoundError", "MismatchError", "DtypeError", "InvalidArgumentError",
]


def _check_device(device):
    if str(device) != "cpu":
        raise InvalidArgumentError(f"device {device!r}: only 'cpu' is supported "
                                   "(move tensors with .to(device) after loading)")


class _Slice:
    """get_slice(name): shape and dtype without reading; [index] reads
    only the box the index covers (shs_file_read_slice /
    shs_checkpoint_read)."""

    def __init__(self, owner, name, dname, shape):
        self._owner, self._name = owner, name
        self._dname, self._shape = dname, tuple(shape)

    def get_shape(self):
        return list(self._shape)

    def get_dtype(self):
        return self._dname

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return self._dname

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, key):
        start, count, steps, squeeze = _parse_index(key, self._shape)
        return self._owner._read_box(self._name, self._dname, start, count, steps, squeeze)


class safe_open:
    """safe_open(path, framework="np"|"pt", device="cpu", copy=False,
    mmap=True): an open, validated safetensors file.

    get_tensor() without copy is zero-copy: numpy arrays are read-only
    views of the library's read-only mapping; torch tensors (torch has no
    read-only tensors) are views of a private copy-on-write mapping of the
    same file, so writing to them never changes the file.  copy=True (or
    mmap=False) returns tensors in their own writable memory instead.
    Views keep the file mapped after close() until they are freed.
    """

    def __init__(self, filename, framework, device="cpu", copy=False, mmap=True):
        _check_device(device)
        self._fw = _framework(framework)
        self._copy = bool(copy) or not mmap
        if not mmap:
            mode = _C.MODE_PREAD
        elif self._fw.name == "pt" and not self._copy:
            mode = _C.MODE_COW
        else:
            mode = _C.MODE_MAP
        self._f = _C.File(filename, mode)
        self._info = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        self._f.close()

    def keys(self):
        """Tensor names, sorted (as safetensors' safe_open.keys())."""
        return sorted(self._f.names())

    def offset_keys(self):
        """Tensor names in the order of their data in the file."""
        return self._f.names()

    def metadata(self):
        """`__metadata__` as a dict of str, or None when absent."""
        return self._f.metadata()

    def _info_of(self, name):
        info = self._info.get(name)
        if info is None:
            info = self._info[name] = self._f.info(name)
        return info

    def get_tensor(self, name):
        dname, shape, _ = self._info_of(name)
        what = f"tensor '{name}'"
        self._fw.dtype(dname, what)  # a dtype the framework lacks: DtypeError first
        if not self._copy:
            view = self._f.view(name)
            if view is not None:
                return self._fw.from_buffer(view, dname, shape, what)
        out, buf = self._fw.empty(dname, shape, what)
        self._f.read(name, buf)
        return out

    def get_slice(self, name):
        dname, shape, _ = self._info_of(name)
        return _Slice(self, name, dname, shape)

    def _read_box(self, name, dname, start, count, steps, squeeze):
        out, buf = self._fw.empty(dname, count, f"tensor '{name}'")
        if all(count):
            self._f.read_slice(name, start, count, buf)
        return self._fw.post(out, steps, squeeze)


class Checkpoint:
    """A checkpoint opened with open_checkpoint(): every read goes through
    the library's public read API (shs_checkpoint_read), checked against
    the checkpoint's checksums, with optional dtype conversion."""

    def __init__(self, path, framework="np", step=None, mmap=True):
        self._fw = _framework(framework)
        self._c = _C.Checkpoint(path, -1 if step is None else int(step), not mmap)
        d = self._c.describe()
        self.path = d["path"]
        self.step = d["step"]
        self.world_size = d["world_size"]
        self.is_plain = bool(d["is_plain"])
        self.format_version = d["format_version"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        self._c.close()

    def keys(self):
        """Tensor names, sorted."""
        return self._c.names()

    def __contains__(self, name):
        return name in set(self._c.names())

    def tensor_info(self, name):
        """{"dtype", "shape", "kind" ("model"/"optimizer"), "n_chunks"}"""
        dname, shape, kind, n_chunks = self._c.info(name)
        return {"dtype": dname, "shape": shape, "kind": kind, "n_chunks": n_chunks}

    def _dtype_name(self, dtype, stored):
        if dtype is None:
            return stored
        if isinstance(dtype, str):
            _C.dtype_info(dtype)  # unknown name: FormatError (SHS_EDTYPE)
            return dtype
        return self._fw.dtype_name(dtype, "dtype")

    def get_tensor(self, name, dtype=None):
        """The whole tensor, assembled from every chunk, as `dtype` (a
        safetensors name such as "F32", or a numpy/torch dtype)."""
        stored, shape, _, _ = self._c.info(name)
        return self._read_box(name, self._dtype_name(dtype, stored), None, shape,
                              [1] * len(shape), set())

    def get_slice(self, name, dtype=None):
        stored, shape, _, _ = self._c.info(name)
        return _Slice(self, name, self._dtype_name(dtype, stored), shape)

    def _read_box(self, name, dname, start, count, steps, squeeze):
        out, buf = self._fw.empty(dname, count, f"tensor '{name}'")
        if all(count):
            self._c.read(name, start, None if start is None else count, dname, buf)
        return self._fw.post(out, steps, squeeze)

    def progress(self):
        """common.json (the seven keys) as a dict; None for a checkpoint
        without metadata.json."""
        return self._c.progress()

    def blobs(self):
        """[(name, rank, size)] of the saved blobs (rng, lr_scheduler...)."""
        return self._c.blobs()

    def read_blob(self, name, rank=0):
        """A blob's bytes, checked against its checksum."""
        for i, (n, r, _) in enumerate(self._c.blobs()):
            if n == name and r == rank:
                return self._c.read_blob(i)
        raise NotFoundError(f"{self.path}: no blob '{name}' of rank {rank}")


def open_checkpoint(path, framework="np", step=None, mmap=True):
    """Open a checkpoint for reading (shs_checkpoint_open_ex): a save path
    (its tracker's step, else the newest; or `step`), a step directory, a
    Hugging Face model.safetensors.index.json or its folder, a folder of
    .safetensors files, or one .safetensors file."""
    return Checkpoint(path, framework, step, mmap)
