"""numpy and torch adapters: dtype names <-> framework dtypes, arrays
over buffers, destinations to read into, tensors to write from.

The binding adds no format code: the C library validates, reads and
writes; this module only turns memory into arrays and back.
"""

import sys as _sys

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
        """safetensors name of a numpy dtype (or dtype-like), either byte
        order."""
        try:
            dt = _np.dtype(dtype)
        except TypeError:
            dt = None
        if dt is not None:
            dt = dt.newbyteorder("=") if dt.byteorder in "<>" else dt
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
        """(dtype name, shape, buffer) for writing `arr`: as the
        reference, a big-endian array is written byte-swapped
        (safetensors is little-endian) and a non-contiguous one in C
        order (both through a copy)."""
        if not isinstance(arr, _np.ndarray):
            raise InvalidArgumentError(f"tensor '{name}': expected a numpy.ndarray, "
                                       f"got {type(arr).__name__}")
        dname = self.dtype_name(arr.dtype, f"tensor '{name}'")
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and _sys.byteorder == "big"):
            arr = arr.astype(arr.dtype.newbyteorder("<"), order="C")
        elif not arr.flags.c_contiguous:
            arr = _np.ascontiguousarray(arr)
        return dname, arr.shape, arr.reshape(-1).view(_np.uint8)

    def inplace_bytes(self, name, arr):
        """(dtype name, shape, buffer) of memory a checkpoint manager reads
        and loads into in place: C-contiguous, little-endian, writable."""
        if not isinstance(arr, _np.ndarray):
            raise InvalidArgumentError(f"tensor '{name}': expected a numpy.ndarray, "
                                       f"got {type(arr).__name__}")
        dname = self.dtype_name(arr.dtype, f"tensor '{name}'")
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and _sys.byteorder == "big"):
            raise DtypeError(f"tensor '{name}': big-endian {arr.dtype} (safetensors is "
                             "little-endian; loading writes into this memory)")
        if not arr.flags.c_contiguous:
            raise InvalidArgumentError(
                f"tensor '{name}' is not C-contiguous: loading writes into this memory; "
                "register numpy.ascontiguousarray(x)")
        if not arr.flags.writeable:
            raise InvalidArgumentError(f"tensor '{name}' is read-only: loading writes into it")
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
        """(dtype name, shape, buffer) for writing `t`, checked in the
        reference's order: a tensor, dense, contiguous; moved to the CPU
        (a meta tensor fails there, as in the reference); then its dtype."""
        torch = self.torch
        if not isinstance(t, torch.Tensor):
            raise InvalidArgumentError(f"tensor '{name}': expected a torch.Tensor, "
                                       f"got {type(t).__name__}")
        if t.layout != torch.strided:
            raise InvalidArgumentError(f"tensor '{name}': layout {t.layout} "
                                       "(only dense tensors can be saved)")
        if not t.is_contiguous():
            raise InvalidArgumentError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not "
                "allowed. It either means you are trying to save tensors which are reference "
                "of each other in which case it's recommended to save only the full tensors, "
                "and reslice at load time, or simply call `.contiguous()` on your tensor to "
                "pack it before saving.")
        t = t.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        dname = self.dtype_name(t.dtype, f"tensor '{name}'")
        return dname, tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy()

    def inplace_bytes(self, name, t):
        """(dtype name, shape, buffer) of memory a checkpoint manager reads
        and loads into in place: a dense contiguous CPU tensor."""
        torch = self.torch
        if not isinstance(t, torch.Tensor):
            raise InvalidArgumentError(f"tensor '{name}': expected a torch.Tensor, "
                                       f"got {type(t).__name__}")
        if t.layout != torch.strided or not t.is_contiguous():
            raise InvalidArgumentError(f"tensor '{name}' is not contiguous and dense: loading "
                                       "writes into this memory; register x.contiguous()")
        if t.device.type != "cpu":
            raise InvalidArgumentError(f"tensor '{name}' is on {t.device}: only CPU tensors")
        dname = self.dtype_name(t.dtype, f"tensor '{name}'")
        return dname, tuple(t.shape), t.detach().reshape(-1).view(torch.uint8).numpy()


_CACHE = {}


_NOT_BOUND = ("tf", "tensorflow", "jax", "flax", "mlx", "paddle")


def framework(name):
    """The adapter for framework "np"/"numpy" or "pt"/"torch"/"pytorch"."""
    key = {"np": "np", "numpy": "np", "pt": "pt", "torch": "pt",
           "pytorch": "pt"}.get(name) if isinstance(name, str) else None
    if key is None:
        if name in _NOT_BOUND:
            raise InvalidArgumentError(f"framework {name} is not supported by shardsafe "
                                       "(only 'pt' and 'np' are bound)")
        raise InvalidArgumentError(f"framework {name} is invalid: expected 'pt' or 'np'")
    if key not in _CACHE:
        _CACHE[key] = NumpyFramework() if key == "np" else TorchFramework()
    return _CACHE[key]


def parse_device(fw, device):
    """`device` as torch parses it ("cpu", "cuda", "cuda:1", 1 ...): None
    for the CPU, else the torch.device tensors are moved to.  The device
    must exist here: CUDA without CUDA, an index past the last device or
    a device torch cannot create is InvalidArgumentError.  numpy has
    only the CPU (the reference's rule)."""
    if device is None or (isinstance(device, str) and device == "cpu"):
        return None
    if fw.name == "np":
        raise InvalidArgumentError(f"Device {device} is not supported for framework numpy")
    torch = fw.torch
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise InvalidArgumentError(f"device {device} is invalid: {e}") from None
    if dev.type == "cpu":
        return None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidArgumentError(
                f"device {device!r}: CUDA is not available here (torch "
                f"{torch.__version__}, torch.cuda.is_available() is False)")
        n = torch.cuda.device_count()
        if dev.index is not None and dev.index >= n:
            raise InvalidArgumentError(f"device {device!r}: this machine has {n} CUDA "
                                       f"device(s) (cuda:0 to cuda:{n - 1})")
        return dev
    try:
        torch.empty(0, device=dev)
    except Exception as e:  # noqa: BLE001 -- torch's reason, whatever its class
        raise InvalidArgumentError(f"device {device!r} is not available here: "
                                   f"{type(e).__name__}: {e}") from None
    return dev
