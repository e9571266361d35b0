# reshard.sh -- `shardsafe reshard`: a trainer checkpoint resharded to 2
# ranks by a layout file (split by glob, MindSpore's vocabulary,
# replicated), verified, compared with the source on global values, its
# layout recorded; back to 1 rank by --world-size, and the trainer resumed
# from it ends bitwise identical to one resumed from the original;
# --print-layout, --json, bad layouts and usage errors, nothing left behind.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }
W="$WORK"

expect 0 "trainer saves step 20" "$TRAINER" --steps 20 --save-path "$W/ck" --save-interval 20 --log-every 0

# ---- the saved layout ----
expect 0 "--print-layout" "$SHS_BIN" reshard "$W/ck" --print-layout
cp "$WORK/out" "$W/saved.json"
py "the saved layout: world 1, every tensor whole on rank 0" <<'EOF'
import json, os
d = json.load(open(os.environ["WORK"] + "/saved.json"))
assert d["world_size"] == 1, d
assert len(d["tensors"]) == 15, len(d["tensors"])
for name, s in d["tensors"].items():
    assert s["device_matrix"] == [1] and set(s["tensor_map"]) == {-1}, (name, s)
EOF

# ---- to 2 ranks by a layout file ----
cat >"$W/two.json" <<'EOF'
{
  "world_size": 2,
  "tensors": {
    "model.hidden.weight": {"device_matrix": [2], "tensor_map": [-1, 0], "alias_name": ["tp"]},
    "*hidden.weight": {"split_dim": 1},
    "*.bias": {"replicated": true},
    "*embed.weight": {"boxes": [{"rank": 0, "offset": [0, 0], "shape": [30, 16]},
                                {"rank": 1, "offset": [30, 0], "shape": [14, 16]}]},
    "*": {"split_dim": 0, "ranks": 2}
  }
}
EOF
expect 0 "reshard to 2 ranks by a layout file" "$SHS_BIN" reshard "$W/ck" "$W/two" --layout "$W/two.json" --json
cp "$WORK/out" "$W/two.out"
py "--json: schema 2, the numbers" <<'EOF'
import json, os
d = json.load(open(os.environ["WORK"] + "/two.out"))
assert d["schema"] == 2 and d["command"] == "reshard" and d["ok"] is True, d
assert d["world_size"] == 2 and d["saved_world_size"] == 1 and d["step"] == 20, d
assert d["tensor_count"] == 15 and d["scaled"] is False, d
assert d["blobs_carried"] >= 1 and d["blobs_dropped"] == 0, d
# every target box read once and written once; the biases on both ranks
assert d["bytes_written"] == d["bytes_read"] == 276768, d
EOF
expect 0 "the output verifies" "$SHS_BIN" verify "$W/two"
expect 0 "same global values as the source" "$SHS_BIN" diff "$W/ck" "$W/two"
py "chunks are the target boxes, and the layout is recorded" <<'EOF'
import json, os
W = os.environ["WORK"]
m = json.load(open(W + "/two/metadata.json"))
assert m["world_size"] == 2 and m["step"] == 20
rank = [f["rank"] for f in m["files"]]
def boxes(name):
    return sorted((rank[c["file"]], c["offset"], c["shape"]) for c in m["tensors"][name]["chunks"])
assert boxes("model.hidden.weight") == [(0, [0, 0], [128, 64]), (1, [0, 64], [128, 64])]
assert boxes("optimizer.exp_avg.model.hidden.weight") == [(0, [0, 0], [128, 64]), (1, [0, 64], [128, 64])]
assert boxes("model.hidden.bias") == [(0, [0], [128]), (1, [0], [128])]
assert boxes("model.embed.weight") == [(0, [0, 0], [30, 16]), (1, [30, 0], [14, 16])]
assert boxes("model.out.weight") == [(0, [0, 0], [64, 44]), (1, [64, 0], [64, 44])]
lay = m["layouts"]
assert lay["world_size"] == 2
t = lay["tensors"]
assert t["model.hidden.weight"] == {"device_matrix": [2], "tensor_map": [-1, 0]}, t["model.hidden.weight"]
assert t["model.out.weight"] == {"device_matrix": [2], "tensor_map": [0, -1]}
assert t["model.hidden.bias"] == {"device_matrix": [2], "tensor_map": [-1]}
assert "boxes" in t["model.embed.weight"]
names = sorted(os.listdir(W + "/two"))
assert "checkpoint-model-0000000-0000002.safetensors" in names and "checkpoint-opt-0000001-0000002.safetensors" in names, names
assert not [n for n in os.listdir(W) if n.startswith(".tmp-")]
EOF

# ---- back to 1 rank by scaling its recorded layout (explicit boxes
# cannot scale: a layout file for that one) ----
expect 1 "explicit boxes cannot be scaled" "$SHS_BIN" reshard "$W/two" "$W/one" --world-size 1
has "$WORK/err" "tensor 'model.embed.weight': explicit boxes cannot be scaled from 2 to 1 ranks" "the scaling error names the tensor"
expect 0 "reshard back to 1 rank" "$SHS_BIN" reshard "$W/two" "$W/one" --layout "$W/saved.json"
has "$WORK/out" "(step 20, 2 ranks) into" "text summary: step and source ranks"
has "$WORK/out" "(1 ranks): 15 tensors" "text summary: target ranks and tensors"
expect 0 "round trip: same values" "$SHS_BIN" diff "$W/ck" "$W/one"

# the trainer resumes from the round trip exactly as from the original
expect 0 "resume from the original" "$TRAINER" --steps 40 --save-path "$W/ra" --load-path "$W/ck" --save-interval 1000 --log-every 0
grep final_digest "$WORK/out" >"$W/digest_a"
expect 0 "resume from the resharded copy" "$TRAINER" --steps 40 --save-path "$W/rb" --load-path "$W/one" --save-interval 1000 --log-every 0
grep final_digest "$WORK/out" >"$W/digest_b"
CHECKS=$((CHECKS + 1))
if [ -s "$W/digest_a" ] && cmp -s "$W/digest_a" "$W/digest_b"; then
    pass "bitwise identical training after the round trip"
else
    fail "final digests differ: $(cat "$W/digest_a") vs $(cat "$W/digest_b")"
fi

# ---- scaling the saved layout: 1 -> 2 (everything whole: replicated) ----
expect 0 "--world-size scales the saved layout" "$SHS_BIN" reshard "$W/ck" "$W/rep2" --world-size 2 --no-fsync
expect 0 "scaled output verifies" "$SHS_BIN" verify "$W/rep2"

# ---- bad input: exit 1, the tensor named, nothing left behind ----
expect 1 "existing destination" "$SHS_BIN" reshard "$W/ck" "$W/two" --layout "$W/two.json"
has "$WORK/err" "the destination '$W/two' exists" "existing destination named"
cat >"$W/uncovered.json" <<'EOF'
{"world_size": 2, "tensors": {"model.*": {"replicated": true}}}
EOF
expect 1 "a tensor the layout does not cover" "$SHS_BIN" reshard "$W/ck" "$W/x" --layout "$W/uncovered.json"
has "$WORK/err" "does not cover tensor 'optimizer.exp_avg.model.embed.weight'" "uncovered tensor named"
has "$WORK/err" "nothing written" "says nothing was written"
cat >"$W/nodivide.json" <<'EOF'
{"world_size": 3, "tensors": {"*": {"split_dim": 0}}}
EOF
expect 1 "a split that does not divide" "$SHS_BIN" reshard "$W/ck" "$W/x" --layout "$W/nodivide.json"
has "$WORK/err" "tensor 'model.embed.weight': dimension 0 (size 44) does not divide into 3 equal slices" "non-dividing split named"
cat >"$W/unknown.json" <<'EOF'
{"world_size": 2, "tensors": {"model.nope": {"replicated": true}, "*": {"replicated": true}}}
EOF
expect 1 "an unknown tensor name" "$SHS_BIN" reshard "$W/ck" "$W/x" --layout "$W/unknown.json"
has "$WORK/err" "tensor 'model.nope' is not in the checkpoint" "unknown tensor named"
cat >"$W/glob.json" <<'EOF'
{"world_size": 2, "tensors": {"decoder.*": {"replicated": true}, "*": {"replicated": true}}}
EOF
expect 1 "a glob that selects nothing" "$SHS_BIN" reshard "$W/ck" "$W/x" --layout "$W/glob.json" --json
has "$WORK/out" "'decoder.*' matches no tensor" "--json error names the glob"
has "$WORK/out" "\"ok\": false" "--json error document"
expect 1 "a missing layout file" "$SHS_BIN" reshard "$W/ck" "$W/x" --layout "$W/none.json"
py "nothing left behind by the failures" <<'EOF'
import os
W = os.environ["WORK"]
assert not os.path.exists(W + "/x")
left = [n for n in os.listdir(W) if n.startswith(".tmp-")]
assert not left, left
EOF

# ---- usage ----
expect 2 "missing DST" "$SHS_BIN" reshard "$W/ck"
expect 2 "--world-size 0" "$SHS_BIN" reshard "$W/ck" "$W/x" --world-size 0
expect 2 "--print-layout with DST" "$SHS_BIN" reshard "$W/ck" "$W/x" --print-layout
expect 2 "a third positional" "$SHS_BIN" reshard a b c
expect 0 "--help" "$SHS_BIN" reshard --help
has "$WORK/out" "Usage: shardsafe reshard SRC DST" "help text"
expect 0 "listed in the command list" "$SHS_BIN" --help
has "$WORK/out" "reshard SRC DST" "main help lists reshard"

finish
