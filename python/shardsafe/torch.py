"""shardsafe.torch: the `safetensors.torch` API over libshardsafe.

save_file(tensors, filename, metadata=None, fsync=False, align=0)
load_file(filename, device="cpu", *, backend="mmap") -> dict of tensors
save(tensors, metadata=None) -> bytes
load(data) -> dict of tensors
save_model(model, filename, metadata=None, force_contiguous=True)
load_model(model, filename, strict=True, device="cpu", *, backend="mmap")
    -> (missing, unexpected)
storage_ptr(tensor), storage_size(tensor)

Tensors sharing memory are refused by save_file/save (SharedTensorsError,
a RuntimeError); save_model keeps one name of each group that covers its
whole storage -- the smallest name, preferring names already in the file
when loading -- and records each dropped name -> kept name in the
file's metadata, as the reference does.
"""

from collections import defaultdict

import torch as _torch

from . import _files
from ._errors import InvalidArgumentError, SharedTensorsError

__all__ = ["save_file", "load_file", "save", "load", "save_model", "load_model",
           "storage_ptr", "storage_size"]


def storage_ptr(tensor):
    """Address of the tensor's storage (0 when it has none: meta)."""
    for get in (lambda: tensor.untyped_storage().data_ptr(),  # torch >= 2.0
                lambda: tensor.storage().data_ptr()):
        try:
            return get()
        except NotImplementedError:
            return 0
        except (AttributeError, RuntimeError):
            continue
    return 0


def _elsize(tensor):
    return tensor.element_size()


def storage_size(tensor):
    """Bytes of the tensor's storage (for meta tensors: of the tensor)."""
    try:
        return tensor.untyped_storage().nbytes()  # torch >= 2.0
    except AttributeError:
        pass
    try:
        return tensor.storage().size() * _elsize(tensor)
    except NotImplementedError:
        return tensor.nelement() * _elsize(tensor)


def _end_ptr(tensor):
    """One past the last byte the tensor's elements occupy."""
    if not tensor.nelement():
        return tensor.data_ptr()
    last = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr() + (last + 1) * _elsize(tensor)


def _filter_shared_not_shared(groups, state_dict):
    """Split groups of names that share a storage into groups whose
    memory actually overlaps (two halves of one buffer are not shared)."""
    out = []
    for names in groups:
        if len(names) < 2:
            out.append(names)
            continue
        spans = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in names)
        end = None
        for start, stop, n in spans:
            if end is None or start >= end:
                out.append({n})
                end = stop
            else:
                out[-1].add(n)
                end = max(end, stop)
    return out


def _find_shared_tensors(state_dict):
    """[set of names] whose memory overlaps, one set per group, in the
    order of the dict (meta tensors and empty storages never share)."""
    by_storage = {}
    for name, t in state_dict.items():
        if t.device == _torch.device("meta"):
            continue
        ptr, size = storage_ptr(t), storage_size(t)
        if ptr != 0 and size != 0:
            by_storage.setdefault((t.device, ptr, size), set()).add(name)
    return _filter_shared_not_shared(list(by_storage.values()), state_dict)


def _is_complete(tensor):
    """The tensor covers its whole storage, from its first byte."""
    return (tensor.data_ptr() == storage_ptr(tensor)
            and tensor.nelement() * _elsize(tensor) == storage_size(tensor))


def _remove_duplicate_names(state_dict, *, preferred_names=None, discard_names=None):
    """{kept name: [dropped names]} for the groups of shared tensors: the
    kept name covers the whole storage; among those, the smallest name of
    `preferred_names` if any, else the smallest not in `discard_names`,
    else the smallest.  A group where no name covers the storage:
    RuntimeError."""
    preferred = set(preferred_names or [])
    discard = set(discard_names or [])
    to_remove = defaultdict(list)
    for group in _find_shared_tensors(state_dict):
        complete = {n for n in group if _is_complete(state_dict[n])}
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no "
                f"suitable name to keep for saving amongst: {group}. None is covering the "
                "entire storage. Refusing to save/load the model since you could be storing "
                "much more memory than needed. Save the tensors as a clone (.clone()) or see "
                "docs/python.md (save_model).")
        keep = min(complete)
        if complete - discard:
            keep = min(complete - discard)
        if preferred & complete:
            keep = min(preferred & complete)
        for n in sorted(group):
            if n != keep:
                to_remove[keep].append(n)
    return to_remove


def _check_saveable(tensors):
    """The reference's checks before anything is written, in its order and
    with its messages."""
    if not isinstance(tensors, dict):
        raise InvalidArgumentError(
            f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for k, v in tensors.items():
        if not isinstance(v, _torch.Tensor):
            raise InvalidArgumentError(
                f"Key `{k}` is invalid, expected torch.Tensor but received {type(v)}")
        if v.layout != _torch.strided:
            sparse.append(k)
    if sparse:
        raise InvalidArgumentError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not "
            "support. You can make it a dense tensor before saving with `.to_dense()` but be "
            "aware this might make a much larger file than needed.")
    shared = [names for names in _find_shared_tensors(tensors) if len(names) > 1]
    if shared:
        raise SharedTensorsError(
            f"Some tensors share memory, this will lead to duplicate memory on disk and "
            f"potential differences when loading them again: {shared}. A potential way to "
            "correctly save your model is to use `save_model` (or .clone() the others).")


def save_file(tensors, filename, metadata=None, fsync=False, align=0):
    """Write a dict of dense, contiguous tensors (any device: copied to the
    CPU) atomically.  fsync=True makes it durable; align=4096 page-aligns
    the data."""
    _check_saveable(tensors)
    _files.save_file("pt", tensors, filename, metadata, fsync, align)


def save(tensors, metadata=None):
    """The file image of `tensors`, as bytes."""
    _check_saveable(tensors)
    return _files.save("pt", tensors, metadata)


def load_file(filename, device="cpu", *, backend="mmap"):
    """Every tensor of the file, in its own memory, on `device`."""
    return _files.load_file("pt", filename, device, backend)


def load(data):
    """Tensors of a file image (bytes), on the CPU, in their own memory."""
    return _files.load("pt", data)


def save_model(model, filename, metadata=None, force_contiguous=True):
    """Save model.state_dict() with tensors that share memory written once
    (see the module doc); force_contiguous makes every tensor contiguous."""
    state_dict = model.state_dict()
    metadata = dict(metadata) if metadata is not None else None
    for kept, dropped in _remove_duplicate_names(state_dict).items():
        for name in dropped:
            if metadata is None:
                metadata = {}
            metadata.setdefault(name, kept)  # never over the caller's entries
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except InvalidArgumentError as e:
        if isinstance(e, SharedTensorsError):
            raise
        raise InvalidArgumentError(
            f"{e} Or use save_model(..., force_contiguous=True), read the docs for potential "
            "caveats.", e.status) from None


def load_model(model, filename, strict=True, device="cpu", *, backend="mmap"):
    """Load a file into `model` (tensors saved once for a group of shared
    ones fill the whole group).  Returns (missing, unexpected): names of
    the model not loaded, names of the file not used; with strict, either
    raises RuntimeError listing them."""
    state_dict = load_file(filename, device=device, backend=backend)
    to_removes = _remove_duplicate_names(model.state_dict(), preferred_names=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    for dropped in to_removes.values():
        for name in dropped:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(
                f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(
                f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected
