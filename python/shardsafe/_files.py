"""The reference package's module-level functions -- serialize,
serialize_file, deserialize, TensorSpec -- and the file functions that
shardsafe.numpy and shardsafe.torch share.

Every byte is written by the library's streaming writer (shs_save_file:
byte-identical to the reference writer, temporary file + rename) and read
by its reader (shs_file_open / shs_file_open_memory).
"""

import ctypes
import os
import tempfile

from . import _C
from ._errors import (DtypeError, FormatError, InvalidArgumentError, ShardsafeError,
                      TensorSpecError, make_error)
from ._frameworks import framework

# the dtype names the reference takes in serialize() (torch's and numpy's
# names) -> safetensors codes
REF_DTYPES = {
    "bool": "BOOL", "int8": "I8", "uint8": "U8", "int16": "I16", "uint16": "U16",
    "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64",
    "float16": "F16", "float32": "F32", "float64": "F64", "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3", "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2": "F8_E5M2", "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0", "float4_e2m1fn_x2": "F4", "complex64": "C64",
}


def dtype_code(name):
    """A dtype name of serialize() ("float32", or a safetensors code such
    as "F32") -> its safetensors code; DtypeError otherwise."""
    if isinstance(name, str):
        if name in REF_DTYPES:
            return REF_DTYPES[name]
        try:
            _C.dtype_info(name)
            return name
        except ShardsafeError:
            pass
    raise DtypeError(f"Unknown dtype {name!r}. Supported dtypes: {', '.join(REF_DTYPES)} "
                     "(or a safetensors code: F32, BF16, ...)")


def _logical_shape(code, shape):
    """F4 packs two values per byte: torch's shape counts bytes in the last
    dimension, the header counts values (the reference doubles it)."""
    shape = [int(n) for n in shape]
    if code == "F4" and shape:
        shape[-1] *= 2
    return shape


class TensorSpec:
    """TensorSpec(*, dtype, shape, data_ptr, data_len): one tensor for
    serialize() / serialize_file() by address, as the reference's 0.8 API.
    `dtype` is validated here ("float32", ...; a safetensors code is
    accepted too); `.dtype` gives the safetensors code.  The caller keeps
    the memory at data_ptr alive and unchanged during the call."""

    __slots__ = ("_dtype", "_shape", "_ptr", "_len")

    def __init__(self, *, dtype, shape, data_ptr, data_len):
        code = dtype_code(dtype)
        object.__setattr__(self, "_dtype", code)
        object.__setattr__(self, "_shape", _logical_shape(code, shape))
        object.__setattr__(self, "_ptr", int(data_ptr))
        object.__setattr__(self, "_len", int(data_len))
        if self._ptr < 0 or self._len < 0 or (self._len and not self._ptr):
            raise InvalidArgumentError(f"TensorSpec: data_ptr {self._ptr} / data_len "
                                       f"{self._len} do not describe memory")

    def __setattr__(self, name, value):
        raise AttributeError("TensorSpec is immutable")

    dtype = property(lambda self: self._dtype, doc="safetensors code, e.g. 'F32'")
    shape = property(lambda self: list(self._shape), doc="logical shape (header)")
    data_ptr = property(lambda self: self._ptr, doc="address of the contiguous bytes")
    data_len = property(lambda self: self._len, doc="their length in bytes")

    def __repr__(self):
        return (f"TensorSpec(dtype='{self._dtype}', shape={self._shape}, "
                f"data_ptr={self._ptr}, data_len={self._len})")

    def buffer(self):
        if not self._len:
            return b""
        return (ctypes.c_char * self._len).from_address(self._ptr)


def _entry(name, spec):
    """(name, code, shape, buffer) of one serialize() entry."""
    if isinstance(spec, TensorSpec):
        return name, spec.dtype, spec.shape, spec.buffer()
    if not isinstance(spec, dict):
        raise TensorSpecError(f"tensor '{name}': expected a TensorSpec (or a dict with "
                              f"'dtype', 'shape' and 'data'), got {type(spec).__name__}")
    for key in ("shape", "data", "dtype"):
        if key not in spec:
            raise TensorSpecError(f"Missing `{key}` in {spec} (tensor '{name}'): a dict "
                                  "needs 'dtype', 'shape' and 'data' (bytes) -- or pass a "
                                  "TensorSpec")
    code = dtype_code(spec["dtype"])
    data = spec["data"]
    try:
        memoryview(data)
    except TypeError:
        raise TensorSpecError(f"tensor '{name}': 'data' must be bytes, got "
                              f"{type(data).__name__}") from None
    return name, code, _logical_shape(code, spec["shape"]), data


def _check_metadata(metadata):
    if metadata is not None and (not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise InvalidArgumentError("metadata must be a dict of str to str")


def _entries(tensor_dict):
    if not isinstance(tensor_dict, dict):
        raise TensorSpecError(f"tensor_dict must be a dict of name -> TensorSpec, got "
                              f"{type(tensor_dict).__name__}")
    out = []
    for name, spec in tensor_dict.items():
        if not isinstance(name, str):
            raise TensorSpecError(f"tensor name {name!r} is not a str")
        out.append(_entry(name, spec))
    return out


def write(items, filename, metadata=None, fsync=False, align=0):
    """items [(name, code, shape, buffer)] -> a file (shs_save_file)."""
    _check_metadata(metadata)
    _C.save_file(os.fspath(filename), items, metadata, bool(fsync), int(align))


def write_bytes(items, metadata=None):
    """The file image of items, as bytes (the writer writes files: this
    one goes to a temporary directory)."""
    _check_metadata(metadata)
    with tempfile.TemporaryDirectory(prefix="shardsafe-") as d:
        path = os.path.join(d, "t.safetensors")
        write(items, path, metadata)
        with open(path, "rb") as fh:
            return fh.read()


def serialize_file(tensor_dict, filename, metadata=None):
    """serialize_file(tensor_dict, filename, metadata=None): write
    {name: TensorSpec or {"dtype", "shape", "data"}} to `filename`
    (atomically: a temporary sibling renamed into place).  The GIL is
    released while writing."""
    write(_entries(tensor_dict), filename, metadata)


def serialize(tensor_dict, metadata=None):
    """serialize(tensor_dict, metadata=None) -> bytes of the file image."""
    return write_bytes(_entries(tensor_dict), metadata)


_STRICTER = (" (shardsafe refuses equal keys in a header: deliberately stricter than the "
             "reference safetensors, which keeps the last one)")


def open_file(name, mode, data=None):
    """_C.File(name, mode, data); a header with two equal tensor names or
    metadata keys is refused, and the message says it is on purpose."""
    try:
        return _C.File(name, mode, data)
    except FormatError as e:
        if e.code == "SHS_EDUPLICATE" and "duplicate field" not in str(e):
            raise make_error(e.status, str(e) + _STRICTER) from None
        raise


def open_bytes(data, name="<bytes>"):
    """A _C.File over a file image in a bytes-like object."""
    if isinstance(data, str) or data is None:
        raise InvalidArgumentError(f"expected the bytes of a safetensors file, got "
                                   f"{type(data).__name__}")
    try:
        memoryview(data)
    except TypeError:
        raise InvalidArgumentError(f"expected the bytes of a safetensors file, got "
                                   f"{type(data).__name__}") from None
    return open_file(name, _C.MODE_MAP, data)


def deserialize(data):
    """deserialize(bytes) -> [(name, {"shape": [...], "dtype": "F32",
    "data": bytearray}), ...] in the order of the data in the file; each
    tensor's bytes are a copy."""
    f = open_bytes(data)
    try:
        out = []
        for name in f.names():
            dname, shape, nbytes = f.info(name)
            buf = bytearray(nbytes)
            if nbytes:
                f.read(name, buf)
            out.append((name, {"shape": list(shape), "dtype": dname, "data": buf}))
        return out
    finally:
        f.close()


def _items(fw_name, tensors):
    """[(name, code, shape, buffer)] of a dict name -> array/tensor."""
    fw = framework(fw_name)
    items = []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(f"tensor name {name!r} is not a str")
        dname, shape, buf = fw.tensor_bytes(name, t)
        items.append((name, dname, tuple(shape), buf))
    return items


def save_file(fw_name, tensors, filename, metadata=None, fsync=False, align=0):
    """Write a dict name -> array/tensor of one framework."""
    write(_items(fw_name, tensors), filename, metadata, fsync, align)


def save(fw_name, tensors, metadata=None):
    """The file image of a dict name -> array/tensor, as bytes."""
    return write_bytes(_items(fw_name, tensors), metadata)


def load_file(fw_name, filename, device="cpu", backend="mmap"):
    """Every tensor of the file, each in its own writable memory (the file
    may change or go away afterwards), in the order of the file."""
    from . import safe_open
    with safe_open(filename, fw_name, device=device, backend=backend, copy=True) as f:
        return f.get_tensors()


def load(fw_name, data):
    """Tensors of a file image (bytes), validated like a file, each in its
    own memory."""
    fw = framework(fw_name)
    f = open_bytes(data)
    try:
        out = {}
        for name in f.names():
            dname, shape, _ = f.info(name)
            t, buf = fw.empty(dname, shape, f"tensor '{name}'")
            if buf.nbytes:
                f.read(name, buf)
            out[name] = t
        return out
    finally:
        f.close()


def not_found(filename, status):
    """The reference's FileNotFoundError text (names the file)."""
    return make_error(status, f"No such file or directory: {os.fsdecode(filename)}")
