# verify.sh -- `shardsafe verify`: OK lines, every kind of broken file,
# --check-finite, directories and indexes, exit statuses.
. "$(dirname "$0")/lib.bash"

"$PY" - <<'EOF'
import json, os, shutil, numpy as np, mkst
W = os.environ["WORK"]
good = [mkst.entry("w", np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)),
        mkst.entry("b", np.ones(5, np.float16)),
        mkst.entry("n", np.arange(2, dtype=np.int64))]
mkst.write(f"{W}/good.safetensors", good, {"format": "pt"})
raw = open(f"{W}/good.safetensors", "rb").read()
open(f"{W}/truncated.safetensors", "wb").write(raw[:-3])
open(f"{W}/trailing.safetensors", "wb").write(raw + b"\0\0\0\0")
open(f"{W}/tiny.safetensors", "wb").write(b"\1\0\0")
open(f"{W}/lfs.safetensors", "w").write(
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 12345\n")
# header that is not JSON
h = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},}'
h += b" " * ((8 - (8 + len(h)) % 8) % 8)
open(f"{W}/badjson.safetensors", "wb").write(len(h).to_bytes(8, "little") + h + b"\0" * 4)
# data_offsets that do not match the shape
h = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}'
h += b" " * ((8 - (8 + len(h)) % 8) % 8)
open(f"{W}/badsize.safetensors", "wb").write(len(h).to_bytes(8, "little") + h + b"\0" * 4)
# non-finite values
f32 = np.array([1, np.nan, np.inf, 2], np.float32)
f16 = np.array([-np.inf, 0], np.float16)
bf16 = mkst.bf16_rne(np.array([np.nan, 1.0], np.float32))
mkst.write(f"{W}/nonfinite.safetensors", [
    mkst.entry("a", f32), mkst.entry("b", f16),
    ("c", "BF16", [2], bf16.tobytes()),
    mkst.entry("d", np.array([1e300, 3.0], np.float64)),   # finite in F64
    mkst.entry("i", np.array([-1], np.int64))])
mkst.write(f"{W}/finite.safetensors", [
    mkst.entry("d", np.array([1e300, -1e-300], np.float64)),
    ("e", "F8_E4M3", [2], bytes([0x7E, 0x01])),
    mkst.entry("a", np.array([3.4e38], np.float32))])
# sharded checkpoint with an index
os.makedirs(f"{W}/hf")
s1 = [mkst.entry("a.w", np.ones((64, 64), np.float32))]
s2 = [mkst.entry("b.w", np.ones(3, np.float16)), mkst.entry("c.ids", np.arange(4, dtype=np.int32))]
mkst.write(f"{W}/hf/model-00001-of-00002.safetensors", s1)
mkst.write(f"{W}/hf/model-00002-of-00002.safetensors", s2)
wm = {"a.w": "model-00001-of-00002.safetensors", "b.w": "model-00002-of-00002.safetensors",
      "c.ids": "model-00002-of-00002.safetensors"}
json.dump({"metadata": {"total_size": 64 * 64 * 4 + 6 + 16}, "weight_map": wm},
          open(f"{W}/hf/model.safetensors.index.json", "w"), indent=2, sort_keys=True)
shutil.copytree(f"{W}/hf", f"{W}/hf_missing")
os.unlink(f"{W}/hf_missing/model-00002-of-00002.safetensors")
shutil.copytree(f"{W}/hf", f"{W}/hf_badshard")
open(f"{W}/hf_badshard/model-00001-of-00002.safetensors", "r+b").truncate(1000)
EOF

G="$WORK/good.safetensors"
SIZE=$(stat -c %s "$G")
expect 0 "verify a good file" "$SHS_BIN" verify "$G"
CHECKS=$((CHECKS + 1))
if [ "$(cat "$WORK/out")" = "OK $G (3 tensors, $SIZE bytes)" ]; then pass "OK line format"
else fail "OK line format"; show_output; fi

check_fail() { # check_fail FILE REASON-SUBSTRING DESCRIPTION
    expect 1 "verify: $3" "$SHS_BIN" verify "$1"
    has "$WORK/out" "FAIL $1: " "$3: FAIL line"
    has "$WORK/out" "$2" "$3: reason"
    CHECKS=$((CHECKS + 1))
    if [ "$(wc -l < "$WORK/out")" -eq 1 ]; then pass "$3: one line"; else fail "$3: one line"; show_output; fi
}
check_fail "$WORK/truncated.safetensors" "tensor data ends at byte" "truncated file"
check_fail "$WORK/trailing.safetensors" "but the file has $((SIZE + 4)) bytes" "trailing bytes"
check_fail "$WORK/tiny.safetensors" "a safetensors file has at least 8" "3-byte file"
check_fail "$WORK/lfs.safetensors" "git-LFS pointer" "git-LFS pointer"
check_fail "$WORK/none.safetensors" "No such file or directory" "missing file"
check_fail "$WORK/badjson.safetensors" "not valid JSON" "header not JSON"
check_fail "$WORK/badsize.safetensors" "need 8" "offsets do not match the shape"
expect 1 "verify a directory of good and bad files" "$SHS_BIN" verify "$WORK"
py "directory: one line per file, sorted, right verdicts" <<'PYEOF'
import os
W = os.environ["WORK"]
lines = open(W + "/out").read().splitlines()
got = [(l.split()[0], l.split()[1].rstrip(":")) for l in lines]
names = sorted(f for f in os.listdir(W) if f.endswith(".safetensors"))
want = [("OK" if f in ("good.safetensors", "finite.safetensors", "nonfinite.safetensors")
         else "FAIL", f"{W}/{f}") for f in names]
assert got == want, (got, want)
PYEOF
expect 1 "verify a nonexistent path" "$SHS_BIN" verify "$WORK/no_such_dir"
has "$WORK/out" "FAIL $WORK/no_such_dir: cannot open" "nonexistent path FAIL line"
mkdir "$WORK/emptydir"
expect 1 "verify a directory without files" "$SHS_BIN" verify "$WORK/emptydir"
has "$WORK/err" "no *.safetensors files" "empty directory reported on stderr"

expect 1 "verify several paths, one bad" "$SHS_BIN" verify "$G" "$WORK/lfs.safetensors" "$G"
CHECKS=$((CHECKS + 1))
if [ "$(grep -c '^OK ' "$WORK/out")" -eq 2 ] && [ "$(grep -c '^FAIL ' "$WORK/out")" -eq 1 ]; then
    pass "one line per path, in order"; else fail "one line per path"; show_output; fi

# ---- --check-finite ----
expect 0 "non-finite values pass without --check-finite" "$SHS_BIN" verify "$WORK/nonfinite.safetensors"
expect 1 "--check-finite fails on NaN/Inf" "$SHS_BIN" verify --check-finite "$WORK/nonfinite.safetensors"
has "$WORK/out" "FAIL $WORK/nonfinite.safetensors: 2 NaN and 2 infinite values in 3 tensors" "NaN/Inf counted (F64 1e300 is finite)"
expect 0 "--check-finite on finite F64/F8/F32 extremes" "$SHS_BIN" verify "$WORK/finite.safetensors" --check-finite
has "$WORK/out" "all finite" "all finite noted"

# ---- directory and index ----
expect 0 "verify a sharded directory" "$SHS_BIN" verify "$WORK/hf"
has "$WORK/out" "OK $WORK/hf/model-00001-of-00002.safetensors (1 tensors," "shard 1 OK"
has "$WORK/out" "OK $WORK/hf/model-00002-of-00002.safetensors (2 tensors," "shard 2 OK"
has "$WORK/out" "OK $WORK/hf/model.safetensors.index.json (index: 2 shards, 3 tensors)" "index OK"
CHECKS=$((CHECKS + 1))
if [ "$(wc -l < "$WORK/out")" -eq 3 ]; then pass "directory: each shard verified once"; else fail "directory lines"; show_output; fi
expect 0 "verify an index" "$SHS_BIN" verify "$WORK/hf/model.safetensors.index.json"
CHECKS=$((CHECKS + 1))
if [ "$(grep -c '^OK ' "$WORK/out")" -eq 3 ]; then pass "index: shards and index OK"; else fail "index lines"; show_output; fi
expect 1 "verify an index with a missing shard" "$SHS_BIN" verify "$WORK/hf_missing/model.safetensors.index.json"
has "$WORK/out" "FAIL $WORK/hf_missing/model-00002-of-00002.safetensors: cannot open" "missing shard FAIL line"
has "$WORK/out" "FAIL $WORK/hf_missing/model.safetensors.index.json: shard 'model-00002-of-00002.safetensors' named by the weight_map cannot be read" "index FAIL line"
has "$WORK/out" "OK $WORK/hf_missing/model-00001-of-00002.safetensors" "present shard OK"
expect 1 "verify a directory with a missing shard" "$SHS_BIN" verify "$WORK/hf_missing"
has "$WORK/out" "FAIL $WORK/hf_missing/model.safetensors.index.json" "directory: index FAIL line"
expect 1 "verify a directory with a truncated shard" "$SHS_BIN" verify "$WORK/hf_badshard"
has "$WORK/out" "FAIL $WORK/hf_badshard/model-00001-of-00002.safetensors: " "truncated shard FAIL"
has "$WORK/out" "OK $WORK/hf_badshard/model-00002-of-00002.safetensors" "good shard still OK"

finish
