# mindspore.sh -- `inspect`, `verify`, `ls` and `diff` of MindSpore
# Transformers "Checkpoint 2.0" save paths (tests/gen_mscp2.py: 4 ranks
# with metadata.json, 1 rank without, remove_redundancy), what they say
# about the format and its missing checksums, and hostile variants.
. "$(dirname "$0")/lib.bash"

GEN="$SHS_SOURCE_DIR/tests/gen_mscp2.py"
gen() { "$PY" "$GEN" "$@" >/dev/null || { echo "generator failed: $*" >&2; exit 1; }; }
gen "$WORK/ms4" --ranks 4
gen "$WORK/ms1" --ranks 1
gen "$WORK/rr" --ranks 4 --remove-redundancy
S4="$WORK/ms4/iteration_00002000"
S1="$WORK/ms1/iteration_00002000"
QKV=decoder.layers.0.self_attention.linear_qkv.weight

# ---- inspect ----
expect 0 "inspect a 4-rank MindSpore step directory" "$SHS_BIN" inspect "$S4"
has "$WORK/out" "format:     mindspore (Checkpoint 2.0; no checksums)" "inspect names the format"
has "$WORK/out" "world_size: 4" "inspect: world size from the layout"
has "$WORK/out" "$QKV" "inspect lists the tensors"
has "$WORK/out" "checkpoint-opt-0000003-0000004.safetensors  rank 3" "inspect lists the files"
expect 0 "inspect --json" "$SHS_BIN" inspect --json "$S1"
cp "$WORK/out" "$WORK/inspect.json"
py "inspect --json: format mindspore, no checksums, 9 tensors, common.json" <<EOF
import json
d = json.load(open("$WORK/inspect.json"))
assert d["schema"] == 2 and d["format"] == "mindspore" and d["checksums"] is False, d
assert d["world_size"] == 1 and d["step"] == 2000, d
assert len(d["tensors"]) == 9, d["tensors"]
assert d["common"]["global_step"] == 2000, d["common"]
EOF

# ---- verify: OK, and honest about what it could not check ----
for sp in ms4 ms1 rr; do
    expect 0 "verify the $sp save path" "$SHS_BIN" verify "$WORK/$sp"
    has "$WORK/out" "OK $WORK/$sp/iteration_00002000 (checkpoint step 2000" "verify $sp: OK line"
    has "$WORK/out" "note: MindSpore checkpoint: no checksums; headers, layout, readability and the equality of replicated copies were checked, data stored once was not" \
        "verify $sp says there are no checksums"
done
expect 0 "verify --json" "$SHS_BIN" verify --json "$S4"
cp "$WORK/out" "$WORK/verify.json"
py "verify --json: format mindspore, checksums false" <<EOF
import json
r = json.load(open("$WORK/verify.json"))["results"][0]
assert r["ok"] and r["format"] == "mindspore" and r["checksums"] is False, r
EOF

# ---- ls: the single-card step (no metadata.json) is committed ----
expect 0 "ls the single-card save path" "$SHS_BIN" ls "$WORK/ms1"
has "$WORK/out" "committed" "ls: single-card step committed"

# ---- diff: 4 ranks, 1 rank and remove_redundancy hold the same tensors ----
expect 0 "diff 4 ranks vs 1 rank" "$SHS_BIN" diff "$WORK/ms4" "$WORK/ms1"
has "$WORK/out" "9 tensors compared, 0 differ" "diff: all 9 equal"
expect 0 "diff remove_redundancy vs 4 ranks" "$SHS_BIN" diff "$WORK/rr" "$WORK/ms4"

# ---- no checksums: replicated copies are compared; a value stored once
# can change unseen by verify (it says so), but diff sees it ----
flip() {
    "$PY" - "$1" "$2" <<'EOF'
import json, struct, sys
p, name = sys.argv[1], sys.argv[2]
raw = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
b0 = h[name]["data_offsets"][0]
raw[8 + n + b0 + 1] ^= 0x40
open(p, "wb").write(raw)
EOF
}
F="$S4/checkpoint-model-0000003-0000004.safetensors"
flip "$F" "$QKV"  # rank 3's copy of slice 1; rank 1 holds the other
expect 1 "verify: two copies of a slice differ" "$SHS_BIN" verify "$S4"
has "$WORK/out" "tensor '$QKV': its copies in 'checkpoint-model-0000001-0000004.safetensors' and 'checkpoint-model-0000003-0000004.safetensors' differ (no checksums say which is right)" \
    "verify names the tensor and both files"
flip "$F" "$QKV"
# linear_fc1 is cut over all 4 ranks: rank 3's slice has no other copy
flip "$F" decoder.layers.0.mlp.linear_fc1.weight
expect 0 "verify after a bit flip in the data: nothing can see it" "$SHS_BIN" verify "$S4"
has "$WORK/out" "no checksums" "verify after the flip still says it had no checksums"
expect 1 "diff sees the flipped value" "$SHS_BIN" diff "$WORK/ms4" "$WORK/ms1"
has "$WORK/out" "decoder.layers.0.mlp.linear_fc1.weight" "diff names the changed tensor"

# ---- hostile: a clear FAIL naming the tensor or the file ----
gen "$WORK/h1" --variant missing_file
expect 1 "verify: a file storage_data names is missing" "$SHS_BIN" verify "$WORK/h1/iteration_00002000"
has "$WORK/out" "names the file 'checkpoint-model-0000003-0000004.safetensors', which does not exist" \
    "verify names the missing file"
gen "$WORK/h2" --variant wrong_shape
expect 1 "verify: global_shape does not match the files" "$SHS_BIN" verify "$WORK/h2"
has "$WORK/out" "FAIL $WORK/h2/iteration_00002000: metadata.json: tensor '$QKV': chunk 0: local_shape" \
    "verify names the tensor"
expect 1 "inspect of a hostile directory fails" "$SHS_BIN" inspect "$WORK/h2/iteration_00002000"
has "$WORK/err" "$QKV" "inspect's error names the tensor"
gen "$WORK/h3" --variant not_covering
expect 2 "diff refuses slices that leave a gap" "$SHS_BIN" diff "$WORK/h3" "$WORK/ms1"
has "$WORK/err" "the saved chunks cover 24 of its 48 elements" "diff says what is missing"

# ---- our own format says so too, with checksums ----
: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
"$SHS_BUILD_DIR/trainer" --steps 20 --save-path "$WORK/ours" --save-interval 20 --log-every 0 \
    >"$WORK/train.log" 2>&1 || { cat "$WORK/train.log" >&2; exit 1; }
expect 0 "verify our own checkpoint" "$SHS_BIN" verify "$WORK/ours"
lacks "$WORK/out" "no checksums" "our checkpoint: no such note"
expect 0 "inspect --json our own step" "$SHS_BIN" inspect --json "$WORK/ours/iteration_00000020"
cp "$WORK/out" "$WORK/ours.json"
py "inspect --json: format shardsafe, checksums true" <<EOF
import json
d = json.load(open("$WORK/ours.json"))
assert d["format"] == "shardsafe" and d["checksums"] is True, (d["format"], d["checksums"])
EOF

finish
