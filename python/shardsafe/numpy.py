"""shardsafe.numpy: the safetensors numpy API over libshardsafe.

save_file(tensors, filename, metadata=None, fsync=False, align=0)
load_file(filename) -> dict of writable numpy arrays
save(tensors, metadata=None) -> bytes
load(data) -> dict
"""

from . import _files

__all__ = ["save_file", "load_file", "save", "load"]


def save_file(tensors, filename, metadata=None, fsync=False, align=0):
    """Write a dict of C-contiguous numpy arrays.  Non-contiguous arrays
    are refused (InvalidArgumentError): pass numpy.ascontiguousarray(x).
    Big-endian arrays and dtypes safetensors lacks: DtypeError."""
    _files.save_file("np", tensors, filename, metadata, fsync, align)


def load_file(filename):
    return _files.load_file("np", filename)


def save(tensors, metadata=None):
    return _files.save("np", tensors, metadata)


def load(data):
    return _files.load("np", data)
