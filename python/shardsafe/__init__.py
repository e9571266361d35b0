"""shardsafe: crash-safe safetensors files and checkpoints (libshardsafe).

Drop-in for the `safetensors` package (docs/python.md lists every name
and each deliberate difference):
    from shardsafe import safe_open, serialize, serialize_file, deserialize
    from shardsafe.torch import save_file, load_file, save_model, load_model
    from shardsafe.numpy import save_file, load_file, save, load
    safe_open(path, framework="pt"|"np", device="cpu") -> keys(), metadata(),
        get_tensor(name), get_tensors(), get_slice(name)[a:b, 2]
Checkpoints (step directories, save paths, HF index folders, plain files):
    open_checkpoint(path, framework="np"|"pt") -> keys(), get_tensor(name,
        dtype=...), get_slice(name)[...], progress(), blobs(), read_blob()
Tools: merge(src, dst, ...), reshard(src, dst, ...), and MindSpore's
    unified_safetensors(...) / load_distributed_checkpoint(...).

Errors are ShardsafeError (alias SafetensorError) subclasses carrying the
library's message: FormatError (ChecksumError), ShardsafeIOError
(ShardsafeFileNotFoundError), NotFoundError (a KeyError), MismatchError
(DtypeError), InvalidArgumentError (SliceError, SharedTensorsError,
TensorSpecError).  See docs/python.md.
"""

import io as _io
import os as _os

from ._errors import (ChecksumError, DtypeError, FormatError,  # noqa: F401
                      InvalidArgumentError, MismatchError, NotFoundError,
                      SafetensorError, SharedTensorsError, ShardsafeError,
                      ShardsafeFileNotFoundError, ShardsafeIOError, SliceError,
                      TensorSpecError)
from . import _C
from ._files import TensorSpec, deserialize, serialize, serialize_file  # noqa: F401
from ._files import not_found as _not_found, open_bytes as _open_bytes, open_file as _open_file
from ._frameworks import framework as _framework, parse_device as _parse_device
from ._slicing import basic_box as _basic_box, reference_box as _reference_box
from .manager import CheckpointManager  # noqa: F401
from .dist import Shard  # noqa: F401
from . import dist, training  # noqa: F401,E402

__version__ = _C.version
library_version = _C.version

__all__ = [
    "safe_open", "serialize", "serialize_file", "deserialize", "TensorSpec",
    "SafetensorError", "open_checkpoint", "CheckpointManager", "Shard", "ShardsafeError",
    "FormatError", "ChecksumError", "ShardsafeIOError", "ShardsafeFileNotFoundError",
    "NotFoundError", "MismatchError", "DtypeError", "InvalidArgumentError", "SliceError",
    "SharedTensorsError", "TensorSpecError", "merge", "reshard", "unified_safetensors",
    "load_distributed_checkpoint",
]


class _Slice:
    """get_slice(name): shape and dtype without reading; [index] reads
    only the box the index covers (shs_file_read_slice /
    shs_checkpoint_read), or, for torch over a mapping, indexes a view of
    the mapped tensor with torch's own rules (as the reference)."""

    def __init__(self, owner, name, dname, shape, box):
        self._owner, self._name = owner, name
        self._dname, self._shape = dname, tuple(shape)
        self._box = box  # None: torch indexing of the whole tensor

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
        if self._box is None:
            return self._owner._index(self._name, key)
        start, count, steps, squeeze = self._box(key, self._shape)
        return self._owner._read_box(self._name, self._dname, start, count, steps, squeeze)


_BACKENDS = ("mmap", "pread")


class safe_open:
    """safe_open(filename, framework, device="cpu", *, backend="mmap"):
    an open, validated safetensors file (framework "pt"/"torch"/"pytorch"
    or "np"/"numpy").

    get_tensor() with the mmap backend is zero-copy: arrays and tensors
    are writable views of the library's private copy-on-write mapping of
    the file (SHS_OPEN_PRIVATE_WRITABLE): a write stays in this process,
    never reaches the file, and is seen by later reads of this handle.
    backend="pread" (or mmap=False) reads with pread into new memory;
    copy=True gives new memory too.  Views keep the file mapped after
    close() until they are freed.  `device` is parsed as torch parses it;
    tensors are moved there after reading.
    """

    def __init__(self, filename, framework, device="cpu", *, backend="mmap", copy=False,
                 mmap=True):
        self._fw = _framework(framework)
        self._device = _parse_device(self._fw, device)
        if backend not in _BACKENDS:
            raise InvalidArgumentError(f"backend {backend!r} is invalid: expected 'mmap' or "
                                       "'pread'")
        pread = backend == "pread" or not mmap
        self._copy = bool(copy) or pread
        # torch over a mapping: torch's indexing, as the reference
        self._torch_index = self._fw.name == "pt" and not pread
        self._f = self._open(filename, _C.MODE_PREAD if pread else _C.MODE_COW)
        self._info = {}

    @staticmethod
    def _open(filename, mode):
        try:
            return _open_file(filename, mode)
        except ShardsafeFileNotFoundError as e:
            raise _not_found(filename, e.status) from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        self._f.close()

    def keys(self):
        """Tensor names, sorted (as the reference)."""
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

    def _to_device(self, t):
        return t if self._device is None else t.to(self._device)

    def _host_tensor(self, name, copy):
        dname, shape, _ = self._info_of(name)
        what = f"tensor '{name}'"
        self._fw.dtype(dname, what)  # a dtype the framework lacks: DtypeError first
        if not copy:
            view = self._f.view(name)
            # views only over this process's own pages (the private
            # mapping, a bytearray); else a copy, writable as the reference's
            if view is not None and not memoryview(view).readonly:
                return self._fw.from_buffer(view, dname, shape, what)
        out, buf = self._fw.empty(dname, shape, what)
        if buf.nbytes:
            self._f.read(name, buf)
        return out

    def get_tensor(self, name):
        """The whole tensor (a view with the mmap backend, see above)."""
        return self._to_device(self._host_tensor(name, self._copy))

    def get_tensors(self):
        """{name: tensor} of every tensor, in the order of the file."""
        return {k: self.get_tensor(k) for k in self.offset_keys()}

    def get_slice(self, name):
        """A slice object: get_shape(), get_dtype(), [index] (see
        docs/python.md "Slices" for the rules)."""
        dname, shape, _ = self._info_of(name)
        return _Slice(self, name, dname, shape, None if self._torch_index else _reference_box)

    def _index(self, name, key):
        return self._to_device(self._host_tensor(name, self._copy)[key])

    def _read_box(self, name, dname, start, count, steps, squeeze):
        out, buf = self._fw.empty(dname, count, f"tensor '{name}'")
        if all(count):
            self._f.read_slice(name, start, count, buf)
        return self._to_device(self._fw.post(out, steps, squeeze))


def _file_source(f):
    """(path, None) to open a Python file object's file by path, or
    (name, bytes) of its content when it has no file of its own."""
    try:
        fd = f.fileno()
    except (AttributeError, OSError, _io.UnsupportedOperation):
        fd = None
    name = getattr(f, "name", None)
    if fd is not None:
        if isinstance(name, (str, bytes, _os.PathLike)):
            try:
                if _os.path.samestat(_os.fstat(fd), _os.stat(name)):
                    return _os.fspath(name), None
            except OSError:
                pass
        proc = f"/proc/self/fd/{fd}"
        if _os.path.exists(proc):
            return proc, None
    raw = getattr(f, "buffer", f)  # a text-mode file: its binary layer
    if getattr(raw, "seekable", lambda: False)():
        raw.seek(0)
    data = raw.read()
    if not isinstance(data, (bytes, bytearray)):
        raise InvalidArgumentError(f"{name or f!r}: read() gave {type(data).__name__}, not "
                                   "bytes: open the file in binary mode")
    return (str(name) if name is not None else "<file object>"), bytearray(data)


class _safe_open_handle(safe_open):
    """_safe_open_handle(f, framework, device="cpu"): safe_open over an
    open Python file object.  A file with a descriptor is opened by the
    library (zero-copy, by its path when that names the same file, else
    through /proc/self/fd); any other object (BytesIO, fsspec remote
    files) is read whole into memory (shs_file_open_memory)."""

    def __init__(self, f, framework, device="cpu", *, backend="mmap"):
        self._source = _file_source(f)
        super().__init__(self._source[0], framework, device, backend=backend)

    def _open(self, filename, mode):
        name, data = self._source
        if data is None:
            return safe_open._open(name, mode)
        return _open_bytes(data, name)


class Checkpoint:
    """A checkpoint opened with open_checkpoint(): every read goes through
    the library's public read API (shs_checkpoint_read), checked against
    the checkpoint's checksums, with optional dtype conversion."""

    def __init__(self, path, framework="np", step=None, mmap=True, key=None):
        self._fw = _framework(framework)
        self._c = _C.Checkpoint(path, -1 if step is None else int(step), not mmap, key)
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
        return _Slice(self, name, self._dtype_name(dtype, stored), shape, _basic_box)

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


def open_checkpoint(path, framework="np", step=None, mmap=True, key=None):
    """Open a checkpoint for reading (shs_checkpoint_open): a save path
    (its tracker's step, else the newest; or `step`), a step directory, a
    Hugging Face model.safetensors.index.json or its folder, a folder of
    .safetensors files, or one .safetensors file.  `key`: the 32-byte key
    of an encrypted checkpoint."""
    return Checkpoint(_os.fspath(path), framework, step, mmap, key)


from .tools import (load_distributed_checkpoint, merge, reshard,  # noqa: E402
                    saved_layout, unified_safetensors)
