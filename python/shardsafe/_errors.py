"""Exceptions of shardsafe: one class per kind of library status.

The C extension raises them through make_error(status, message); message
is the library's shs_last_error() text, which names the file, the tensor
and the rule that failed.
"""

import errno as _errno

__all__ = [
    "ShardsafeError", "FormatError", "ChecksumError", "ShardsafeIOError", "ShardsafeFileNotFoundError",
    "NotFoundError", "MismatchError", "DtypeError", "InvalidArgumentError", "SafetensorError",
    "SliceError", "SharedTensorsError", "TensorSpecError",
]

# shs_status values (include/shardsafe.h), by name
STATUS = {
    -1: "SHS_ENOMEM", -2: "SHS_EIO", -3: "SHS_EINVAL", -4: "SHS_ENOENT",
    -5: "SHS_ENOTFOUND", -6: "SHS_ERANGE", -7: "SHS_ENOSPC", -8: "SHS_ESTATE",
    -9: "SHS_EUNSUPPORTED",
    -20: "SHS_EHEADER_TOO_SMALL", -21: "SHS_EHEADER_TOO_LARGE",
    -22: "SHS_EHEADER_LENGTH", -23: "SHS_EUTF8", -24: "SHS_EJSON",
    -25: "SHS_ENESTING", -26: "SHS_ESCHEMA", -27: "SHS_EDTYPE",
    -28: "SHS_EDUPLICATE", -29: "SHS_EOFFSET", -30: "SHS_EOVERFLOW",
    -31: "SHS_EMISALIGNED", -32: "SHS_ETENSOR_SIZE", -33: "SHS_ETRAILING",
    -34: "SHS_EWRONG_FORMAT", -35: "SHS_ECONVERT",
    -50: "SHS_ECONFIG", -51: "SHS_ECHECKSUM", -52: "SHS_ECORRUPT",
    -53: "SHS_EMISMATCH", -54: "SHS_ENOCHECKPOINT", -55: "SHS_ELOCKED",
}


class ShardsafeError(Exception):
    """Base class.  str(e) is the library's message; e.status the
    negative shs_status (None for errors of the binding itself) and
    e.code its name ("SHS_EJSON")."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status
        self.code = STATUS.get(status)

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class FormatError(ShardsafeError, ValueError):
    """The bytes are not a valid safetensors file or checkpoint (header
    rules, offsets, trailing bytes, another format, corrupt metadata)."""


class ChecksumError(FormatError):
    """Stored data does not match its checksum (SHS_ECHECKSUM)."""


class ShardsafeIOError(ShardsafeError, OSError):
    """The operating system failed a call: missing file (errno ENOENT),
    I/O error, no space, a locked save path."""


class ShardsafeFileNotFoundError(ShardsafeIOError, FileNotFoundError):
    """The file or directory does not exist (SHS_ENOENT)."""


class NotFoundError(ShardsafeError, KeyError):
    """No tensor / key / checkpoint of that name (SHS_ENOTFOUND,
    SHS_ENOCHECKPOINT).  Also a KeyError."""


class MismatchError(ShardsafeError, ValueError):
    """What was asked does not match what is there (SHS_EMISMATCH)."""


class DtypeError(MismatchError, TypeError):
    """A dtype the framework or the conversion cannot represent: BF16 or
    F8 for numpy, F8 for a torch without float8, an unsupported dtype
    conversion (SHS_ECONVERT), a framework dtype safetensors lacks."""


class InvalidArgumentError(ShardsafeError, ValueError):
    """Bad argument: box outside the tensor, wrong buffer size, bad
    name, a closed handle (SHS_EINVAL, SHS_ERANGE, SHS_ESTATE,
    SHS_ECONFIG, SHS_EUNSUPPORTED)."""


class SliceError(InvalidArgumentError, IndexError):
    """get_slice(name)[index] with an index the slicing rules refuse: out
    of range, a non-empty list, more indices than dimensions.  Also an
    IndexError."""


class SharedTensorsError(InvalidArgumentError, RuntimeError):
    """save_file / save of torch tensors that share memory (the reference
    raises RuntimeError: use save_model, or .clone() them).  Also a
    RuntimeError."""


class TensorSpecError(InvalidArgumentError, TypeError):
    """serialize / serialize_file given an entry that is neither a
    TensorSpec nor a complete {"dtype", "shape", "data"} dict.  Also a
    TypeError."""


# The reference package's one error class: every error of the library is
# one (`except SafetensorError` catches them all).
SafetensorError = ShardsafeError


_BY_STATUS = {
    -1: ShardsafeError, -2: ShardsafeIOError, -3: InvalidArgumentError,
    -4: ShardsafeFileNotFoundError, -5: NotFoundError, -6: InvalidArgumentError,
    -7: ShardsafeIOError, -8: InvalidArgumentError, -9: InvalidArgumentError,
    -35: DtypeError, -50: InvalidArgumentError, -51: ChecksumError,
    -52: FormatError, -53: MismatchError, -54: NotFoundError,
    -55: ShardsafeIOError,
}
_OS_ERRNO = {-2: _errno.EIO, -4: _errno.ENOENT, -7: _errno.ENOSPC, -55: _errno.EAGAIN}


def error_class(status):
    """The exception class of a library status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if -34 <= status <= -20:
        return FormatError
    return ShardsafeError


def make_error(status, message):
    """The exception instance for a library status (used by shardsafe._C)."""
    exc = error_class(status)(message, status)
    if status in _OS_ERRNO:
        exc.errno = _OS_ERRNO[status]
        exc.strerror = message
    return exc
