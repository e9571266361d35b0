#!/usr/bin/env bash
# frictions.sh -- what a new user hit (issue 15, point 5), each a check:
#   - the demo trainers print the manager's warnings (a failed retention
#     deletion), the C one and examples/python/train_torch.py;
#   - the demo trainer without a save path says it will not save;
#   - log lines say the truth: an HF initial load is not "resumed ... step
#     -1"; after a global_batch_size change the printed step is the one
#     training continues from; excluding the optimizer is not "weights
#     only"; the last-save line never has more bytes written than there are;
#   - inspect counts common.json's own entries (MindSpore's six keys);
#   - no C identifier in a CLI message.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }
cd "$WORK"
Q=(--log-every 0)

# ---- warnings: a retention deletion that fails (a symlinked step) ----
expect 0 "a step of another run" "$TRAINER" --save-path other --steps 40 --save-interval 20 "${Q[@]}"
mkdir sp && ln -s "$WORK/other/iteration_00000020" sp/iteration_00000020
expect 0 "keep_latest_k 1 over a symlinked step" "$TRAINER" --save-path sp --steps 80 \
    --save-interval 20 --set keep_latest_k=1 "${Q[@]}"
has "$WORK/out" "warning: retention could not delete step 20 of sp: sp/iteration_00000020 is a symbolic link" \
    "the C trainer prints the manager's warning"
CHECKS=$((CHECKS + 1))
[ "$(grep -c '^warning:' "$WORK/out")" = 1 ] && pass "once, not at every save" ||
    fail "warning printed $(grep -c '^warning:' "$WORK/out") times"
if "$PY" -c 'import torch' 2>/dev/null; then
    TT=(env PYTHONPATH="$SHS_BUILD_DIR/python:$PYTHONPATH")
    if [ -n "${SHS_SANITIZE_FLAGS:-}" ]; then
        # the module is instrumented, the interpreter is not: the sanitizer
        # runtimes go first (as python/CMakeLists.txt does for pytest)
        TT+=(LD_PRELOAD="$(${CC:-cc} -print-file-name=libasan.so):$(${CC:-cc} -print-file-name=libubsan.so)"
            ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
    fi
    TT+=("$PY" "$SHS_SOURCE_DIR/examples/python/train_torch.py")
    expect 0 "train_torch.py: a step of another run" "${TT[@]}" --save-path pother --steps 20 --save-interval 10
    mkdir psp && ln -s "$WORK/pother/iteration_00000010" psp/iteration_00000010
    expect 0 "train_torch.py over a symlinked step" "${TT[@]}" --save-path psp --steps 40 \
        --save-interval 10 --set keep_latest_k=1
    has "$WORK/out" "warning: retention could not delete step 10 of psp" "train_torch.py prints the manager's warning"
else
    echo "skip: train_torch.py (no torch for $PY)"
fi

# ---- no save path ----
expect 0 "no save path" "$TRAINER" --steps 30 "${Q[@]}"
has "$WORK/out" "note: no save path (--save-path, checkpoint: save_path, a CheckpointMonitor's save_dir): this run saves no checkpoint" \
    "the trainer says it will not save"
lacks "$WORK/out" "last save:" "and saves nothing"
expect 0 "enable_save false: nothing to say" "$TRAINER" --steps 30 --set enable_save=false "${Q[@]}"
lacks "$WORK/out" "no save path" "no note when saving was turned off"

# ---- log lines ----
expect 0 "a run at global_batch_size 32" "$TRAINER" --save-path gbs --steps 100 --save-interval 50 "${Q[@]}"
expect 0 "the same save path at global_batch_size 16" "$TRAINER" --save-path gbs --steps 250 --batch 16 "${Q[@]}"
has "$WORK/out" "resumed from gbs/iteration_00000100 (step 200: saved at step 100, rescaled for global_batch_size 16)" \
    "after a global_batch_size change the step printed is the one training continues from"
expect 0 "exclude_from_loading=optimizer" "$TRAINER" --load-path gbs/iteration_00000100 --save-path exo \
    --set exclude_from_loading=optimizer --steps 120 "${Q[@]}"
has "$WORK/out" "resumed from gbs/iteration_00000100 (step 100, without optimizer state)" \
    "excluding the optimizer says so"
lacks "$WORK/out" "weights only" "and is not 'weights only' (progress and RNG were loaded)"
expect 0 "incremental saves" "$TRAINER" --save-path inc --steps 60 --save-interval 30 --incremental \
    --set no_save_optim=true "${Q[@]}"
py "the last-save line adds up: tensors written + linked = tensors, never above 100%" <<PYEOF
import re
line = [l for l in open("$WORK/out") if l.startswith("last save:")][0]
m = re.search(r"tensors (\d+) bytes \((\d+) written, (\d+) linked from the previous save\), (\d+) bytes written in all", line)
assert m, line
tensors, fresh, linked, total = map(int, m.groups())
assert fresh + linked == tensors and fresh <= tensors and total >= fresh, line
assert "of" not in line.split("tensors")[0], line
PYEOF
expect 0 "an export in the Hugging Face layout" "$TRAINER" --save-path hfsrc --steps 20 \
    --set last_save_in_hf=true "${Q[@]}"
expect 0 "a job started from those HF weights" "$TRAINER" --save-path hfjob --steps 25 \
    --set initial_load_in_hf=true --set initial_load_path=hfsrc/hf-iteration_00000020 "${Q[@]}"
has "$WORK/out" "initialised from Hugging Face weights hfsrc/hf-iteration_00000020" "an HF initial load says what it is"
lacks "$WORK/out" "step -1" "no 'step -1'"
lacks "$WORK/out" "resumed" "and it is not a resume"

# ---- inspect: common.json's own entries ----
cp -r gbs/iteration_00000100 six
"$PY" - <<PYEOF
import json, sys
sys.path.insert(0, "$SHS_SOURCE_DIR/tests/cli")
from reseal import reseal
p = "$WORK/six/common.json"
c = json.load(open(p))
del c["consumed_samples"]
c["loss_scale"] = "1.0"
open(p, "w").write(json.dumps(c))
reseal("$WORK/six")
PYEOF
expect 0 "inspect a step with MindSpore's six-key common.json" "$SHS_BIN" inspect six
has "$WORK/out" "common.json: 6 entries" "six entries counted, not seven"
has "$WORK/out" "(consumed_samples 3200 is not in the file: global_step x global_batch_size)" \
    "the derived value is shown as derived"
expect 0 "inspect a step with seven keys" "$SHS_BIN" inspect gbs/iteration_00000100
has "$WORK/out" "common.json: 7 entries" "seven when the file has seven"
lacks "$WORK/out" "not in the file" "nothing derived"
expect 0 "inspect --json" "$SHS_BIN" inspect --json six
py "--json: common_derived lists consumed_samples" <<PYEOF
import json
d = json.load(open("$WORK/out"))
assert d["common_derived"] == ["consumed_samples"] and len(d["common"]) == 7, d["common"]
PYEOF

# ---- no C identifier in a CLI message ----
: >"$WORK/all.err"
msgs() { run "$@"; cat "$WORK/err" "$WORK/out" >>"$WORK/all.err"; }
msgs "$SHS_BIN" merge gbs gbs
msgs "$SHS_BIN" merge --include 'zz*' gbs m1
msgs "$SHS_BIN" merge gbs ''
msgs "$SHS_BIN" merge '' m2
msgs "$SHS_BIN" merge --finish-parts gbs m3
msgs "$SHS_BIN" merge --dtype int8 gbs m4
msgs "$SHS_BIN" convert gbs m5
msgs "$SHS_BIN" reshard '' r1 --world-size 1
msgs "$SHS_BIN" reshard gbs '' --world-size 1
msgs "$SHS_BIN" reshard gbs r2 --world-size 0
msgs "$SHS_BIN" diff gbs ''
msgs "$SHS_BIN" diff '' gbs
msgs "$SHS_BIN" inspect ''
msgs "$SHS_BIN" verify ''
msgs "$SHS_BIN" ls ''
msgs "$SHS_BIN" prune -k 0 gbs
msgs "$TRAINER" --set strict_load=false
msgs "$TRAINER" --set export_dtype=int3
CHECKS=$((CHECKS + 1))
if grep -nE '\b(SHS_[A-Z_]+|shs_[a-z_]+)\b' "$WORK/all.err"; then
    fail "a C identifier in a CLI message (above)"
else
    pass "no C identifier in $(wc -l <"$WORK/all.err") lines of messages"
fi
has "$WORK/all.err" "gbs exists (a forced merge, --force, replaces it)" "merge names --force"
has "$WORK/all.err" "merge: SRC is an empty path" "an empty path is a usage error"
finish
