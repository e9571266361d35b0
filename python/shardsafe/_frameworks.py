"""numpy and torch adapters: dtype names <-> framework dtypes, arrays
over buffers, destinations to read into, tensors to write from.

The binding adds no format code: the C library validates, reads and
writes; this module only turns memory into arrays and back.
"""

import numpy as _np

from . import _C
from ._errors import DtypeError, InvalidArgumentError

# new torch tensors of this size and more that a read fills get huge pages
# (numpy's threshold for its own arrays)
_HUGE_MIN = 4 << 20

# safetensors dtype name -> numpy dtype (numpy has no BF16, F8, F4, F6)
_NP_DTYPES = {
    "BOOL": _np.bool_, "U8": _np.uint8, "I8": _np.int8, "I16": _np.int16,
    "U16": _np.uint16, "I32": _np.int32, "U32": _np.uint32,
    "I64": _np.int64, "U64": _np.uint64, "F16": _np.float16,
    "F32": _np.float32, "F64": _np.float64, "C64": _np.complex64,
}


class NumpyFramework:
    name = "np"

    def __init__(self):
        self._to = {k: _np.dtype(v) for k, v in _NP_DTYPES.items()}
        self._from = {v: k for k, v in self._to.items()}

    def dtype(self, dname, what):
        try:
            return self._to[dname]
        except KeyError:
            raise DtypeError(f"{what}: dtype {dname} has no numpy equivalent "
                             "(numpy has no BF16, F8, F4, F6; use framework='pt' "
                             "for BF16)") from None

    def dtype_name(self, dtype, what):
        """safetensors name of a numpy dtype (or dtype-like)."""
        try:
            dt = _np.dtype(dtype)
        except TypeError:
            dt = None
        if dt is not None and dt.byteorder == ">":
            raise DtypeError(f"{what}: big-endian {dt} (safetensors is "
                             "little-endian): convert with .astype(dtype.newbyteorder('<'))")
        if dt is not None:
            dt = dt.newbyteorder("=")
        if dt not in self._from:
            raise DtypeError(f"{what}: numpy dtype {dtype} has no safetensors dtype")
        return self._from[dt]

    def from_buffer(self, buf, dname, shape, what):
        arr = _np.frombuffer(buf, dtype=self.dtype(dname, what))
        return arr.reshape(shape)

    def empty(self, dname, shape, what):
        """(result, writable C-contiguous buffer over its bytes)"""
        arr = _np.empty(shape, dtype=self.dtype(dname, what))
        return arr, arr

    def post(self, arr, steps, squeeze):
        if any(s != 1 for s in steps):
            arr = _np.ascontiguousarray(arr[tuple(slice(None, None, s) for s in steps)])
        if squeeze:
            arr = arr.reshape([n for d, n in enumerate(arr.shape) if d not in squeeze])
        return arr

    def tensor_bytes(self, name, arr):
        """(dtype name, shape, buffer) for writing `arr`."""
        if not isinstance(arr, _np.ndarray):
            raise InvalidArgumentError(f"tensor '{name}': expected a numpy.ndarray, "
                                       f"got {type(arr).__name__}")
        dname = self.dtype_name(arr.dtype, f"tensor '{name}'")
        if not arr.flags.c_contiguous:
            raise InvalidArgumentError(
                f"tensor '{name}' is not C-contiguous: safetensors stores dense "
                "row-major data; pass numpy.ascontiguousarray(x)")
        return dname, arr.shape, arr.reshape(-1).view(_np.uint8)


class TorchFramework:
    name = "pt"

    def __init__(self):
        import torch
        self.torch = torch
        names = {
            "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16",
            "U16": "uint16", "I32": "int32", "U32": "uint32", "I64": "int64",
            "U64": "uint64", "F16": "float16", "BF16": "bfloat16",
            "F32": "float32", "F64": "float64", "C64": "complex64",
            "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
            "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
            "F8_E8M0": "float8_e8m0fnu",
        }
        # only what this torch has: torch 1.13 has no uint16/32/64, no F8
        self._to = {k: getattr(torch, v) for k, v in names.items() if hasattr(torch, v)}
        self._from = {v: k for k, v in self._to.items()}

    def dtype(self, dname, what):
        try:
            return self._to[dname]
        except KeyError:
            raise DtypeError(f"{what}: dtype {dname} has no equivalent in torch "
                             f"{self.torch.__version__}") from None

    def dtype_name(self, dtype, what):
        if dtype not in self._from:
            raise DtypeError(f"{what}: torch dtype {dtype} has no safetensors dtype")
        return self._from[dtype]

    def from_buffer(self, buf, dname, shape, what):
        dt = self.dtype(dname, what)
        raw = _np.frombuffer(buf, dtype=_np.uint8)
        if raw.size == 0:
            return self.torch.empty(shape, dtype=dt)
        if raw.ctypes.data % self.torch.empty((), dtype=dt).element_size():
            # a file whose data is not in the reference order can put a
            # tensor at an address that is no multiple of its element size:
            # torch kernels assume aligned elements, so copy it
            out = self.torch.empty(shape, dtype=dt)
            out.view(-1).view(self.torch.uint8).numpy()[:] = raw
            return out
        return self.torch.frombuffer(buf, dtype=dt).reshape(shape)

    def empty(self, dname, shape, what):
        t = self.torch.empty(shape, dtype=self.dtype(dname, what))
        buf = t.view(-1).view(self.torch.uint8).numpy()
        if buf.nbytes >= _HUGE_MIN:
            # fresh memory about to be filled: huge pages, as numpy does
            # for its arrays (bench/README.md, "Python binding")
            _C.advise_huge(buf)
        return t, buf

    def post(self, t, steps, squeeze):
        if any(s != 1 for s in steps):
            t = t[tuple(slice(None, None, s) for s in steps)].contiguous()
        if squeeze:
            t = t.reshape([n for d, n in enumerate(t.shape) if d not in squeeze])
        return t

    def tensor_bytes(self, name, t):
        torch = self.torch
        if not isinstance(t, torch.Tensor):
            raise InvalidArgumentError(f"tensor '{name}': expected a torch.Tensor, "
                                       f"got {type(t).__name__}")
        dname = self.dtype_name(t.dtype, f"tensor '{name}'")
        if t.layout != torch.strided:
            raise InvalidArgumentError(f"tensor '{name}': layout {t.layout} "
                                       "(only dense tensors can be saved)")
        if not t.is_contiguous():
            raise InvalidArgumentError(
                f"tensor '{name}' is not contiguous: safetensors stores dense "
                "row-major data; pass x.contiguous()")
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        return dname, tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy()


_CACHE = {}


def framework(name):
    """The adapter for framework "np"/"numpy" or "pt"/"torch"/"pytorch"."""
    key = {"np": "np", "numpy": "np", "pt": "pt", "torch": "pt",
           "pytorch": "pt"}.get(name)
    if key is None:
        raise InvalidArgumentError(f"framework {name!r}: expected 'np' or 'pt'")
    if key not in _CACHE:
        _CACHE[key] = NumpyFramework() if key == "np" else TorchFramework()
    return _CACHE[key]


def parse_index(key, shape):
    """A numpy-style basic index (ints, slices with step > 0, Ellipsis)
    -> (start, count, steps, squeeze): the box to read, the steps to apply
    to it and the dimensions to drop."""
    ndim = len(shape)
    if not isinstance(key, tuple):
        key = (key,)
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_ell:
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1:]
    if len(key) > ndim:
        raise IndexError(f"too many indices: {len(key)} for a tensor of {ndim} dimensions")
    key = key + (slice(None),) * (ndim - len(key))
    start, count, steps, squeeze = [], [], [], set()
    for d, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            b, e, s = k.indices(n)
            if s <= 0:
                raise InvalidArgumentError(f"dimension {d}: slice step {s} "
                                           "(only positive steps are supported)")
            m = len(range(b, e, s))
            start.append(b if m else 0)
            count.append((m - 1) * s + 1 if m else 0)
            steps.append(s)
        elif hasattr(k, "__index__"):
            i = k.__index__()
            if i < -n or i >= n:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {n}")
            start.append(i + n if i < 0 else i)
            count.append(1)
            steps.append(1)
            squeeze.add(d)
        else:
            raise IndexError(f"dimension {d}: unsupported index {k!r} "
                             "(ints, slices and ... only)")
    return start, count, steps, squeeze
