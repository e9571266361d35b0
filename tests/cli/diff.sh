# diff.sh -- `shardsafe diff A B`: files, plain directories, trainer
# checkpoints and (when built with MPI) checkpoints saved with different
# chunkings, compared on their global values; tolerances, --kind, --json,
# --quiet, exit statuses, bounded memory.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }

# ---- small files ----
"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
w = (1 + np.arange(60, dtype=np.float32).reshape(10, 6) / 64).astype(np.float32)  # exact
b = (1000 * np.arange(7)).astype(np.int64)
h = np.linspace(-2, 2, 4).astype(np.float16)
def save(name, **t):
    mkst.write(f"{W}/{name}.safetensors", [mkst.entry(k, v) for k, v in t.items()])
save("base", w=w, b=b, h=h)
save("same", w=w.copy(), b=b.copy(), h=h.copy())
w2 = w.copy(); w2[3, 2] += 1
save("flip", w=w2, b=b, h=h)
w3 = w.copy(); w3[0, 0] = -w3[0, 0]; w3[9, 5] += 0.5; w3[5, 1] -= 0.25
save("flip3", w=w3, b=b, h=h)
save("extra", w=w, b=b, h=h, x=np.zeros(3, np.float32))
save("other", w=w, h=h, y=np.ones((2, 2), np.int32))
save("dtype", w=w.astype(np.float64), b=b, h=h)
save("shape", w=w.reshape(6, 10).copy(), b=b, h=h)
save("near", w=(w + np.float32(1e-4)).astype(np.float32), b=b, h=h)
b2 = b.copy(); b2[2] += 1
save("intdiff", w=w, b=b2, h=h)
# NaN with two different payloads: bitwise different, equal under a tolerance
n1 = np.array([1.0, np.nan, 3.0], np.float32)
n2 = n1.copy().view(np.uint32); n2[1] = 0x7FC00001; n2 = n2.view(np.float32)
save("nan1", n=n1); save("nan2", n=n2)
save("inf1", n=np.array([1.0, np.inf, 3.0], np.float32))
save("inf2", n=np.array([1.0, 3e38, 3.0], np.float32))
save("nan3", n=np.array([1.0, 2.0, 3.0], np.float32))
EOF
F="$WORK"

expect 0 "two identical files" "$SHS_BIN" diff "$F/base.safetensors" "$F/same.safetensors"
has "$WORK/out" "3 tensors compared, 0 differ, only in A: 0, only in B: 0" "summary of identical files"
lacks "$WORK/out" "differs" "no difference line for identical files"

expect 1 "a flipped value" "$SHS_BIN" diff "$F/base.safetensors" "$F/flip.safetensors"
has "$WORK/out" "values differ: w: 1 of 60 elements differ (max abs diff 1) at [3, 2]" "flipped value: tensor, count, max diff and its index"
has "$WORK/out" "3 tensors compared, 1 differ, only in A: 0, only in B: 0" "flipped value: summary"
lacks "$WORK/out" "values differ: b" "flipped value: other tensors equal"

expect 1 "three changed values" "$SHS_BIN" diff "$F/base.safetensors" "$F/flip3.safetensors"
has "$WORK/out" "values differ: w: 3 of 60 elements differ (max abs diff 2)" "three changed values: count, max |a-b| (sign flip of 1)"

expect 1 "missing and extra tensors" "$SHS_BIN" diff "$F/extra.safetensors" "$F/other.safetensors"
has "$WORK/out" "only in A: b (I64 [7])" "tensor only in A"
has "$WORK/out" "only in A: x (F32 [3])" "second tensor only in A"
has "$WORK/out" "only in B: y (I32 [2, 2])" "tensor only in B"
has "$WORK/out" "2 tensors compared, 0 differ, only in A: 2, only in B: 1" "missing/extra: summary"

expect 1 "dtype mismatch" "$SHS_BIN" diff "$F/base.safetensors" "$F/dtype.safetensors"
has "$WORK/out" "dtype differs: w: F32 [10, 6] vs F64 [10, 6]" "dtype mismatch line"
has "$WORK/out" "3 tensors compared, 1 differ" "dtype mismatch summary"
expect 1 "shape mismatch" "$SHS_BIN" diff "$F/base.safetensors" "$F/shape.safetensors"
has "$WORK/out" "shape differs: w: F32 [10, 6] vs F32 [6, 10]" "shape mismatch line"
# under a tolerance two float dtypes compare as F64; a shape mismatch stays
expect 0 "F32 vs F64 within a tolerance" "$SHS_BIN" diff --atol 1e-12 "$F/base.safetensors" "$F/dtype.safetensors"
expect 1 "shape mismatch with a tolerance" "$SHS_BIN" diff --atol 1 "$F/base.safetensors" "$F/shape.safetensors"

# ---- tolerances ----
expect 1 "near values differ bitwise" "$SHS_BIN" diff "$F/base.safetensors" "$F/near.safetensors"
has "$WORK/out" "values differ: w: 60 of 60 elements differ" "near values: every element differs bitwise"
expect 0 "near values within --atol 1e-3" "$SHS_BIN" diff --atol 1e-3 "$F/base.safetensors" "$F/near.safetensors"
expect 1 "near values not within --atol 1e-5" "$SHS_BIN" diff --atol=1e-5 "$F/base.safetensors" "$F/near.safetensors"
has "$WORK/out" "values differ: w: 60 of 60 elements differ (max abs diff 0.0001" "atol too small: count and max diff"
expect 0 "near values within --rtol 1e-3" "$SHS_BIN" diff "$F/base.safetensors" "$F/near.safetensors" --rtol 1e-3
expect 1 "near values not within --rtol 1e-5" "$SHS_BIN" diff "$F/base.safetensors" "$F/near.safetensors" --rtol 1e-5
expect 0 "flipped value within --atol 1" "$SHS_BIN" diff --atol 1 "$F/base.safetensors" "$F/flip.safetensors"
expect 1 "flipped value not within --atol 0.999" "$SHS_BIN" diff --atol 0.999 "$F/base.safetensors" "$F/flip.safetensors"
expect 1 "integers are compared exactly even with --atol" "$SHS_BIN" diff --atol 10 "$F/base.safetensors" "$F/intdiff.safetensors"
has "$WORK/out" "values differ: b: 1 of 7 elements differ (max abs diff 1)" "integer difference reported"
expect 1 "NaN payloads differ bitwise" "$SHS_BIN" diff "$F/nan1.safetensors" "$F/nan2.safetensors"
has "$WORK/out" "values differ: n: 1 of 3 elements differ (max abs diff 0)" "NaN payloads: one element, no numeric difference"
expect 0 "NaN equals NaN under a tolerance" "$SHS_BIN" diff --atol 0 "$F/nan1.safetensors" "$F/nan2.safetensors"
expect 1 "NaN vs a number differs under a tolerance" "$SHS_BIN" diff --atol 1e30 "$F/nan1.safetensors" "$F/nan3.safetensors"
has "$WORK/out" "values differ: n: 1 of 3 elements differ (max abs diff nan)" "NaN vs number: max diff nan"
expect 1 "infinity vs a finite value differs under a tolerance" "$SHS_BIN" diff --atol 1e38 --rtol 1 "$F/inf1.safetensors" "$F/inf2.safetensors"
has "$WORK/out" "(max abs diff inf)" "infinity: max diff inf"

# ---- --json, --quiet, --kind on files ----
expect 1 "--json" "$SHS_BIN" diff --json "$F/extra.safetensors" "$F/flip.safetensors" --atol 0.5
cp "$WORK/out" "$WORK/diff.json"
py "--json document" <<EOF
import json
d = json.load(open("$WORK/diff.json"))
assert d["schema"] == 2 and d["command"] == "diff" and d["ok"] is False and d["same"] is False
assert d["errors"] == [] and d["warnings"] == []
assert d["a"]["kind"] == "file" and d["a"]["tensor_count"] == 4, d["a"]
assert d["mode"] == "tolerance" and d["atol"] == 0.5 and d["rtol"] == 0 and d["tensor_kind"] == "all"
by = {x["name"]: x for x in d["differences"]}
assert set(by) == {"w", "x"}, by
assert by["x"]["status"] == "only_in_a" and by["x"]["dtype_a"] == "F32" and by["x"]["shape_a"] == [3]
w = by["w"]
assert w["status"] == "values" and w["elements"] == 60 and w["differing"] == 1, w
assert w["max_abs_diff"] == 1.0, w
assert w["worst_index"] == [3, 2], w
assert d["summary"] == {"compared": 3, "differ": 1, "only_in_a": 1, "only_in_b": 0, "other": 0, "equal": False}, d["summary"]
EOF
expect 0 "--json, equal" "$SHS_BIN" diff --json "$F/base.safetensors" "$F/same.safetensors"
cp "$WORK/out" "$WORK/diff.json"
py "--json of equal files" <<EOF
import json
d = json.load(open("$WORK/diff.json"))
assert d["mode"] == "bitwise" and d["differences"] == [], d
assert d["summary"]["equal"] is True and d["summary"]["compared"] == 3
assert d["ok"] is True and d["same"] is True
EOF
expect 1 "--quiet, different" "$SHS_BIN" diff --quiet "$F/base.safetensors" "$F/flip.safetensors"
CHECKS=$((CHECKS + 1))
if [ -s "$WORK/out" ]; then fail "--quiet printed something"; show_output; else pass "--quiet prints nothing"; fi
expect 0 "--quiet, equal" "$SHS_BIN" diff --quiet "$F/base.safetensors" "$F/same.safetensors"
expect 1 "-q, different" "$SHS_BIN" diff -q "$F/base.safetensors" "$F/flip.safetensors"
expect 2 "--json with -q is a usage error" "$SHS_BIN" diff --json -q "$F/base.safetensors" "$F/same.safetensors"
# trouble with --json: still one document, ok false, the error in it, status 2
expect 2 "--json, missing file (trouble)" "$SHS_BIN" diff --json "$F/base.safetensors" "$F/nope.safetensors"
cp "$WORK/out" "$WORK/diff.json"
py "--json of trouble: ok false, the error listed" <<EOF
import json
d = json.load(open("$WORK/diff.json"))
assert d["schema"] == 2 and d["command"] == "diff" and d["ok"] is False, d
assert len(d["errors"]) == 1 and "nope.safetensors" in d["errors"][0], d["errors"]
EOF
# an I/O error on stdout is trouble too, also when the files differ
if [ -w /dev/full ]; then
    CHECKS=$((CHECKS + 1))
    set +e; "$SHS_BIN" diff "$F/base.safetensors" "$F/flip.safetensors" >/dev/full 2>"$WORK/err"; RC=$?; set -e
    if [ "$RC" -eq 2 ] && grep -q "error writing to standard output" "$WORK/err"; then
        pass "stdout write error: status 2"
    else
        fail "stdout write error: status $RC"; cat "$WORK/err" >&2
    fi
fi

# ---- usage and invalid input ----
expect 2 "no arguments" "$SHS_BIN" diff
expect 2 "one argument" "$SHS_BIN" diff "$F/base.safetensors"
has "$WORK/err" "missing B" "one argument: message"
expect 2 "three arguments" "$SHS_BIN" diff "$F/base.safetensors" "$F/base.safetensors" "$F/base.safetensors"
expect 2 "negative --atol" "$SHS_BIN" diff --atol -1 "$F/base.safetensors" "$F/same.safetensors"
expect 2 "junk --rtol" "$SHS_BIN" diff --rtol 1x "$F/base.safetensors" "$F/same.safetensors"
expect 2 "bad --kind" "$SHS_BIN" diff --kind weights "$F/base.safetensors" "$F/same.safetensors"
expect 2 "unknown option" "$SHS_BIN" diff --frobnicate "$F/base.safetensors" "$F/same.safetensors"
expect 0 "--help" "$SHS_BIN" diff --help
has "$WORK/out" "Usage: shardsafe diff A B" "--help text"
expect 0 "help diff" "$SHS_BIN" help diff
has "$WORK/out" "2 trouble" "--help documents the cmp-like exit status"
expect 2 "missing B file (trouble)" "$SHS_BIN" diff "$F/base.safetensors" "$F/nope.safetensors"
has "$WORK/err" "shardsafe: diff: B:" "missing file: names the side"
has "$WORK/err" "nope.safetensors" "missing file: names the file"
printf 'not a safetensors file at all' >"$WORK/junk.safetensors"
expect 2 "invalid A file (trouble)" "$SHS_BIN" diff "$WORK/junk.safetensors" "$F/base.safetensors"
has "$WORK/err" "shardsafe: diff: A:" "invalid file: names the side"
mkdir -p "$WORK/empty"
expect 2 "empty directory (trouble)" "$SHS_BIN" diff "$WORK/empty" "$F/base.safetensors"

# ---- a hand-made step directory: chunks along any dimension, sub-byte ----
# Global tensors are cut into chunks over two "rank" files, described by a
# metadata.json written here; DIR.whole.safetensors holds the same tensors
# whole, DIR.changed.safetensors the same with three elements changed.
cat >"$WORK/synth.py" <<'PYEOF'
import ctypes, json, os, sys, numpy as np, mkst
out, variant = sys.argv[1], sys.argv[2]
xxh = ctypes.CDLL("libxxhash.so.0")          # metadata.json needs every chunk's XXH3
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
rng = np.random.default_rng(5)
G = {  # name: (dtype, global array; F4 as packed bytes)
    "v": ("F32", rng.standard_normal(10).astype(np.float32)),
    "m": ("F16", rng.standard_normal((4, 6)).astype(np.float16)),
    "c": ("I32", rng.integers(-1000, 1000, (3, 4, 5)).astype(np.int32)),
    "r": ("I64", np.array([5, -6, 7], np.int64)),
    "q": ("F4", rng.integers(0, 256, (4, 4)).astype(np.uint8)),   # [4, 8] elements
    "p": ("F4", rng.integers(0, 256, 8).astype(np.uint8)),        # [16] elements
}
SHAPE = {"q": [4, 8], "p": [16]}
# chunks: (file, key, element offset, element shape, numpy box of the data)
CH = {
    "v": [(0, "v", [0], [4], np.s_[0:4]), (1, "v", [4], [6], np.s_[4:10])],
    "m": [(0, "m", [0, 0], [4, 2], np.s_[:, 0:2]), (1, "m", [0, 2], [4, 4], np.s_[:, 2:6])],
    "c": [(0, "c", [0, 0, 0], [3, 1, 5], np.s_[:, 0:1, :]),
          (1, "c", [0, 1, 0], [3, 3, 5], np.s_[:, 1:4, :])],
    "r": [(0, "r", [0], [3], np.s_[:]), (1, "r", [0], [3], np.s_[:])],      # replicas
    "q": [(0, "q", [0, 0], [4, 4], np.s_[:, 0:2]), (1, "q", [0, 4], [4, 4], np.s_[:, 2:4])],
    "p": [(0, "p", [0], [8], np.s_[0:4]), (1, "p", [8], [8], np.s_[4:8])],
}
if variant == "gap":          # the second chunk of v is missing
    CH["v"] = CH["v"][:1]
if variant == "subbyte":      # F4 chunks cut at 4 rows x 3 and 4 x 5: not whole bytes
    CH["q"] = [(0, "q", [0, 0], [4, 3], None), (1, "q", [0, 3], [4, 5], None)]
os.makedirs(out, exist_ok=True)
per_file = [[], []]
for name, chunks in CH.items():
    dt, a = G[name]
    for f, key, off, shp, box in chunks:
        raw = a[box].tobytes() if box is not None else bytes(shp[0] * shp[1] // 2)
        per_file[f].append((key, dt, shp, raw))
files = ["ckpt-model-0000000-0000002.safetensors", "ckpt-model-0000001-0000002.safetensors"]
where = {}
for f, fn in enumerate(files):
    ents = mkst.ref_order(per_file[f])
    h = mkst.write(os.path.join(out, fn), ents)
    pos = 8 + len(h)
    for key, dt, shp, raw in ents:
        where[(f, key)] = [pos, pos + len(raw), "%016x" % xxh.XXH3_64bits(raw, len(raw))]
        pos += len(raw)
meta = {"format": "shardsafe.checkpoint", "version": 1, "step": 3, "world_size": 2,
        "files": [{"name": fn, "rank": i} for i, fn in enumerate(files)], "tensors": {},
        "blobs": []}
for name, chunks in CH.items():
    dt, a = G[name]
    meta["tensors"][name] = {"kind": "model", "dtype": dt,
        "shape": SHAPE.get(name, list(a.shape)),
        "chunks": [{"offset": off, "shape": shp, "file": f, "key": key,
                    "byte_range": where[(f, key)][:2], "xxh3": where[(f, key)][2]}
                   for f, key, off, shp, box in chunks]}
json.dump(meta, open(os.path.join(out, "metadata.json"), "w"))
json.dump({"epoch_num": 0, "step_num": 3, "global_step": 3, "loss_scale": 1.0,
           "global_batch_size": 1, "consumed_samples": 3, "ckpt_status": None},
          open(os.path.join(out, "common.json"), "w"))
def whole(path):
    mkst.write(path, [(n, dt, SHAPE.get(n, list(a.shape)), a.tobytes())
                      for n, (dt, a) in G.items()])
whole(out + ".whole.safetensors")
G["c"][1][2, 3, 4] += 1
G["q"][1][3, 3] ^= 0x10          # one F4 element (the high nibble of one byte)
G["p"][1][5] ^= 0x01             # one F4 element of the 1-D tensor
whole(out + ".changed.safetensors")
PYEOF
"$PY" "$WORK/synth.py" "$WORK/synth" ok
"$PY" "$WORK/synth.py" "$WORK/gap" gap
"$PY" "$WORK/synth.py" "$WORK/subbyte" subbyte
expect 0 "hand-made step directory vs its whole tensors" "$SHS_BIN" diff "$WORK/synth" "$WORK/synth.whole.safetensors"
has "$WORK/out" "(checkpoint step 3, world size 2, 6 tensors)" "hand-made step directory described"
has "$WORK/out" "6 tensors compared, 0 differ" "hand-made step directory: every tensor equal"
expect 1 "hand-made step directory vs changed tensors" "$SHS_BIN" diff "$WORK/synth" "$WORK/synth.changed.safetensors"
has "$WORK/out" "values differ: c: 1 of 60 elements differ (max abs diff 1)" "3-D chunks: the changed element"
has "$WORK/out" "values differ: q: 1 of 32 elements differ" "F4 column chunks: the changed element"
has "$WORK/out" "values differ: p: 1 of 16 elements differ" "1-D F4 chunks: the changed element"
has "$WORK/out" "6 tensors compared, 3 differ" "hand-made vs changed: summary"
expect 2 "chunks not covering a tensor (trouble)" "$SHS_BIN" diff "$WORK/gap" "$WORK/gap.whole.safetensors"
has "$WORK/err" "tensor 'v': the saved chunks cover" "coverage error message"
expect 2 "F4 chunks not on byte boundaries (trouble)" "$SHS_BIN" diff "$WORK/subbyte" "$WORK/subbyte.whole.safetensors"
has "$WORK/err" "does not start and end on byte boundaries" "sub-byte chunk error message"

# ---- trainer checkpoints ----
SP="$WORK/save"
"$TRAINER" --steps 100 --save-path "$SP" --save-interval 50 --log-every 0 >"$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log" >&2; exit 1; }
S50="$SP/iteration_00000050"
S100="$SP/iteration_00000100"
expect 0 "checkpoint vs itself (save path)" "$SHS_BIN" diff "$SP" "$SP"
has "$WORK/out" "A: $SP -> $S100 (checkpoint step 100, world size 1," "save path resolved to the latest step"
has "$WORK/out" "0 differ, only in A: 0, only in B: 0" "checkpoint vs itself: summary"
expect 0 "save path vs its latest step directory" "$SHS_BIN" diff "$SP" "$S100"
expect 1 "checkpoint vs an older step" "$SHS_BIN" diff "$SP" "$S50"
has "$WORK/out" "values differ: model.hidden.weight:" "older step: a model tensor differs"
has "$WORK/out" "values differ: optimizer.exp_avg.model.hidden.weight:" "older step: an optimizer tensor differs"
expect 1 "older step, --kind model" "$SHS_BIN" diff --kind model "$S100" "$S50"
lacks "$WORK/out" "optimizer." "--kind model leaves out optimizer tensors"
has "$WORK/out" "5 tensors compared, 5 differ" "--kind model: the five model tensors"

# the same tensors as whole-tensor files in a plain directory, assembled
# from metadata.json by numpy (independently of the library)
cat >"$WORK/export.py" <<'EOF'
import json, os, sys, numpy as np, mkst
step, out, model_only = sys.argv[1], sys.argv[2], len(sys.argv) > 3
meta = json.load(open(os.path.join(step, "metadata.json")))
NPT = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
       "I32": np.int32, "U8": np.uint8, "BF16": np.uint16}
files = {}
groups = {"model": [], "opt": []}
for name, t in meta["tensors"].items():
    dt = np.dtype(NPT[t["dtype"]]).newbyteorder("<")
    a = np.zeros(t["shape"], dt)
    for c in t["chunks"]:
        fn = meta["files"][c["file"]]["name"]
        if fn not in files:
            files[fn] = mkst.read(os.path.join(step, fn))[2]
        _, shape, raw = files[fn][c["key"]]
        box = tuple(slice(o, o + s) for o, s in zip(c["offset"], c["shape"]))
        a[box] = np.frombuffer(raw, dt).reshape(shape)
    groups[t["kind"]].append((name, t["dtype"], list(a.shape), a.tobytes()))
os.makedirs(out, exist_ok=True)
mkst.write(os.path.join(out, "model.safetensors"), groups["model"])
if not model_only and groups["opt"]:
    mkst.write(os.path.join(out, "weights-opt-00.safetensors"), groups["opt"])
EOF
"$PY" "$WORK/export.py" "$S100" "$WORK/plain100"
"$PY" "$WORK/export.py" "$S100" "$WORK/plain100m" model-only
expect 0 "checkpoint vs a plain directory of the same tensors" "$SHS_BIN" diff "$SP" "$WORK/plain100"
has "$WORK/out" "B: $WORK/plain100 (directory, 2 files, 15 tensors)" "plain directory described"
expect 0 "plain directory vs checkpoint (swapped)" "$SHS_BIN" diff "$WORK/plain100" "$S100"
expect 1 "plain directory vs an older step" "$SHS_BIN" diff "$WORK/plain100" "$S50"
expect 1 "model-only directory vs checkpoint: optimizer tensors only in A" "$SHS_BIN" diff "$S100" "$WORK/plain100m"
has "$WORK/out" "5 tensors compared, 0 differ, only in A: 10, only in B: 0" "model-only: summary"
expect 0 "model-only directory vs checkpoint, --kind model" "$SHS_BIN" diff --kind model "$S100" "$WORK/plain100m"
expect 0 "single model file vs checkpoint, --kind model" "$SHS_BIN" diff --kind model "$WORK/plain100/model.safetensors" "$S100"
expect 1 "--kind opt, single model file: optimizer tensors only in B" "$SHS_BIN" diff --kind opt "$WORK/plain100/model.safetensors" "$S100"
has "$WORK/out" "0 tensors compared, 0 differ, only in A: 0, only in B: 10" "--kind opt: summary"

# a corrupted chunk is reported (checksum), not compared
cp -a "$S100" "$WORK/bad100"
MF=$(cd "$WORK/bad100" && ls checkpoint-model-*.safetensors | head -n 1)
"$PY" - "$WORK/bad100/$MF" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-5] ^= 0x10
open(p, "wb").write(b)
EOF
# same chunk boxes and stored checksums: equal without reading ...
expect 0 "corrupted checkpoint, checksums trusted" "$SHS_BIN" diff "$S100" "$WORK/bad100"
# ... --full reads both sides and finds the damage
expect 2 "corrupted checkpoint with --full (trouble)" "$SHS_BIN" diff --full "$S100" "$WORK/bad100"
has "$WORK/err" "checksum" "corrupted checkpoint: checksum named"
# the fast path trusts stored checksums only of files that are there, whole
cp -a "$S100" "$WORK/gone100"
rm "$WORK/gone100/$MF"
expect 2 "a copy whose data file was deleted is not 'equal'" "$SHS_BIN" diff "$S100" "$WORK/gone100"
has "$WORK/err" "missing file '$MF'" "the missing file named"
cp -a "$S100" "$WORK/short100"
truncate -s -1 "$WORK/short100/$MF"
expect 2 "a copy whose data file was cut short is not 'equal'" "$SHS_BIN" diff "$WORK/short100" "$S100"
has "$WORK/err" "but metadata.json records" "the size difference named"

# ---- float dtypes across files: F32 vs BF16 ----
"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
w = (1 + np.arange(60, dtype=np.float32).reshape(10, 6) / 64).astype(np.float32)  # exact in BF16
mkst.write(f"{W}/wbf.safetensors", [("w", "BF16", [10, 6], mkst.bf16_rne(w).tobytes())])
w2 = w.copy(); w2[7, 1] += 0.5
mkst.write(f"{W}/wbf2.safetensors", [("w", "BF16", [10, 6], mkst.bf16_rne(w2).tobytes())])
mkst.write(f"{W}/w32.safetensors", [mkst.entry("w", w)])
EOF
expect 1 "F32 vs BF16 without a tolerance: a dtype difference" "$SHS_BIN" diff "$WORK/w32.safetensors" "$WORK/wbf.safetensors"
has "$WORK/out" "dtype differs: w: F32 [10, 6] vs BF16 [10, 6]" "F32 vs BF16: dtype line"
expect 0 "F32 vs BF16 within --atol 0 (compared as F64)" "$SHS_BIN" diff --atol 0 "$WORK/w32.safetensors" "$WORK/wbf.safetensors"
expect 1 "F32 vs changed BF16 beyond --atol 0.1" "$SHS_BIN" diff --atol 0.1 "$WORK/w32.safetensors" "$WORK/wbf2.safetensors"
has "$WORK/out" "values differ: w: 1 of 60 elements differ (max abs diff 0.5) at [7, 1]" "F32 vs BF16: the changed element and its index"
expect 0 "F32 vs changed BF16 within --atol 0.5" "$SHS_BIN" diff --atol 0.5 "$WORK/w32.safetensors" "$WORK/wbf2.safetensors"

# ---- blobs and common.json ----
expect 1 "step 100 vs step 50: progress differs" "$SHS_BIN" diff "$S100" "$S50"
has "$WORK/out" "progress differs: global_step: 100 vs 50" "common.json field difference named"
cp -a "$S100" "$WORK/prog100"
"$PY" - "$WORK/prog100/common.json" <<'EOF'
import json, sys
p = sys.argv[1]; d = json.load(open(p)); d["consumed_samples"] += 1
json.dump(d, open(p, "w"))
EOF
"$PY" "$SHS_SOURCE_DIR/tests/cli/reseal.py" "$WORK/prog100"   # a real difference, not damage
expect 1 "only common.json differs" "$SHS_BIN" diff "$S100" "$WORK/prog100"
has "$WORK/out" "progress differs: consumed_samples:" "consumed_samples difference"
has "$WORK/out" "0 differ, only in A: 0, only in B: 0; 1 blob or progress difference(s)" "summary counts it"
expect 1 "only common.json differs, --json" "$SHS_BIN" diff --json "$S100" "$WORK/prog100"
has "$WORK/out" '"status": "progress"' "--json lists the progress difference"
cp -a "$S100" "$WORK/blob100"
BLOB=$("$PY" - "$WORK/blob100/metadata.json" <<'EOF'
import json, os, sys
import reseal
p = sys.argv[1]; d = json.load(open(p))
b = d["blobs"][0]
b["xxh3"] = "%016x" % (int(b["xxh3"], 16) ^ 1)
reseal.reseal(os.path.dirname(p), d)
print(b["name"])
EOF
)
expect 1 "a blob's checksum differs" "$SHS_BIN" diff "$S100" "$WORK/blob100"
has "$WORK/out" "blob differs: $BLOB (rank 0)" "blob difference named"
expect 2 "a blob not matching its checksum, --full (trouble)" "$SHS_BIN" diff --full "$WORK/blob100" "$WORK/blob100"
has "$WORK/err" "checksum" "--full checks blob checksums"
expect 0 "checkpoint vs itself, --full" "$SHS_BIN" diff --full "$S100" "$S100"

# ---- bounded memory: slabs of both sides, never whole tensors ----
if [ -x /usr/bin/time ]; then
    "$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
os.makedirs(f"{W}/bigdir", exist_ok=True)
for i in range(4):                       # 4 x 32 MiB
    a = np.full(8 * 1024 * 1024, i, np.float32)
    mkst.write(f"{W}/bigdir/part{i}.safetensors", [mkst.entry(f"t{i}", a)])
EOF
    # ASan keeps freed memory in quarantine: keep it small for this check
    expect 0 "a 128 MiB directory vs itself" env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8" \
        /usr/bin/time -f %M -o "$WORK/rss" "$SHS_BIN" diff "$WORK/bigdir" "$WORK/bigdir"
    RSS=$(tail -n 1 "$WORK/rss")
    # 8 MiB slabs per side plus one 4 MiB read window per side
    LIMIT_KB=$((64 * 1024))
    CHECKS=$((CHECKS + 1))
    if [ "$RSS" -lt "$LIMIT_KB" ]; then pass "diff peak RSS ${RSS} KiB < ${LIMIT_KB} KiB"
    else fail "diff peak RSS ${RSS} KiB >= ${LIMIT_KB} KiB (whole checkpoint in memory?)"; fi
    rm -rf "$WORK/bigdir"
else
    skip "/usr/bin/time missing: the memory check"
fi

# ---- MPI: the same state saved with different chunkings ----
MPI_CKPT="$SHS_BUILD_DIR/mpi_ckpt"
if [ -x "$MPI_CKPT" ] && command -v mpirun >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mpisave() {  # PATH STEP LAYOUT
        # Open MPI's own allocations are reported as leaks under ASan
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 300 mpirun --oversubscribe -np 4 "$MPI_CKPT" save "$1" "$2" "$3" >"$WORK/mpi.log" 2>&1 ||
            { cat "$WORK/mpi.log" >&2; fail "mpi_ckpt save $*"; }
    }
    mpisave "$WORK/m_rows" 7 rows
    mpisave "$WORK/m_cols" 7 cols
    mpisave "$WORK/m_grid" 7 grid
    mpisave "$WORK/m_rows8" 8 rows
    expect 0 "4 ranks: rows vs cols at the same step" "$SHS_BIN" diff "$WORK/m_rows" "$WORK/m_cols"
    has "$WORK/out" "(checkpoint step 7, world size 4, 3 tensors)" "MPI checkpoint described"
    has "$WORK/out" "3 tensors compared, 0 differ, only in A: 0, only in B: 0" "rows vs cols: summary"
    expect 0 "4 ranks: cols vs grid at the same step" "$SHS_BIN" diff "$WORK/m_cols" "$WORK/m_grid"
    expect 1 "4 ranks: rows at step 7 vs rows at step 8" "$SHS_BIN" diff "$WORK/m_rows" "$WORK/m_rows8"
    has "$WORK/out" "values differ: w: 60 of 60 elements differ (max abs diff 1)" "step 7 vs 8: w"
    has "$WORK/out" "values differ: b: 7 of 7 elements differ (max abs diff 1)" "step 7 vs 8: b"
    expect 1 "4 ranks: cols at step 7 vs rows at step 8" "$SHS_BIN" diff "$WORK/m_cols" "$WORK/m_rows8"
    expect 1 "step 7 vs 8 with --atol 1: only the integer tensor differs" "$SHS_BIN" diff --atol 1 "$WORK/m_cols" "$WORK/m_rows8"
    lacks "$WORK/out" "values differ: w" "--atol 1: w within tolerance"
    has "$WORK/out" "3 tensors compared, 1 differ" "--atol 1: b (I64) still differs"
    # vs the global tensors assembled by numpy into a plain directory
    SD=$(ls -d "$WORK/m_cols"/iteration_* | head -n 1)
    "$PY" "$WORK/export.py" "$SD" "$WORK/m_plain"
    expect 0 "cols checkpoint vs a plain directory of the global tensors" "$SHS_BIN" diff "$WORK/m_rows" "$WORK/m_plain"
else
    skip "no $MPI_CKPT or no mpirun: the MPI checks"
fi

finish
