# export.sh -- export at train end: the demo trainer with
# --set last_save_in_hf=true --set export_dtype=bf16 writes the final
# weights in the Hugging Face layout into <save_path>/hf-<step dir>, says
# "exported to <dir>" and keeps its closing lines; the export verifies,
# inspects as BF16 model tensors only, and is byte-identical to
# `shardsafe merge --dtype bf16` of the same step; `ls` lists it, `prune`
# and retention keep it, a re-run replaces it; a bad export_dtype is a
# usage error; and (with MPI) the same from 2 ranks.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }

# ok_if TEST DESCRIPTION: a check whose test is a shell expression.
ok_if() {
    CHECKS=$((CHECKS + 1))
    if eval "$1"; then pass "$2"; else fail "$2"; fi
}

SP="$WORK/sp"
HF="$SP/hf-iteration_00000020"
EXPORT=(--set last_save_in_hf=true --set export_dtype=bf16)

expect 0 "trainer exports at the end" "$TRAINER" --steps 20 --save-interval 10 --log-every 0 \
    --save-path "$SP" --set keep_latest_k=1 "${EXPORT[@]}"
has "$WORK/out" "exported to $HF" "it says where"
py "the closing lines are unchanged: final_digest= then global_step=" <<EOF
lines = open("$WORK/out").read().splitlines()
assert lines[-3] == "exported to $HF", lines
assert lines[-2].startswith("final_digest=") and len(lines[-2]) == len("final_digest=") + 16, lines
assert lines[-1] == "global_step=20", lines
EOF
sed -n 's/^final_digest=//p' "$WORK/out" >"$WORK/digest1"

expect 0 "the export verifies" "$SHS_BIN" verify "$HF"
expect 0 "inspect --json of the export" "$SHS_BIN" inspect --json "$HF"
py "the export: model.safetensors, BF16 model tensors only" <<EOF
import json, os
doc = json.load(open("$WORK/out"))
assert sorted(os.listdir("$HF")) == ["model.safetensors"], os.listdir("$HF")
s = json.dumps(doc)
assert "BF16" in s and "F32" not in s, s[:400]
assert "model.hidden.weight" in s and "optim" not in s, s[:400]
EOF

# the same step through the merge command: the same bytes
expect 0 "merge --dtype bf16 of the same step" "$SHS_BIN" merge "$SP/iteration_00000020" \
    "$WORK/ref" --dtype bf16
CHECKS=$((CHECKS + 1))
if cmp -s "$WORK/ref/model.safetensors" "$HF/model.safetensors"; then
    pass "the export equals the merge, byte for byte"
else
    fail "the export differs from 'shardsafe merge --dtype bf16'"
fi

expect 0 "ls lists the export" "$SHS_BIN" ls "$SP"
has "$WORK/out" "export (Hugging Face) of step 20: hf-iteration_00000020" "ls names it"
expect 0 "ls --json" "$SHS_BIN" ls --json "$SP"
py "ls --json: exports[] holds it, steps[] does not" <<EOF
import json
d = json.load(open("$WORK/out"))
assert [e["name"] for e in d["exports"]] == ["hf-iteration_00000020"], d["exports"]
assert d["exports"][0]["step"] == 20 and d["exports"][0]["file_count"] == 1
assert [e["name"] for e in d["steps"]] == ["iteration_00000020"], d["steps"]
assert d["leftovers"] == [], d["leftovers"]
EOF

# what a crash during an export leaves is a leftover: listed, then pruned
mkdir -p "$SP/hf-iteration_00000020.part-1-of-2" "$SP/hf-iteration_00000020.tmp-0123456789abcdef"
echo x >"$SP/hf-iteration_00000020.part-1-of-2/model-00001-of-00002.safetensors"
expect 0 "ls with export temporaries" "$SHS_BIN" ls "$SP"
has "$WORK/out" "leftover (failed save): hf-iteration_00000020.part-1-of-2" "a part is a leftover"
has "$WORK/out" "leftover (failed save): hf-iteration_00000020.tmp-0123456789abcdef" \
    "a temporary is a leftover"
expect 0 "prune --keep 1 leaves the export" "$SHS_BIN" prune "$SP" --keep 1
ok_if '[ -d "$HF" ]' "export kept by prune"
ok_if '[ ! -e "$SP/hf-iteration_00000020.part-1-of-2" ] && [ ! -e "$SP/hf-iteration_00000020.tmp-0123456789abcdef" ]' \
    "prune removed the export temporaries"

# a re-run of the same steps from scratch: the export is replaced
mv "$SP/iteration_00000020" "$WORK/moved"
rm "$SP/latest_checkpointed_iteration.txt"
expect 0 "a re-run of the same steps exports again" "$TRAINER" --steps 20 --save-interval 10 \
    --log-every 0 --save-path "$SP" "${EXPORT[@]}"
has "$WORK/out" "exported to $HF" "re-run: exported"
py "re-run: the export replaced, nothing left beside it" <<EOF
import os
names = sorted(os.listdir("$SP"))
assert [n for n in names if n.startswith("hf-")] == ["hf-iteration_00000020"], names
assert not [n for n in names if n.startswith(".") and n != ".shardsafe.lock"], names
assert os.listdir("$HF") == ["model.safetensors"]
EOF
CHECKS=$((CHECKS + 1))
if cmp -s "$WORK/ref/model.safetensors" "$HF/model.safetensors"; then
    pass "re-run: same training, same export bytes"
else
    fail "re-run: the export changed"
fi

# more steps in the same save path: retention (keep_latest_k 1) keeps the
# old export, the new one is beside it
expect 0 "training on to step 30 with keep_latest_k 1" "$TRAINER" --steps 30 --save-interval 10 \
    --log-every 0 --save-path "$SP" --set keep_latest_k=1 "${EXPORT[@]}"
has "$WORK/out" "exported to $SP/hf-iteration_00000030" "the step-30 export"
ok_if '[ -d "$HF" ]' "retention kept the step-20 export"
ok_if '[ ! -d "$SP/iteration_00000020" ]' "retention removed step 20 itself"

# bad values: usage errors naming the key
expect 2 "export_dtype int8 is refused" "$TRAINER" --steps 1 --save-path "$WORK/bad" \
    --set last_save_in_hf=true --set export_dtype=int8
has "$WORK/err" "export_dtype: unknown dtype 'int8'" "the message names the key and value"
expect 2 "last_save_in_hf=maybe is refused" "$TRAINER" --steps 1 --save-path "$WORK/bad" \
    --set last_save_in_hf=maybe
has "$WORK/err" "last_save_in_hf: expected a boolean" "the message names the key"
ok_if '[ ! -e "$WORK/bad" ]' "nothing written for a bad config"

# ---- MPI: 2 ranks, each writing whole files of the export ----
MPI_TRAINER="$SHS_BUILD_DIR/trainer_mpi"
if [ -x "$MPI_TRAINER" ] && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1
    export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
    MSP="$WORK/mpi"
    expect 0 "mpi: 2 ranks train and export" mpirun -np 2 --oversubscribe "$MPI_TRAINER" \
        --steps 20 --save-interval 10 --log-every 0 --save-path "$MSP" "${EXPORT[@]}"
    has "$WORK/out" "exported to $MSP/hf-iteration_00000020" "mpi: rank 0 says where"
    expect 0 "mpi: the export verifies" "$SHS_BIN" verify "$MSP/hf-iteration_00000020"
    expect 0 "mpi: merge of the same step" "$SHS_BIN" merge "$MSP/iteration_00000020" \
        "$WORK/mref" --dtype bf16
    py "mpi: the export equals the merge, nothing left beside it" <<EOF
import os
a = open("$MSP/hf-iteration_00000020/model.safetensors", "rb").read()
b = open("$WORK/mref/model.safetensors", "rb").read()
assert a == b, (len(a), len(b))
names = sorted(n for n in os.listdir("$MSP") if n.startswith("hf-"))
assert names == ["hf-iteration_00000020"], names
EOF
else
    skip "no trainer_mpi or mpirun: the MPI part"
fi

finish
