# json.sh -- `--json` on every command: one document on stdout, schema 2,
# "command", "ok" (exit status 0), "errors" and "warnings", the same keys
# for the same things, UTF-8 text; and a document for failures too.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
SP="$WORK/save"
"$TRAINER" --steps 30 --save-path "$SP" --save-interval 10 --log-every 0 >"$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log" >&2; exit 1; }
S30="$SP/iteration_00000030"

"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
mkst.write(f"{W}/a.safetensors", [mkst.entry("w", np.arange(6, dtype=np.float32).reshape(2, 3)),
                                  mkst.entry("\u6743\u91cd", np.ones(2, np.int64))])
mkst.write(f"{W}/b.safetensors", [mkst.entry("w", np.arange(6, dtype=np.float32).reshape(2, 3) + 1),
                                  mkst.entry("\u6743\u91cd", np.ones(2, np.int64))])
EOF
A="$WORK/a.safetensors"
B="$WORK/b.safetensors"

# check_doc STATUS COMMAND: stdout is one document of the common schema
check_doc() {
    cp "$WORK/out" "$WORK/doc.json"
    py "$2 --json: schema 2, command, ok, errors, warnings, parsed by python3 -m json.tool" <<EOF
import json, subprocess
raw = open("$WORK/doc.json", "rb").read()
subprocess.run(["$PY", "-m", "json.tool", "$WORK/doc.json"], check=True, stdout=subprocess.DEVNULL)
d = json.loads(raw.decode("utf-8"))
assert list(d)[:2] == ["schema", "command"], list(d)
assert d["schema"] == 2 and d["command"] == "$2", d
assert d["ok"] is ($1 == 0), d
assert isinstance(d["errors"], list) and isinstance(d["warnings"], list), d
assert raw.endswith(b"}\n") and raw.count(b"\n}\n") == 1, "exactly one document"
EOF
}

expect 0 "inspect --json" "$SHS_BIN" inspect --json "$A"
check_doc 0 inspect
py "inspect: tensors with name, dtype, shape, bytes; CJK as UTF-8" <<EOF
import json
raw = open("$WORK/doc.json", "rb").read()
assert "\u6743\u91cd".encode() in raw, "UTF-8, not \\\\u escapes"
d = json.loads(raw)
f = d["files"][0]
t = {x["name"]: x for x in f["tensors"]}
assert t["w"]["dtype"] == "F32" and t["w"]["shape"] == [2, 3] and t["w"]["bytes"] == 24, t
assert t["\u6743\u91cd"]["bytes"] == 16 and f["tensor_count"] == 2 and f["path"] == "$A"
EOF
expect 0 "inspect --json of a step directory" "$SHS_BIN" inspect --json "$S30"
check_doc 0 inspect

expect 0 "verify --json" "$SHS_BIN" verify --json "$A" "$S30" "$SP"
check_doc 0 verify
py "verify: one result per file and step, with path, kind, ok" <<EOF
import json
d = json.load(open("$WORK/doc.json"))
assert d["paths"] == ["$A", "$S30", "$SP"], d["paths"]
r = d["results"]
assert r[0] == {"path": "$A", "kind": "file", "ok": True, "reason": None,
                "tensor_count": 2, "bytes": r[0]["bytes"]}, r[0]
assert r[1]["kind"] == "checkpoint" and r[1]["step"] == 30 and r[1]["ok"] is True, r[1]
assert [x["step"] for x in r[2:]] == [10, 20, 30], r
EOF
head -c 50 "$A" >"$WORK/trunc.safetensors"
expect 1 "verify --json, a bad file" "$SHS_BIN" verify --json "$A" "$WORK/trunc.safetensors"
check_doc 1 verify
py "verify: the failed file has ok false and a reason" <<EOF
import json
d = json.load(open("$WORK/doc.json"))
bad = d["results"][1]
assert bad["ok"] is False and bad["path"] == "$WORK/trunc.safetensors" and bad["reason"], bad
EOF
expect 1 "verify -q: the reason on stderr, nothing on stdout" "$SHS_BIN" verify -q "$A" "$WORK/trunc.safetensors"
has "$WORK/err" "shardsafe: $WORK/trunc.safetensors: " "verify -q: the reason names the file"
[ -s "$WORK/out" ] && { fail "verify -q printed on stdout"; show_output; } || true

expect 0 "convert --json" "$SHS_BIN" convert --json "$A" "$WORK/c.safetensors" --dtype bf16
check_doc 0 convert
py "convert: source, destination, dtype, counts, bytes_written" <<EOF
import json, os
d = json.load(open("$WORK/doc.json"))
assert d["source"] == "$A" and d["destination"] == "$WORK/c.safetensors" and d["dtype"] == "BF16", d
assert (d["converted_count"], d["copied_count"], d["left_out_count"]) == (1, 1, 0), d
assert d["bytes_written"] == os.path.getsize("$WORK/c.safetensors"), d
EOF
expect 1 "convert --json, invalid IN" "$SHS_BIN" convert --json "$WORK/trunc.safetensors" "$WORK/d.safetensors" --dtype f16
check_doc 1 convert
py "convert: the error is in the document" <<EOF
import json
d = json.load(open("$WORK/doc.json"))
assert len(d["errors"]) == 1 and "trunc.safetensors" in d["errors"][0], d
EOF
expect 2 "convert --json to stdout is a usage error" "$SHS_BIN" convert --json "$A" - --dtype f16

expect 0 "ls --json" "$SHS_BIN" ls --json "$SP"
check_doc 0 ls
py "ls: path, steps with name, step, bytes" <<EOF
import json
d = json.load(open("$WORK/doc.json"))
assert d["path"] == "$SP" and [s["step"] for s in d["steps"]] == [10, 20, 30], d
assert all({"name", "step", "bytes", "file_count", "mtime"} <= set(s) for s in d["steps"])
EOF
expect 1 "ls --json of a missing path" "$SHS_BIN" ls --json "$WORK/nope"
check_doc 1 ls

cp -a "$SP" "$WORK/p"
mkdir "$WORK/p/.tmp-iteration_00000040-abcdef"
expect 0 "prune --json --dry-run" "$SHS_BIN" prune --json --dry-run --keep 1 "$WORK/p"
check_doc 0 prune
py "prune: removed steps, kept count, leftovers; nothing removed in a dry run" <<EOF
import json, os
d = json.load(open("$WORK/doc.json"))
assert d["dry_run"] is True and d["keep"] == 1 and d["path"] == "$WORK/p", d
assert [(r["name"], r["step"]) for r in d["removed"]] == [("iteration_00000010", 10), ("iteration_00000020", 20)], d
assert all(r["bytes"] > 0 for r in d["removed"]) and d["kept_count"] == 1
assert [l["name"] for l in d["leftovers_removed"]] == [".tmp-iteration_00000040-abcdef"], d
assert os.path.isdir("$WORK/p/iteration_00000010")
EOF
expect 0 "prune --json" "$SHS_BIN" prune --json -k 1 "$WORK/p"
check_doc 0 prune
CHECKS=$((CHECKS + 1))
[ ! -e "$WORK/p/iteration_00000010" ] && [ -d "$WORK/p/iteration_00000030" ] && pass "prune --json removed" ||
    fail "prune --json did not remove"
expect 1 "prune --json of a non-save path" "$SHS_BIN" prune --json -k 1 "$WORK"
check_doc 1 prune

expect 1 "diff --json" "$SHS_BIN" diff --json "$A" "$B"
check_doc 1 diff
py "diff: differences by name, a/b with path and tensor_count" <<EOF
import json
d = json.load(open("$WORK/doc.json"))
assert d["a"]["path"] == "$A" and d["a"]["tensor_count"] == 2 and d["same"] is False
assert [x["name"] for x in d["differences"]] == ["w"], d
EOF
expect 2 "diff --json, trouble" "$SHS_BIN" diff --json "$A" "$WORK/trunc.safetensors"
check_doc 2 diff

# one key per meaning: the commands that read SOURCE and write
# DESTINATION (merge, convert, reshard) name them alike, counts end in
# _count, what a run wrote is bytes_written, what a path is is its kind
expect 0 "merge --json" "$SHS_BIN" merge --json "$S30" "$WORK/m"
cp "$WORK/out" "$WORK/merge.json"
expect 0 "convert --json" "$SHS_BIN" convert --json "$A" "$WORK/c2.safetensors" --dtype f16
cp "$WORK/out" "$WORK/convert.json"
expect 0 "reshard --json" "$SHS_BIN" reshard --json "$S30" "$WORK/r" --world-size 1
cp "$WORK/out" "$WORK/reshard.json"
expect 1 "diff --json" "$SHS_BIN" diff --json "$S30" "$A"
cp "$WORK/out" "$WORK/diff.json"
py "source/destination, *_count, bytes_written and kind alike across commands" <<EOF
import json
docs = {c: json.load(open(f"$WORK/{c}.json")) for c in ("merge", "convert", "reshard", "diff")}
for c in ("merge", "convert", "reshard"):
    d = docs[c]
    assert "source" in d and "destination" in d and "bytes_written" in d, (c, d)
    assert not {"path", "out", "src", "dst", "bytes", "tensors", "files"} & set(d), (c, sorted(d))
    for k, v in d.items():
        if isinstance(v, int) and not isinstance(v, bool) and k not in ("schema", "step", "world_size", "saved_world_size", "total_size", "bytes_read", "bytes_written", "files_written", "blobs_carried", "blobs_dropped"):
            assert k.endswith("_count"), (c, k)
assert docs["merge"]["source"] == "$S30" and docs["merge"]["destination"] == "$WORK/m"
assert docs["convert"]["destination"] == "$WORK/c2.safetensors"
assert docs["diff"]["a"]["kind"] == "checkpoint" and docs["diff"]["b"]["kind"] == "file", docs["diff"]
assert "type" not in docs["diff"]["a"] and docs["diff"]["tensor_kind"] == "all", docs["diff"]
EOF

# usage errors print no document: the command line was not understood
expect 2 "usage error with --json" "$SHS_BIN" inspect --json
[ -s "$WORK/out" ] && { fail "usage error printed a document"; show_output; } || true

# a path that is not UTF-8 is given in the text escaping (\xNN)
BADNAME=$(printf 'bad\377name.safetensors')
cp "$A" "$WORK/$BADNAME"
expect 0 "inspect --json of a non-UTF-8 path" "$SHS_BIN" inspect --json "$WORK/$BADNAME"
check_doc 0 inspect
py "non-UTF-8 path as its escaped text" <<EOF
import json
d = json.load(open("$WORK/doc.json"))
assert d["path"] == "$WORK/bad\\\\xFFname.safetensors", d["path"]
EOF

finish
