#!/usr/bin/env bash
# bench/convert_rss.sh [DIR] -- peak RSS of `shardsafe convert` on a ~1.9 GiB
# F32 file whose largest tensor is 1.5 GiB (target: < 64 MiB above the
# largest tensor; streaming keeps it O(chunk)).  Builds Release in
# build-bench/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-${TMPDIR:-/tmp}}
cmake -S "$ROOT" -B "$ROOT/build-bench" -DCMAKE_BUILD_TYPE=Release -DSHS_BUILD_TESTS=OFF >/dev/null
cmake --build "$ROOT/build-bench" --target shardsafe_cli -j"$(nproc)" >/dev/null
work=$(mktemp -d "$DIR/shs-convert-rss.XXXXXX")
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/in.safetensors" <<'PY'
import json, struct, sys
import numpy as np
shapes = {"a": 64 << 20, "b": 32 << 20, "big": 384 << 20, "c": 1024}   # F32 elements
hdr, off = {}, 0
for n in sorted(shapes):
    nb = shapes[n] * 4
    hdr[n] = {"dtype": "F32", "shape": [shapes[n]], "data_offsets": [off, off + nb]}
    off += nb
h = json.dumps(hdr, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for n in sorted(shapes):
        for i in range(0, shapes[n], 16 << 20):
            f.write(np.arange(i, min(shapes[n], i + (16 << 20)), dtype=np.float32).tobytes())
PY
size=$(stat -c %s "$work/in.safetensors")
rss=$(/usr/bin/time -f %M "$ROOT/build-bench/shardsafe" convert "$work/in.safetensors" \
      "$work/out.safetensors" --dtype bf16 2>&1 >/dev/null | tail -n1)
echo "convert F32 -> BF16 of a $((size >> 20)) MiB file (largest tensor 1536 MiB):" \
     "peak RSS $((rss / 1024)) MiB (target: < 1536 + 64 MiB)"
