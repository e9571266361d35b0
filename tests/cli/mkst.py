"""mkst.py -- a tiny, independent safetensors writer/reader for the CLI tests.

Written from the format description only (8-byte little-endian header
length, JSON header, data), so that the tests do not check the C library
against itself.  Run with Debian's /usr/bin/python3 (it has numpy).

An entry is (name, dtype, shape, raw_bytes).
"""
import json
import struct

import numpy as np

# Enum order of the reference implementation (ascending); files are
# written in DESCENDING order of this list, then by name bytewise.
DTYPES = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
          "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
          "I32", "U32", "F32", "C64", "F64", "I64", "U64"]

NP = {np.dtype("float64"): "F64", np.dtype("float32"): "F32",
      np.dtype("float16"): "F16", np.dtype("int64"): "I64",
      np.dtype("int32"): "I32", np.dtype("int16"): "I16", np.dtype("int8"): "I8",
      np.dtype("uint8"): "U8", np.dtype("uint16"): "U16",
      np.dtype("uint32"): "U32", np.dtype("uint64"): "U64",
      np.dtype("bool"): "BOOL"}


def entry(name, a):
    """Entry from a numpy array (little-endian, C order)."""
    a = np.ascontiguousarray(a)
    return (name, NP[a.dtype], list(a.shape), a.astype(a.dtype.newbyteorder("<")).tobytes())


def ref_order(entries):
    return sorted(entries, key=lambda e: (-DTYPES.index(e[1]), e[0].encode()))


def header_bytes(entries, metadata=None, align=8, pad_to=None):
    """Header JSON exactly as the reference writer lays it out (compact,
    __metadata__ first with sorted keys, tensors in the given order),
    padded with spaces so that 8 + len is a multiple of `align`."""
    parts = []
    if metadata is not None:
        parts.append('"__metadata__":' + json.dumps(
            dict(sorted(metadata.items(), key=lambda kv: kv[0].encode())),
            separators=(",", ":"), ensure_ascii=False))
    off = 0
    for name, dt, shape, data in entries:
        parts.append(json.dumps(name, ensure_ascii=False) + ":" + json.dumps(
            {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]},
            separators=(",", ":")))
        off += len(data)
    h = ("{" + ",".join(parts) + "}").encode()
    h += b" " * ((align - (8 + len(h)) % align) % align)
    return h


def write(path, entries, metadata=None, sort=True, trailing=b""):
    """Write a file; `sort` puts entries in reference order, else the
    data follows the given order."""
    if sort:
        entries = ref_order(entries)
    h = header_bytes(entries, metadata)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for e in entries:
            f.write(e[3])
        f.write(trailing)
    return h


def read(path):
    """(header_len, header dict in document order, {name: (dtype, shape, bytes)},
    metadata or None)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8:8 + n].decode(), object_pairs_hook=dict)
    data = buf[8 + n:]
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], data[a:b])
    return n, hdr, out, hdr.get("__metadata__")


def bf16_rne(a):
    """float32 array -> bf16 bit patterns (uint16), round to nearest even.
    NaN is made quiet with the sign and top payload bits kept."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    r[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return r
