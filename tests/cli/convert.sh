# convert.sh -- `shardsafe convert`: exact values against independent numpy
# references, byte-exact headers, copies of non-float tensors, options, and
# atomicity (a failed convert leaves no OUT, no temporary file, and an
# existing OUT byte-identical).
. "$(dirname "$0")/lib.bash"

"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
rng = np.random.default_rng(1234)
special = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,   # ties and near-ties
                    0x00000001, 0x00008000, 0x00018000, 0x807F8000,   # subnormals
                    0x7F7FFFFF, 0x7F7F7FFF, 0xFF7FFFFF,               # overflow / max
                    0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,   # inf, NaN
                    0x7F800001, 0x80000000, 0x00000000], np.uint32)   # sNaN, -0, +0
bits = np.concatenate([special, rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)])
f32 = bits.view(np.float32)
f32 = np.concatenate([f32, rng.standard_normal(2000).astype(np.float32),
                      (rng.standard_normal(2000) * 300).astype(np.float32)])
f32 = f32[: len(f32) // 4 * 4].reshape(-1, 4)
# F64: values exact in F32 (reference through F32 is then exact), plus cases
# where rounding through F32 first would round twice.
f64 = np.concatenate([rng.standard_normal(500).astype(np.float32).astype(np.float64),
                      [1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-11 + 2**-40,
                       1e300, -1e300, 1e-300, -1e-300, np.inf, np.nan]])
f16 = np.concatenate([rng.standard_normal(300).astype(np.float16),
                      np.array([np.inf, -np.inf, np.nan, 65504, -0.0, 6e-8], np.float16)])
bf16 = rng.integers(0, 2**16, 256, dtype=np.uint32).astype(np.uint16)
bf16 = bf16[(bf16 & 0x7F80) != 0x7F80]                  # no NaN/Inf in this one
big = rng.standard_normal(3 * 1024 * 1024 + 7).astype(np.float32)  # > one 8 MiB chunk
entries = [
    mkst.entry("layers.0.weight", f32),
    mkst.entry("ids", np.arange(-5, 20, dtype=np.int64).reshape(5, 5)),
    mkst.entry("master.f64", f64),
    mkst.entry("mask", rng.integers(0, 256, 33, dtype=np.uint32).astype(np.uint8)),
    mkst.entry("half", f16),
    ("brain", "BF16", [len(bf16)], bf16.tobytes()),
    mkst.entry("flags", np.array([True, False, True])),
    mkst.entry("counts", np.arange(7, dtype=np.int32)),
    mkst.entry("big", big),
    mkst.entry("scalar", np.float32(2.5)),
    mkst.entry("empty", np.zeros((0, 3), np.float32)),
]
# data deliberately NOT in reference order: the output must be re-sorted
mkst.write(f"{W}/in.safetensors", entries, {"format": "pt", "epoch": "3", "zz": "last"}, sort=False)
mkst.write(f"{W}/nometa.safetensors", entries[:3])
mkst.write(f"{W}/emptymeta.safetensors", entries[:3], {})
raw = open(f"{W}/in.safetensors", "rb").read()
open(f"{W}/broken.safetensors", "wb").write(raw[:-1])
EOF

# The independent reference: converts every tensor of IN with numpy and
# checks OUT: header bytes exactly as the reference writer lays them out,
# non-float tensors byte-for-byte, float tensors value-exact (NaN: is NaN).
cat > "$WORK/check.py" <<'EOF'
import math, os, sys, numpy as np, mkst
np.seterr(all="ignore")   # overflow to inf and NaN casts are expected here
IN, OUT, TARGET = sys.argv[1], sys.argv[2], sys.argv[3]
ALIGN = int(sys.argv[4]) if len(sys.argv) > 4 else 8
ONLY_FLOAT = len(sys.argv) > 5 and sys.argv[5] == "only-float"
FLOATS = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}

def to_f64(dt, b):
    if dt == "F64": return np.frombuffer(b, "<f8").copy()
    if dt == "F32": return np.frombuffer(b, "<f4").astype(np.float64)
    if dt == "F16": return np.frombuffer(b, "<f2").astype(np.float64)
    if dt == "BF16":
        return (np.frombuffer(b, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raise ValueError(dt)

def f8_ref(x, kind):
    """Exact RNE encoder for F8 (E4M3 saturates, E5M2 overflows to inf)."""
    if kind == "F8_E4M3":
        codes = np.arange(0x7F)
        e, m = codes >> 3, codes & 7
        vals = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0**(e - 7))
    else:
        codes = np.arange(0x7D)                      # 0x7C = inf, as 2^16 for rounding
        e, m = codes >> 2, codes & 3
        vals = np.where(e == 0, m / 4 * 2.0**-14, (1 + m / 4) * 2.0**(e - 15))
    a = np.abs(x)
    hi = np.minimum(np.searchsorted(vals, a), len(vals) - 1)
    lo = np.maximum(hi - 1, 0)
    two_a, mid = 2 * a, vals[lo] + vals[hi]
    c = np.where(vals[hi] == a, hi,
                 np.where(two_a < mid, lo,
                          np.where(two_a > mid, hi, np.where(lo % 2 == 0, lo, hi))))
    if kind == "F8_E4M3":
        c = np.where(a > 448, 0x7E, c)               # saturate, Inf included
    else:
        c = np.where(a >= 2.0**16, 0x7C, c)          # overflow to inf
    c = np.where(np.signbit(x), c | 0x80, c)
    return np.where(np.isnan(x), 0xFF, c).astype(np.uint8)   # any NaN: checked as NaN

def f8_isnan(b, kind):
    return (b & 0x7F) == 0x7F if kind == "F8_E4M3" else ((b & 0x7C) == 0x7C) & ((b & 3) != 0)

def expected_bits(src_dt, b, tgt):
    """(bits array of the target, NaN mask) for a source tensor."""
    if src_dt == tgt:   # same type: copied bit for bit, NaN payloads included
        a = np.frombuffer(b, {"F64": "<u8", "F32": "<u4", "F16": "<u2", "BF16": "<u2",
                              "F8_E4M3": "u1", "F8_E5M2": "u1"}[tgt])
        return a, None
    x = to_f64(src_dt, b)
    nan = np.isnan(x)
    if tgt == "F64": r = x.view(np.uint64)
    elif tgt == "F32": r = x.astype(np.float32).view(np.uint32)
    elif tgt == "F16": r = x.astype(np.float16).view(np.uint16)
    elif tgt == "BF16":
        if src_dt == "F64":
            # exact only for values that F32 holds exactly; the rest by hand
            f = x.astype(np.float32)
            r = mkst.bf16_rne(f)
            for i, v in enumerate(x):
                if not np.isnan(v) and float(f[i]) != v:
                    r[i] = {1 + 2**-8 + 2**-30: 0x3F81, -(1 + 2**-8 + 2**-30): 0xBF81,
                            1 + 2**-11 + 2**-40: 0x3F80, 1e300: 0x7F80, -1e300: 0xFF80,
                            1e-300: 0x0000, -1e-300: 0x8000}[v]
        else:
            r = mkst.bf16_rne(x.astype(np.float32))
    else:
        r = f8_ref(x, tgt)
    return r, nan

n, hdr, src, meta = mkst.read(IN)
want = []
for name, (dt, shape, b) in src.items():
    if dt in FLOATS:
        want.append((name, TARGET, shape, None))
    elif not ONLY_FLOAT:
        want.append((name, dt, shape, b))
nbytes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
want = [(nm, dt, sh, b if b is not None else b"\0" * (math.prod(sh) * nbytes[dt]))
        for nm, dt, sh, b in want]
want = mkst.ref_order(want)
want_hdr = mkst.header_bytes(want, meta, align=ALIGN)
raw = open(OUT, "rb").read()
assert raw[:8] == len(want_hdr).to_bytes(8, "little"), "header length"
assert raw[8:8 + len(want_hdr)] == want_hdr, (raw[8:8 + len(want_hdr)], want_hdr)
assert len(raw) == 8 + len(want_hdr) + sum(len(e[3]) for e in want), "file size"
if ALIGN > 8:
    assert (8 + len(want_hdr)) % ALIGN == 0
_, _, out, out_meta = mkst.read(OUT)
assert out_meta == meta
checked = 0
for name, (dt, shape, b) in src.items():
    if dt not in FLOATS:
        if ONLY_FLOAT:
            assert name not in out, name
            continue
        assert out[name] == (dt, shape, b), name          # copied byte for byte
        continue
    odt, oshape, ob = out[name]
    assert (odt, oshape) == (TARGET, shape), (name, odt, oshape)
    exp, nan = expected_bits(dt, b, TARGET)
    got = np.frombuffer(ob, exp.dtype.newbyteorder("<"))
    assert len(got) == len(exp), name
    if nan is None:
        assert (got == exp).all(), name
        checked += len(got)
        continue
    if TARGET in ("F8_E4M3", "F8_E5M2"):
        gnan = f8_isnan(got, TARGET)
    else:
        gnan = np.isnan(got.view({8: np.float64, 4: np.float32, 2: np.float16}[got.itemsize])) \
            if TARGET != "BF16" else ((got & 0x7F80) == 0x7F80) & ((got & 0x7F) != 0)
    assert (gnan == nan).all(), (name, np.nonzero(gnan != nan)[0][:10])
    bad = np.nonzero((got != exp) & ~nan)[0]
    assert len(bad) == 0, (name, [(int(i), hex(int(got[i])), hex(int(exp[i]))) for i in bad[:10]])
    checked += len(got)
print("checked", checked, "values")
EOF

IN="$WORK/in.safetensors"
for t in bf16 f16 f32 f64 f8_e4m3 f8_e5m2; do
    T=$(echo "$t" | tr a-z A-Z)
    OUT="$WORK/out_$t.safetensors"
    expect 0 "convert to $t" "$SHS_BIN" convert "$IN" "$OUT" --dtype "$t"
    has "$WORK/out" "tensors converted to $T" "convert to $t: summary line"
    py "convert to $t: exact values, header bytes, copies" <<EOF
import runpy, sys
sys.argv = ["check", "$IN", "$OUT", "$T"]
runpy.run_path("$WORK/check.py")
EOF
    expect 0 "convert to $t: output passes verify" "$SHS_BIN" verify "$OUT"
done

# widening and same-type conversions from a converted file
expect 0 "convert bf16 -> f32" "$SHS_BIN" convert "$WORK/out_bf16.safetensors" "$WORK/bf16_f32.safetensors" --dtype f32
py "bf16 -> f32 is exact" <<EOF
import runpy, sys
sys.argv = ["check", "$WORK/out_bf16.safetensors", "$WORK/bf16_f32.safetensors", "F32"]
runpy.run_path("$WORK/check.py")
EOF

# metadata: absent stays absent, empty stays present
for m in nometa emptymeta; do
    expect 0 "convert $m" "$SHS_BIN" convert "$WORK/$m.safetensors" "$WORK/$m.out" --dtype f16
    py "convert $m: header exact" <<EOF
import runpy, sys
sys.argv = ["check", "$WORK/$m.safetensors", "$WORK/$m.out", "F16"]
runpy.run_path("$WORK/check.py")
EOF
done

# dtype names in any case, and aliases, give identical files
for d in BF16 Bf16 bfloat16 BFLOAT16; do
    expect 0 "--dtype $d accepted" "$SHS_BIN" convert "$IN" "$WORK/case.safetensors" --dtype "$d"
    CHECKS=$((CHECKS + 1))
    if cmp -s "$WORK/case.safetensors" "$WORK/out_bf16.safetensors"; then pass "--dtype $d same bytes"
    else fail "--dtype $d gives different bytes"; fi
done
expect 0 "--dtype=F8_E4M3 form" "$SHS_BIN" convert --dtype=F8_E4M3 "$IN" "$WORK/case.safetensors"
CHECKS=$((CHECKS + 1))
cmp -s "$WORK/case.safetensors" "$WORK/out_f8_e4m3.safetensors" && pass "--dtype=F8_E4M3 same bytes" || fail "--dtype=F8_E4M3 bytes"

# --align, --only-float, --fsync
expect 0 "convert --align 4096" "$SHS_BIN" convert "$IN" "$WORK/aligned.safetensors" --dtype bf16 --align 4096
py "--align 4096: data page-aligned, header padded with spaces" <<EOF
import runpy, sys
sys.argv = ["check", "$IN", "$WORK/aligned.safetensors", "BF16", "4096"]
runpy.run_path("$WORK/check.py")
EOF
expect 0 "aligned output passes verify" "$SHS_BIN" verify "$WORK/aligned.safetensors"
expect 0 "convert --only-float" "$SHS_BIN" convert "$IN" "$WORK/onlyfloat.safetensors" --dtype f16 --only-float
has "$WORK/out" "4 left out" "--only-float reports what it left out"
py "--only-float keeps only float tensors" <<EOF
import runpy, sys
sys.argv = ["check", "$IN", "$WORK/onlyfloat.safetensors", "F16", "8", "only-float"]
runpy.run_path("$WORK/check.py")
EOF
expect 0 "convert --fsync" "$SHS_BIN" convert "$IN" "$WORK/fsync.safetensors" --dtype bf16 --fsync
CHECKS=$((CHECKS + 1))
cmp -s "$WORK/fsync.safetensors" "$WORK/out_bf16.safetensors" && pass "--fsync same bytes" || fail "--fsync bytes differ"

# ---- failures are atomic ----
no_temp() { # no_temp DIR DESCRIPTION
    CHECKS=$((CHECKS + 1))
    if ls -a "$1" | grep -q '\.tmp\.'; then fail "$2: temporary file left"; ls -a "$1" >&2
    else pass "$2: no temporary file"; fi
}
mkdir "$WORK/o"
expect 1 "convert an invalid IN" "$SHS_BIN" convert "$WORK/broken.safetensors" "$WORK/o/new.safetensors" --dtype bf16
has "$WORK/err" "shardsafe: convert: " "error prefix"
has "$WORK/err" "tensor data ends at byte" "library message included"
CHECKS=$((CHECKS + 1))
[ -e "$WORK/o/new.safetensors" ] && fail "failed convert created OUT" || pass "failed convert creates no OUT"
no_temp "$WORK/o" "invalid IN"

cp "$WORK/out_f16.safetensors" "$WORK/o/existing.safetensors"
cp "$WORK/o/existing.safetensors" "$WORK/existing.orig"
expect 1 "convert an invalid IN onto an existing OUT" "$SHS_BIN" convert "$WORK/broken.safetensors" "$WORK/o/existing.safetensors" --dtype bf16
CHECKS=$((CHECKS + 1))
cmp -s "$WORK/o/existing.safetensors" "$WORK/existing.orig" && pass "existing OUT byte-identical" || fail "existing OUT changed"
no_temp "$WORK/o" "invalid IN onto existing OUT"

# a write that fails midway (file size limit: EFBIG) after the header
CHECKS=$((CHECKS + 1))
set +e
( trap '' XFSZ; ulimit -f 1024; exec "$SHS_BIN" convert "$IN" "$WORK/o/existing.safetensors" --dtype f32 ) \
    >"$WORK/out" 2>"$WORK/err"
RC=$?
set -e
if [ "$RC" -eq 1 ]; then pass "write failure midway: exit 1"; else fail "write failure midway: exit $RC"; show_output; fi
has "$WORK/err" "shardsafe: convert: cannot write" "write failure reported"
CHECKS=$((CHECKS + 1))
cmp -s "$WORK/o/existing.safetensors" "$WORK/existing.orig" && pass "existing OUT intact after a failed write" || fail "existing OUT changed by a failed write"
no_temp "$WORK/o" "failed write"

expect 1 "OUT in a missing directory" "$SHS_BIN" convert "$IN" "$WORK/nodir/x.safetensors" --dtype bf16
has "$WORK/err" "No such file or directory" "missing directory reported"
expect 1 "OUT is a directory" "$SHS_BIN" convert "$IN" "$WORK/o" --dtype bf16
has "$WORK/err" "is a directory" "OUT directory reported"
expect 1 "IN does not exist" "$SHS_BIN" convert "$WORK/none.safetensors" "$WORK/o/x.safetensors" --dtype bf16
has "$WORK/err" "No such file or directory" "missing IN reported"

# IN == OUT is refused, by path or through a link
cp "$IN" "$WORK/self.safetensors"
cp "$IN" "$WORK/self.orig"
expect 2 "IN == OUT refused" "$SHS_BIN" convert "$WORK/self.safetensors" "$WORK/self.safetensors" --dtype bf16
has "$WORK/err" "IN and OUT are the same file" "IN == OUT message"
ln -s self.safetensors "$WORK/self.link"
expect 2 "IN == OUT through a symlink refused" "$SHS_BIN" convert "$WORK/self.safetensors" "$WORK/self.link" --dtype bf16
ln "$WORK/self.safetensors" "$WORK/self.hard"
expect 2 "IN == OUT through a hard link refused" "$SHS_BIN" convert "$WORK/self.hard" "$WORK/self.safetensors" --dtype bf16
CHECKS=$((CHECKS + 1))
cmp -s "$WORK/self.safetensors" "$WORK/self.orig" && pass "IN untouched" || fail "IN changed"
no_temp "$WORK" "refused conversions"

# __metadata__ keys and values holding "\u0000" are copied exactly (keys
# differing only after the NUL are distinct, not duplicates)
"$PY" - <<'EOF2'
import os, numpy as np, mkst
W = os.environ["WORK"]
meta = {"a\x00b": "x\x00y", "a\x00c": "z", "a": "w\x00", "\x00": ""}
mkst.write(f"{W}/nulmeta.safetensors", [mkst.entry("w", np.arange(4, dtype=np.float32))], meta)
EOF2
expect 0 "convert with NUL in metadata" "$SHS_BIN" convert "$WORK/nulmeta.safetensors" "$WORK/nulmeta.bf16.safetensors" --dtype bf16
py "NUL in metadata survives convert" <<'EOF2'
import os, sys, mkst
W = os.environ["WORK"]
_, hdr, _, meta = mkst.read(f"{W}/nulmeta.bf16.safetensors")
want = {"a\x00b": "x\x00y", "a\x00c": "z", "a": "w\x00", "\x00": ""}
if meta != want:
    sys.exit(f"metadata {meta!r} != {want!r}")
raw = open(f"{W}/nulmeta.bf16.safetensors", "rb").read()
if b'"a\\u0000b":"x\\u0000y"' not in raw:
    sys.exit("escaped NUL bytes not in the header")
EOF2

finish
