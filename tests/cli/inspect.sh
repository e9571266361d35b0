# inspect.sh -- `shardsafe inspect` on a file, a directory and HF indexes
# (good and bad), text and --json output, escaping of hostile names.
. "$(dirname "$0")/lib.bash"

"$PY" - <<'EOF'
import json, os, shutil, numpy as np, mkst
W = os.environ["WORK"]
# one file: F32, F16, I64, U8 and metadata; written in reference order
mkst.write(f"{W}/a.safetensors", [
    mkst.entry("model.w", np.arange(6, dtype=np.float32).reshape(2, 3)),
    mkst.entry("model.h", np.arange(4, dtype=np.float16)),
    mkst.entry("step", np.array([7], dtype=np.int64)),
    mkst.entry("mask", np.array([1, 0, 1], dtype=np.uint8)),
], {"format": "pt", "note": "hello"})
# hostile names: ESC sequence, newline, bidi override, C1 control, NUL
mkst.write(f"{W}/evil.safetensors", [
    mkst.entry("x\x1b[2Jy", np.zeros(1, np.float32)),
    mkst.entry("line\nbreak", np.zeros(1, np.float32)),
    mkst.entry("rtl\u202egnp.exe", np.zeros(1, np.float32)),
    mkst.entry("c1\u009bcsi", np.zeros(1, np.float32)),
    mkst.entry("nul\x00byte", np.zeros(1, np.float32)),
    mkst.entry("\u6743\u91cd", np.zeros(1, np.float32)),
], {"k\x1b": "v\x07"})
# a sharded HF checkpoint
os.makedirs(f"{W}/hf")
s1 = [mkst.entry("embed.weight", np.ones((4, 2), np.float32)),
      mkst.entry("layers.0.w", np.ones((2, 2), np.float16))]
s2 = [mkst.entry("layers.1.w", np.ones((2, 2), np.float16)),
      mkst.entry("lm_head.weight", np.ones((4, 2), np.float32)),
      mkst.entry("pos_ids", np.arange(3, dtype=np.int64))]
mkst.write(f"{W}/hf/model-00002-of-00002.safetensors", s2, {"format": "pt"})
mkst.write(f"{W}/hf/model-00001-of-00002.safetensors", s1, {"format": "pt"})
wm = {e[0]: "model-00001-of-00002.safetensors" for e in s1}
wm.update({e[0]: "model-00002-of-00002.safetensors" for e in s2})
total = sum(len(e[3]) for e in s1 + s2)
def index(path, weight_map, metadata={"total_size": total}, raw=None):
    with open(path, "w") as f:
        if raw is not None:
            f.write(raw)
        else:
            json.dump({"metadata": metadata, "weight_map": dict(sorted(weight_map.items()))},
                      f, indent=2, sort_keys=True)
            f.write("\n")
index(f"{W}/hf/model.safetensors.index.json", wm)
bad = f"{W}/bad"
os.makedirs(bad)
for f in os.listdir(f"{W}/hf"):
    if f.endswith(".safetensors"):
        os.link(f"{W}/hf/{f}", f"{bad}/{f}")
index(f"{bad}/missing.json", {**wm, "extra.w": "model-00003-of-00003.safetensors"})
index(f"{bad}/dotdot.json", {**wm, "layers.1.w": "../x.safetensors"})
index(f"{bad}/absolute.json", {**wm, "layers.1.w": "/etc/passwd"})
os.makedirs(f"{bad}/sub", exist_ok=True)
shutil.copy(f"{bad}/model-00001-of-00002.safetensors", f"{bad}/sub/x.safetensors")
index(f"{bad}/subdir.json", {**wm, "layers.1.w": "sub/x.safetensors"})
index(f"{bad}/ghost.json", {**wm, "ghost.w": "model-00001-of-00002.safetensors"})
index(f"{bad}/unlisted.json", {k: v for k, v in wm.items() if k != "pos_ids"})
index(f"{bad}/wrongshard.json", {**wm, "pos_ids": "model-00001-of-00002.safetensors"})
index(f"{bad}/notjson.json", {}, raw='{"weight_map": {"a": "b",}}')
index(f"{bad}/dupkey.json", {}, raw='{"weight_map": {"embed.weight": "model-00001-of-00002.safetensors", "embed.weight": "x"}}')
index(f"{bad}/noweightmap.json", {}, raw='{"metadata": {}}')
index(f"{bad}/array.json", {}, raw='[1, 2]')
index(f"{bad}/nonstring.json", {**wm, "layers.1.w": 5})
index(f"{bad}/totalsize.json", wm, {"total_size": total + 1})
EOF

A="$WORK/a.safetensors"

# ---- one file, text ----
expect 0 "inspect a file" "$SHS_BIN" inspect "$A"
has "$WORK/out" "file:       $A" "path shown"
has "$WORK/out" "tensors:    4" "tensor count shown"
has "$WORK/out" "metadata:   2 entries" "metadata count shown"
has "$WORK/out" "  format: pt" "metadata entry shown"
has "$WORK/out" "header:" "header length shown"
has "$WORK/out" "data start:" "data start shown"
CHECKS=$((CHECKS + 1))
if grep -Eq '^  model\.w +F32 +\[2, 3\] +24 +' "$WORK/out"; then pass "F32 row: name dtype shape bytes"
else fail "F32 row"; show_output; fi
CHECKS=$((CHECKS + 1))
if grep -Eq '^  model\.h +F16 +\[4\] +8 +' "$WORK/out"; then pass "F16 row"; else fail "F16 row"; show_output; fi
CHECKS=$((CHECKS + 1))
if grep -Eq '^  step +I64 +\[1\] +8 +0$' "$WORK/out"; then pass "I64 row at offset 0"; else fail "I64 row"; show_output; fi
CHECKS=$((CHECKS + 1))
if grep -Eq '^  mask +U8 +\[3\] +3 +' "$WORK/out"; then pass "U8 row"; else fail "U8 row"; show_output; fi
has "$WORK/out" "totals: 1 file, 4 tensors, 14 parameters, 43 bytes" "totals line"
CHECKS=$((CHECKS + 1))
if grep -Eq '^  F32 +1 tensors +6 parameters +24 bytes$' "$WORK/out"; then pass "dtype histogram"
else fail "dtype histogram"; show_output; fi

expect 0 "inspect --limit 2" "$SHS_BIN" inspect "$A" --limit 2
has "$WORK/out" "2 more tensors not shown" "--limit notes the rest"
lacks "$WORK/out" "  mask " "--limit hides later tensors"

# ---- one file, JSON ----
expect 0 "inspect --json" "$SHS_BIN" inspect "$A" --json
cp "$WORK/out" "$WORK/a.json"
py "inspect --json matches the file" <<'EOF'
import json, os, struct, mkst
W = os.environ["WORK"]
p = f"{W}/a.safetensors"
raw = open(f"{W}/a.json", "rb").read()
top = json.loads(raw)
assert top["schema"] == 2 and top["command"] == "inspect" and top["kind"] == "file", top
assert top["path"] == p and top["ok"] is True and top["errors"] == [] and top["warnings"] == []
assert len(top["files"]) == 1 and top["totals"]["tensor_count"] == 4
d = top["files"][0]
n, hdr, data, meta = mkst.read(p)
assert d["path"] == p, d["path"]
assert d["bytes"] == os.path.getsize(p)
assert d["header_bytes"] == n and d["data_start"] == 8 + n
assert d["metadata"] == {"format": "pt", "note": "hello"}, d["metadata"]
assert d["tensor_count"] == 4
want = []
for k, v in hdr.items():
    if k == "__metadata__":
        continue
    a, b = v["data_offsets"]
    numel = 1
    for s in v["shape"]:
        numel *= s
    want.append({"name": k, "dtype": v["dtype"], "shape": v["shape"], "numel": numel,
                 "offset": a, "bytes": b - a})
want.sort(key=lambda t: t["offset"])
assert d["tensors"] == want, (d["tensors"], want)
assert set(d) == {"path", "bytes", "header_bytes", "data_start", "metadata",
                  "tensor_count", "tensors"}, d.keys()
EOF
expect 0 "inspect --json --limit 1" "$SHS_BIN" inspect --json --limit 1 "$A"
py "--limit caps JSON tensors" <<'EOF'
import json, os
d = json.load(open(os.environ["WORK"] + "/out"))["files"][0]
assert len(d["tensors"]) == 1 and d["tensor_count"] == 4
EOF

# ---- hostile names are escaped ----
E="$WORK/evil.safetensors"
expect 0 "inspect hostile names" "$SHS_BIN" inspect "$E"
py "no raw control characters in text output" <<'EOF'
import os
out = open(os.environ["WORK"] + "/out", "rb").read()
bad = [c for c in out if (c < 0x20 and c not in (0x0a,)) or c == 0x7f]
assert not bad, bad
text = out.decode("utf-8")
assert "\u202e" not in text and "\u009b" not in text, "bidi/C1 printed raw"
assert "x\\x1B[2Jy" in text, "ESC escaped"
assert "line\\nbreak" in text, "newline escaped"
assert "rtl\\u{202E}gnp.exe" in text, "bidi override escaped"
assert "c1\\u{009B}csi" in text, "C1 control escaped"
assert "nul\\x00byte" in text, "NUL escaped"
assert "\u6743\u91cd" in text, "printable UTF-8 kept"
assert "k\\x1B: v\\x07" in text, "metadata escaped"
EOF
expect 0 "inspect --json hostile names" "$SHS_BIN" inspect --json "$E"
py "JSON keeps the exact names" <<'EOF'
import json, os
raw = open(os.environ["WORK"] + "/out", "rb").read()
text = raw.decode("utf-8")               # UTF-8, not ASCII escapes
assert "\u6743\u91cd" in text, "CJK written as UTF-8"
assert "\u202e" not in text and "\u009b" not in text, "bidi/C1 written raw"
assert "\\u202E" in text and "\\u009B" in text, "bidi/C1 written as \\u escapes"
d = json.loads(raw)["files"][0]
names = {t["name"] for t in d["tensors"]}
assert names == {"x\x1b[2Jy", "line\nbreak", "rtl\u202egnp.exe", "c1\u009bcsi",
                 "nul\x00byte", "\u6743\u91cd"}, names
assert d["metadata"] == {"k\x1b": "v\x07"}
EOF

# ---- directory ----
expect 0 "inspect a directory" "$SHS_BIN" inspect "$WORK/hf"
py "directory: files sorted, totals" <<'EOF'
import os
out = open(os.environ["WORK"] + "/out").read()
files = [l.split()[1] for l in out.splitlines() if l.startswith("file:")]
W = os.environ["WORK"]
assert files == [f"{W}/hf/model-00001-of-00002.safetensors",
                 f"{W}/hf/model-00002-of-00002.safetensors"], files
assert "totals: 2 files, 5 tensors, 27 parameters, 104 bytes" in out, out
assert "index check:" in out and ": OK" in out
EOF
expect 0 "inspect --json a directory" "$SHS_BIN" inspect --json "$WORK/hf"
py "directory JSON" <<'EOF'
import json, os
W = os.environ["WORK"]
d = json.load(open(W + "/out"))
assert d["kind"] == "directory"
assert [f["path"] for f in d["files"]] == [f"{W}/hf/model-00001-of-00002.safetensors",
                                          f"{W}/hf/model-00002-of-00002.safetensors"]
t = d["totals"]
assert (t["file_count"], t["tensor_count"], t["parameters"], t["bytes"]) == (2, 5, 27, 104), t
assert t["dtypes"] == {"I64": {"tensor_count": 1, "parameters": 3, "bytes": 24},
                       "F32": {"tensor_count": 2, "parameters": 16, "bytes": 64},
                       "F16": {"tensor_count": 2, "parameters": 8, "bytes": 16}}, t["dtypes"]
assert d["errors"] == [] and len(d["indexes"]) == 1 and d["indexes"][0]["ok"] is True
assert d["indexes"][0]["shards"] == ["model-00001-of-00002.safetensors",
                                     "model-00002-of-00002.safetensors"]
EOF
mkdir "$WORK/empty"
expect 1 "inspect an empty directory" "$SHS_BIN" inspect "$WORK/empty"
has "$WORK/err" "no *.safetensors files" "empty directory message"

# ---- index ----
IX="$WORK/hf/model.safetensors.index.json"
expect 0 "inspect a good index" "$SHS_BIN" inspect "$IX"
has "$WORK/out" "shards:     2" "index: shard count"
has "$WORK/out" "model-00001-of-00002.safetensors" "index: first shard listed"
has "$WORK/out" "model-00002-of-00002.safetensors" "index: second shard listed"
has "$WORK/out" "totals: 2 files, 5 tensors" "index: totals"
[ -s "$WORK/err" ] && { fail "good index printed diagnostics"; show_output; } || true
expect 0 "inspect --json a good index" "$SHS_BIN" inspect --json "$IX"
py "index JSON" <<'EOF'
import json, os
d = json.load(open(os.environ["WORK"] + "/out"))
assert d["kind"] == "index" and len(d["files"]) == 2 and d["errors"] == []
assert d["indexes"][0]["metadata"] == {"total_size": 104}
assert d["indexes"][0]["tensor_count"] == 5 and d["indexes"][0]["shard_count"] == 2
EOF

B="$WORK/bad"
expect 1 "index naming a missing shard" "$SHS_BIN" inspect "$B/missing.json"
has "$WORK/err" "shard 'model-00003-of-00003.safetensors' named by the weight_map cannot be read" "missing shard reported"
has "$WORK/out" "model-00001-of-00002.safetensors" "other shards still listed"
expect 1 "index with ../ path" "$SHS_BIN" inspect "$B/dotdot.json"
has "$WORK/err" "file name '../x.safetensors' escapes the folder ('..')" "'..' rejected"
expect 1 "index with absolute path" "$SHS_BIN" inspect "$B/absolute.json"
has "$WORK/err" "file name '/etc/passwd' is an absolute path" "absolute path rejected"
expect 1 "index naming a file in a subdirectory (the loader's rule too)" "$SHS_BIN" inspect "$B/subdir.json"
has "$WORK/err" "file name 'sub/x.safetensors' is a path, not a file name in the same folder" "subdirectory rejected"
expect 1 "the library refuses the same index" "$SHS_BIN" merge "$B/subdir.json" "$WORK/sub-merged"
has "$WORK/err" "weight_map[\"layers.1.w\"]: file name 'sub/x.safetensors' is a path, not a file name in the same folder" "merge names the same reason (one reader)"
expect 1 "weight_map tensor missing from its shard" "$SHS_BIN" inspect "$B/ghost.json"
has "$WORK/err" "weight_map names tensor 'ghost.w' in 'model-00001-of-00002.safetensors', but that shard has no such tensor" "missing tensor reported"
expect 1 "shard tensor missing from weight_map" "$SHS_BIN" inspect "$B/unlisted.json"
has "$WORK/err" "tensor 'pos_ids' of shard 'model-00002-of-00002.safetensors' is not in the weight_map" "unlisted tensor reported"
expect 1 "tensor mapped to the wrong shard" "$SHS_BIN" inspect "$B/wrongshard.json"
has "$WORK/err" "tensor 'pos_ids' is stored in shard 'model-00002-of-00002.safetensors', but the weight_map names 'model-00001-of-00002.safetensors'" "wrong shard reported"
expect 1 "index that is not JSON" "$SHS_BIN" inspect "$B/notjson.json"
has "$WORK/err" "index is not valid JSON" "bad JSON reported"
expect 1 "index with a duplicate key" "$SHS_BIN" inspect "$B/dupkey.json"
has "$WORK/err" "duplicate" "duplicate key reported"
expect 1 "index without weight_map" "$SHS_BIN" inspect "$B/noweightmap.json"
has "$WORK/err" "no \"weight_map\"" "missing weight_map reported"
expect 1 "index that is an array" "$SHS_BIN" inspect "$B/array.json"
has "$WORK/err" "not a JSON object" "array index reported"
expect 1 "weight_map value not a string" "$SHS_BIN" inspect "$B/nonstring.json"
has "$WORK/err" "weight_map[\"layers.1.w\"] is not a string" "non-string value reported"
expect 1 "index that does not exist" "$SHS_BIN" inspect "$B/nope.index.json"
has "$WORK/err" "No such file" "missing index reported"
expect 0 "total_size mismatch is only a warning" "$SHS_BIN" inspect "$B/totalsize.json"
has "$WORK/err" "warning: " "total_size warning"
has "$WORK/err" "metadata.total_size is 105, but the shards hold 104 bytes" "total_size numbers"
expect 1 "inspect --json a bad index" "$SHS_BIN" inspect --json "$B/ghost.json"
py "bad index JSON lists the problem" <<'EOF'
import json, os
d = json.load(open(os.environ["WORK"] + "/out"))
ix = d["indexes"][0]
assert ix["ok"] is False and len(ix["problems"]) == 1 and "ghost.w" in ix["problems"][0]
assert d["errors"] == ix["problems"]
assert len(d["files"]) == 2
EOF

# ---- invalid files ----
head -c 100 "$A" > "$WORK/trunc.safetensors"
expect 1 "inspect a truncated file" "$SHS_BIN" inspect "$WORK/trunc.safetensors"
has "$WORK/err" "shardsafe: " "error prefix"
has "$WORK/err" "header length" "library message for a truncated header"
expect 1 "inspect --json a truncated file" "$SHS_BIN" inspect --json "$WORK/trunc.safetensors"
py "invalid single file: a document with ok false and the error" <<'EOF'
import json, os
d = json.load(open(os.environ["WORK"] + "/out"))
assert d["ok"] is False and d["files"] == [] and len(d["errors"]) == 1, d
assert "header length" in d["errors"][0], d["errors"]
EOF
expect 1 "inspect a missing file" "$SHS_BIN" inspect "$WORK/none.safetensors"
has "$WORK/err" "No such file or directory" "missing file message"
mkdir "$WORK/mixed"
cp "$A" "$WORK/mixed/a.safetensors"
cp "$WORK/trunc.safetensors" "$WORK/mixed/b.safetensors"
cp "$A" "$WORK/mixed/c.safetensors"
expect 1 "directory with one invalid file" "$SHS_BIN" inspect "$WORK/mixed"
has "$WORK/out" "$WORK/mixed/c.safetensors" "files after the bad one still listed"
has "$WORK/err" "$WORK/mixed/b.safetensors" "bad file named"
has "$WORK/out" "totals: 2 files" "totals count the valid files"
mkfifo "$WORK/mixed/fifo.safetensors"
CHECKS=$((CHECKS + 1))
set +e
timeout 20 "$SHS_BIN" inspect "$WORK/mixed/fifo.safetensors" >"$WORK/out" 2>"$WORK/err"
RC=$?
set -e
if [ "$RC" -eq 1 ] && grep -qF "not a regular file" "$WORK/err"; then pass "a FIFO is refused, not opened"
else fail "FIFO: status $RC"; show_output; fi

# ---- __metadata__ holding "\u0000": shown exactly ----
"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
mkst.write(f"{W}/nulmeta.safetensors", [mkst.entry("w", np.zeros(2, np.float32))],
           {"a\x00b": "x\x00y", "a\x00c": "z", "a": "w\x00"})
EOF
expect 0 "inspect --json, NUL in metadata" "$SHS_BIN" inspect "$WORK/nulmeta.safetensors" --json
py "inspect --json keeps NUL in metadata keys and values" <<'EOF'
import json, os
d = json.load(open(os.environ["WORK"] + "/out"))
want = {"a\x00b": "x\x00y", "a\x00c": "z", "a": "w\x00"}
m = d["files"][0]["metadata"]
assert m == want, m
EOF
expect 0 "inspect, NUL in metadata" "$SHS_BIN" inspect "$WORK/nulmeta.safetensors"
has "$WORK/out" "3 entries" "text output lists the three NUL-distinct keys"

finish
