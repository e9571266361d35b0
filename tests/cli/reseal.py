"""Re-seal a step directory after a test edited it on purpose.

Version-2 metadata.json records common.json's XXH3 and ends with its own
seal ("metadata_xxh3", the XXH3 of the file with those 16 digits read as
'0').  A test that changes common.json or metadata.json to create a
*legitimate* difference (not corruption) calls reseal(step_dir) so that
only the intended difference remains.  Independent of the C code: the
checksums come from libxxhash through ctypes, the format from
docs/checkpoint.md.
"""
import ctypes
import json
import os
import sys

_xxh = ctypes.CDLL("libxxhash.so.0")
_xxh.XXH3_64bits.restype = ctypes.c_uint64
_xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(data: bytes) -> str:
    return "%016x" % _xxh.XXH3_64bits(data, len(data))


def reseal(step_dir: str, meta: dict = None) -> None:
    """Rewrite step_dir/metadata.json (or `meta`, an edited copy of it)
    with common.json's current checksum and a fresh seal."""
    mpath = os.path.join(step_dir, "metadata.json")
    if meta is None:
        with open(mpath, "rb") as f:
            meta = json.load(f)
    meta.pop("metadata_xxh3", None)
    if "common_xxh3" in meta:
        with open(os.path.join(step_dir, "common.json"), "rb") as f:
            meta["common_xxh3"] = xxh3(f.read())
    body = json.dumps(meta, separators=(",", ":")).encode()
    assert body.endswith(b"}")
    text = body[:-1] + b',\n"metadata_xxh3":"' + b"0" * 16 + b'"\n}\n'
    seal = xxh3(text).encode()
    text = text[: len(text) - 20] + seal + text[len(text) - 4 :]
    with open(mpath, "wb") as f:
        f.write(text)


if __name__ == "__main__":
    for d in sys.argv[1:]:
        reseal(d)
