"""Indexing rules of get_slice(name)[key]: which box of the tensor to read
(shs_file_read_slice / shs_checkpoint_read read only that box), which
steps to apply to it and which dimensions to drop.

reference_box: the rules of the reference `safetensors` package for
    safe_open(framework="np"), and for framework="pt" with
    backend="pread" (with framework="pt" and the default mmap backend the
    reference indexes a torch tensor, and so do we: torch's own rules).
basic_box: numpy's basic indexing, for open_checkpoint().get_slice.

docs/python.md ("Slices") lists where reference_box deliberately differs
from the reference (it drops steps, ignores indices past the last
dimension, fails on negative slice bounds and on slices of empty
dimensions).
"""

import operator

from ._errors import SliceError


def _as_int(k):
    if isinstance(k, slice):
        return None
    try:
        return operator.index(k)
    except TypeError:
        return None


def _show(items):
    """The index as the reference prints it: "[2:, 20]"."""
    out = []
    for k, shown in items:
        if isinstance(k, slice):
            a = "" if k.start is None else str(k.start)
            b = "" if k.stop is None else str(k.stop)
            s = "" if k.step in (None, 1) else f":{k.step}"
            out.append(f"{a}:{b}{s}")
        else:
            out.append(str(shown))
    return "[" + ", ".join(out) + "]"


def _expand_ellipsis(items, ndim):
    n_ell = sum(1 for k in items if k is Ellipsis)
    if n_ell > 1:
        raise SliceError("an index can only have a single ellipsis ('...')")
    if n_ell:
        i = next(i for i, k in enumerate(items) if k is Ellipsis)
        fill = max(ndim - (len(items) - 1), 0)
        items = items[:i] + [slice(None)] * fill + items[i + 1:]
    return items


def reference_box(key, shape):
    """(start, count, steps, squeeze) under the reference's rules:

    - an int selects (and drops) one position; a negative int counts from
      the end; past either end: "Invalid index -6 for dimension 1 of size
      5" / "... index 20 out of bounds for tensor dimension #1 of size 5";
    - a slice a:b is not clamped: an end past the dimension is an error
      ("Error during slicing [:20] with shape [10, 5]: index 19 out of
      bounds for tensor dimension #0 of size 10"), a start at or past it
      too; b <= a selects nothing; a positive step is applied (the
      reference drops steps); a negative step is refused;
    - a tuple applies one entry per leading dimension; an empty list
      selects nothing of dimension 0 (its shape becomes 0); a non-empty
      list: "Non empty lists are not implemented";
    - extensions: one `...`, negative slice bounds (from the end).
    """
    ndim = len(shape)
    if isinstance(key, list):
        if key:
            raise SliceError("Non empty lists are not implemented")
        items = [slice(0, 0)]
    elif isinstance(key, tuple):
        items = list(key)
    else:
        items = [key]
    items = _expand_ellipsis(items, ndim)
    conv = []  # (key, shown) with ints made non-negative
    for d, k in enumerate(items):
        if isinstance(k, slice):
            for v in (k.start, k.stop, k.step):
                if v is not None and _as_int(v) is None:
                    raise TypeError(f"slice bounds must be ints or None, got {v!r}")
            conv.append((k, None))
            continue
        i = _as_int(k)
        if i is None:
            raise TypeError(f"unsupported index {k!r}: get_slice takes ints, slices, '...' "
                            "and tuples of them (the reference's rules)")
        if i < 0 and d < ndim:
            if i + shape[d] < 0:
                raise SliceError(f"Invalid index {i} for dimension {d} of size {shape[d]}")
            i += shape[d]
        conv.append((i, i))
    prefix = f"Error during slicing {_show(conv)} with shape {list(shape)}: "
    if len(conv) > ndim:
        raise SliceError(prefix + "more slicing indexes than dimensions in tensor")
    start, count, steps, squeeze = [], [], [], set()
    bounds = []
    for d, (k, i) in enumerate(conv):
        n = shape[d]
        if isinstance(k, slice):
            step = 1 if k.step is None else operator.index(k.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            if step < 0:
                raise SliceError(prefix + f"negative step {step} for dimension #{d} "
                                 "(not supported)")
            a = 0 if k.start is None else operator.index(k.start)
            b = n if k.stop is None else operator.index(k.stop)
            if a < 0:
                a += n
            if b < 0:
                b += n
            bounds.append((d, a, b, n, k.start is None and k.stop is None))
            steps.append(step)
        else:
            bounds.append((d, i, i + 1, n, False))
            steps.append(1)
            squeeze.add(d)
    # checked from the last dimension to the first, as the reference does:
    # with several bad entries, the last one is reported
    for d, a, b, n, full in reversed(bounds):
        if n == 0 and (full or (a == 0 and b == 0)):
            continue  # the reference refuses even [:] of an empty dimension
        if a < 0 or a >= n:
            asked = conv[d][0].start if a < 0 else a
        elif b > n:
            asked = b - 1
        else:
            continue  # b <= a: nothing selected
        raise SliceError(prefix + f"index {asked} out of bounds for tensor dimension "
                         f"#{d} of size {n}")
    for d, a, b, n, _ in bounds:
        m = max(b - a, 0)
        start.append(a if m else 0)
        count.append(m)
    for d in range(len(bounds), ndim):
        start.append(0)
        count.append(shape[d])
        steps.append(1)
    return start, count, steps, squeeze


def basic_box(key, shape):
    """numpy basic indexing (ints, slices with a positive step, one
    `...`) -> (start, count, steps, squeeze): ends are clamped, as numpy
    does."""
    ndim = len(shape)
    items = list(key) if isinstance(key, tuple) else [key]
    items = _expand_ellipsis(items, ndim)
    if len(items) > ndim:
        raise IndexError(f"too many indices: {len(items)} for a tensor of {ndim} dimensions")
    items = items + [slice(None)] * (ndim - len(items))
    start, count, steps, squeeze = [], [], [], set()
    for d, (k, n) in enumerate(zip(items, shape)):
        if isinstance(k, slice):
            b, e, s = k.indices(n)
            if s <= 0:
                raise SliceError(f"dimension {d}: slice step {s} (only positive steps are supported)")
            m = len(range(b, e, s))
            start.append(b if m else 0)
            count.append((m - 1) * s + 1 if m else 0)
            steps.append(s)
            continue
        i = _as_int(k)
        if i is None:
            raise IndexError(f"dimension {d}: unsupported index {k!r} (ints, slices and ... only)")
        if i < -n or i >= n:
            raise SliceError(f"index {i} is out of bounds for dimension {d} with size {n}")
        start.append(i + n if i < 0 else i)
        count.append(1)
        steps.append(1)
        squeeze.add(d)
    return start, count, steps, squeeze
