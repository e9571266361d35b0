# convert_memory.sh -- convert and verify stream in bounded memory: a 256 MiB
# F32 tensor is converted to BF16 with peak RSS < 64 MiB (an implementation
# holding one whole tensor needs > 256 MiB), and spot-checked for values.
# Needs /usr/bin/time (Debian package `time`).  Big files live in $WORK,
# removed on exit.
. "$(dirname "$0")/lib.bash"

[ -x /usr/bin/time ] || { echo "/usr/bin/time missing (apt-get install time)" >&2; exit 1; }
LIMIT_KB=$((64 * 1024))

"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
N = 64 * 1024 * 1024                      # 256 MiB of F32

class Sized:                              # header_bytes only needs len()
    def __init__(self, n): self.n = n
    def __len__(self): return self.n

def big_chunk(i, n):                      # deterministic values, varied bits
    x = np.arange(i, i + n, dtype=np.float64)
    return (np.sin(x * 0.001) * (1 + x / N) * 3.0).astype(np.float32)

small = [mkst.entry("bias", np.linspace(-1, 1, 1000, dtype=np.float32)),
         mkst.entry("step", np.array([42], np.int64)),
         mkst.entry("norm", np.ones(4096, np.float16))]
entries = mkst.ref_order(small + [("big.weight", "F32", [8192, 8192], Sized(N * 4))])
h = mkst.header_bytes(entries, {"format": "pt"})
with open(f"{W}/big.safetensors", "wb") as f:
    f.write(len(h).to_bytes(8, "little"))
    f.write(h)
    for name, dt, shape, data in entries:
        if name != "big.weight":
            f.write(data)
            continue
        step = 4 * 1024 * 1024
        for i in range(0, N, step):
            f.write(big_chunk(i, min(step, N - i)).tobytes())
EOF
BIG="$WORK/big.safetensors"
OUT="$WORK/big.bf16.safetensors"

expect 0 "convert a 256 MiB tensor to bf16" /usr/bin/time -f %M -o "$WORK/rss" "$SHS_BIN" convert "$BIG" "$OUT" --dtype bf16
RSS=$(tail -n 1 "$WORK/rss")
CHECKS=$((CHECKS + 1))
if [ "$RSS" -lt "$LIMIT_KB" ]; then pass "convert peak RSS ${RSS} KiB < ${LIMIT_KB} KiB"
else fail "convert peak RSS ${RSS} KiB >= ${LIMIT_KB} KiB (not streaming?)"; fi

py "big tensor values at chunk boundaries" <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
N = 64 * 1024 * 1024
def big_chunk(i, n):
    x = np.arange(i, i + n, dtype=np.float64)
    return (np.sin(x * 0.001) * (1 + x / N) * 3.0).astype(np.float32)
import json, struct
with open(f"{W}/big.bf16.safetensors", "rb") as f:
    (hl,) = struct.unpack("<Q", f.read(8))
    hdr = json.loads(f.read(hl))
    assert hdr["__metadata__"] == {"format": "pt"}
    t = hdr["big.weight"]
    assert t["dtype"] == "BF16" and t["shape"] == [8192, 8192]
    a, b = t["data_offsets"]
    assert b - a == N * 2
    out = np.memmap(f"{W}/big.bf16.safetensors", dtype="<u2", mode="r", offset=8 + hl + a, shape=(N,))
    per = 8 * 1024 * 1024 // 4            # source elements per 8 MiB chunk
    for start in [0, per - 3, 2 * per - 1, N // 2, N - 1000]:
        n = min(1000, N - start)
        want = mkst.bf16_rne(big_chunk(start, n))
        assert (out[start:start + n] == want).all(), start
    s = hdr["step"]
    with open(f"{W}/big.bf16.safetensors", "rb") as g:
        g.seek(8 + hl + s["data_offsets"][0])
        assert g.read(8) == (42).to_bytes(8, "little")
EOF

expect 0 "verify --check-finite of the 256 MiB file" /usr/bin/time -f %M -o "$WORK/rss" "$SHS_BIN" verify --check-finite "$BIG"
RSS=$(tail -n 1 "$WORK/rss")
CHECKS=$((CHECKS + 1))
if [ "$RSS" -lt "$LIMIT_KB" ]; then pass "verify peak RSS ${RSS} KiB < ${LIMIT_KB} KiB"
else fail "verify peak RSS ${RSS} KiB >= ${LIMIT_KB} KiB"; fi
expect 0 "output passes verify" "$SHS_BIN" verify "$OUT"

# SIGTERM during a conversion: the temporary file is removed, OUT never
# appears, and the process dies of the signal (status 143).
rm -f "$OUT"
set +e
"$SHS_BIN" convert "$BIG" "$OUT" --dtype f64 >"$WORK/out" 2>"$WORK/err" &
PID=$!
sleep 0.2
kill -TERM "$PID" 2>/dev/null
wait "$PID"
RC=$?
set -e
CHECKS=$((CHECKS + 1))
if [ "$RC" -eq 0 ]; then
    pass "SIGTERM: conversion finished first (nothing to check)"
elif [ "$RC" -eq 143 ] && [ ! -e "$OUT" ] && ! ls -a "$WORK" | grep -q '\.tmp\.'; then
    pass "SIGTERM: no OUT, no temporary file, killed by the signal"
else
    fail "SIGTERM: status $RC"; ls -a "$WORK" >&2; show_output
fi

rm -f "$BIG" "$OUT"
finish
