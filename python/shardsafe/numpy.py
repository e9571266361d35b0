"""shardsafe.numpy: the `safetensors.numpy` API over libshardsafe.

save_file(tensor_dict, filename, metadata=None, fsync=False, align=0)
load_file(filename, *, backend="mmap") -> dict of arrays in their own memory
save(tensor_dict, metadata=None) -> bytes
load(data) -> dict of arrays

As the reference: big-endian arrays are written byte-swapped
(safetensors is little-endian) and non-contiguous arrays in C order;
dtypes safetensors lacks (complex128, longdouble, str, object) raise
DtypeError.
"""

from . import _files

__all__ = ["save_file", "load_file", "save", "load"]


def save_file(tensor_dict, filename, metadata=None, fsync=False, align=0):
    """Write a dict of numpy arrays atomically (fsync=True: durably;
    align=4096: page-aligned data)."""
    _files.save_file("np", _checked(tensor_dict), filename, metadata, fsync, align)


def save(tensor_dict, metadata=None):
    """The file image of `tensor_dict`, as bytes."""
    return _files.save("np", _checked(tensor_dict), metadata)


def load_file(filename, *, backend="mmap"):
    """Every array of the file, writable, in its own memory."""
    return _files.load_file("np", filename, "cpu", backend)


def load(data):
    """Arrays of a file image (bytes), in their own memory."""
    return _files.load("np", data)


def _checked(tensor_dict):
    from ._errors import InvalidArgumentError
    if not isinstance(tensor_dict, dict):
        raise InvalidArgumentError(f"Expected a dict of [str, numpy.ndarray] but received "
                                   f"{type(tensor_dict)}")
    return tensor_dict
