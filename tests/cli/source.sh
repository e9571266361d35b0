# source.sh -- one reading of what is at a path, through the CLI: inspect
# of a save path, a step's metadata.json handed to a command is named as
# such, a re-save's parked copy is its step for verify, ls and prune (and
# is restored, not "removed"), and inspect, verify and ls count the files
# of a step the same way.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
SP="$WORK/save"
"$TRAINER" --steps 60 --save-path "$SP" --save-interval 20 --log-every 0 >"$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log" >&2; exit 1; }
S60="$SP/iteration_00000060"

# ---- inspect SAVE_PATH: its latest step, as verify and ls read it ----
expect 0 "inspect a save path" "$SHS_BIN" inspect "$SP"
has "$WORK/out" "save path:" "the save path is named"
has "$WORK/out" "$S60" "its latest step is shown"
has "$WORK/out" "step:       60" "step 60"
expect 0 "inspect --json a save path" "$SHS_BIN" inspect --json "$SP"
py "inspect --json of a save path: the step's path and file count" <<EOF
import json, os
d = json.load(open("$WORK/out"))
assert d["path"] == "$S60" and d["step"] == 60, d["path"]
n = sum(len(f) for _, _, f in os.walk("$S60"))
assert d["file_count"] == n, (d["file_count"], n)
EOF

# ---- file counts agree: inspect, verify, ls ----
expect 0 "inspect a step" "$SHS_BIN" inspect "$S60"
INSPECT_FILES=$(sed -n 's/^files: *\([0-9]*\) .*/\1/p' "$WORK/out")
expect 0 "verify a step" "$SHS_BIN" verify "$S60"
VERIFY_FILES=$(sed -n 's/.*, \([0-9]*\) files,.*/\1/p' "$WORK/out")
expect 0 "ls" "$SHS_BIN" ls --json "$SP"
LS_FILES=$(/usr/bin/python3 -c "import json; d=json.load(open('$WORK/out')); print([s['file_count'] for s in d['steps'] if s['step']==60][0])")
CHECKS=$((CHECKS + 1))
if [ -n "$INSPECT_FILES" ] && [ "$INSPECT_FILES" = "$VERIFY_FILES" ] && [ "$VERIFY_FILES" = "$LS_FILES" ]; then
    pass "inspect, verify and ls count $LS_FILES files"
else
    fail "file counts differ: inspect '$INSPECT_FILES' verify '$VERIFY_FILES' ls '$LS_FILES'"
fi

# ---- the wrong kind of file is named ----
expect 1 "inspect a step's metadata.json" "$SHS_BIN" inspect "$S60/metadata.json"
has "$WORK/err" "is the metadata.json of the step directory $S60" "names what it is"
has "$WORK/err" "shardsafe inspect $S60" "and what to give instead"
expect 1 "verify the tracker" "$SHS_BIN" verify "$SP/latest_checkpointed_iteration.txt"
has "$WORK/err" "of the save path $SP" "the tracker is named as the save path's"

# ---- a parked copy is its step ----
P="$WORK/parked"
cp -a "$SP" "$P"
mv "$P/iteration_00000060" "$P/.replaced-iteration_00000060-0123456789abcdef"
expect 0 "verify a save path whose latest step is parked" "$SHS_BIN" verify "$P"
lacks "$WORK/out" "FAILED" "nothing failed"
expect 0 "ls shows the parked step" "$SHS_BIN" ls "$P"
has "$WORK/out" "parked" "status parked"
has "$WORK/out" ".replaced-iteration_00000060-0123456789abcdef  latest" "it is the latest"
expect 0 "prune keeps and restores it" "$SHS_BIN" prune "$P" --keep 2
has "$WORK/out" "restored .replaced-iteration_00000060-0123456789abcdef as iteration_00000060" "restored, said so"
lacks "$WORK/out" "removed leftover .replaced" "not called a removed leftover"
CHECKS=$((CHECKS + 1))
if [ -d "$P/iteration_00000060" ] && [ ! -e "$P/.replaced-iteration_00000060-0123456789abcdef" ]; then
    pass "iteration_00000060 is back"
else
    fail "the parked step was not restored"; ls -la "$P" >&2
fi
expect 0 "the restored save path verifies" "$SHS_BIN" verify "$P"

finish
