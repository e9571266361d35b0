# resume.sh -- the product demo as a test: the demo trainer killed with
# SIGKILL at random points and restarted with the same flags ends bitwise
# equal (final_digest, global_step) to an uninterrupted run.
#
#   A  uninterrupted: --steps 600 --save-interval 50 (sync, and once --async)
#   B  the same command killed -9 four times (the third run with --async),
#      each time a random delay after that run committed a save of its own,
#      then run to completion
#   C  weights only from A (--set no_load_optim=true --load-path A)
#   and --save-interval 0 is a usage error (exit 2).
#
# Environment: SHS_BUILD_DIR (the trainer is $SHS_BUILD_DIR/trainer),
# SHS_RESUME_SEED fixes the random delays (printed).
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }
TRK=latest_checkpointed_iteration.txt

PID=
cleanup() {
    if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

SEED=${SHS_RESUME_SEED:-$(( $(date +%s) % 32768 ))}
RANDOM=$SEED
echo "resume.sh: seed $SEED (SHS_RESUME_SEED=$SEED reproduces the delays)"

A="$WORK/A"; A2="$WORK/A2"; B="$WORK/B"; C="$WORK/C"
FLAGS=(--steps 600 --save-interval 50 --log-every 0)

value() { sed -n "s/^$1=//p" "$2" | tail -1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# ---------------------------------------------------------------- A
t0=$(now_ms)
expect 0 "uninterrupted run" "$TRAINER" "${FLAGS[@]}" --save-path "$A"
t1=$(now_ms)
cp "$WORK/out" "$WORK/A.out"
DIGEST=$(value final_digest "$WORK/A.out")
GSTEP=$(value global_step "$WORK/A.out")
has "$WORK/A.out" "starting from scratch" "the first run starts from scratch"
CHECKS=$((CHECKS + 1))
if [ -n "$DIGEST" ] && [ "$GSTEP" = 600 ]; then
    pass "uninterrupted: final_digest=$DIGEST global_step=$GSTEP"
else
    fail "uninterrupted run printed final_digest='$DIGEST' global_step='$GSTEP'"
    show_output
fi
# time of one save interval (50 steps): the scale of the random kill delays
INTERVAL_MS=$(( (t1 - t0) * 50 / 600 ))
[ "$INTERVAL_MS" -ge 4 ] || INTERVAL_MS=4
echo "one save interval takes about $INTERVAL_MS ms"

# async saving gives the same result
expect 0 "uninterrupted run with --async" "$TRAINER" "${FLAGS[@]}" --async --save-path "$A2"
CHECKS=$((CHECKS + 1))
if [ "$(value final_digest "$WORK/out")" = "$DIGEST" ] && [ "$(value global_step "$WORK/out")" = 600 ]; then
    pass "--async: same digest"
else
    fail "--async run: $(value final_digest "$WORK/out") / $(value global_step "$WORK/out"), expected $DIGEST / 600"
fi

# ---------------------------------------------------------------- B
# Kill round k: start the trainer in the background, wait until this run
# has committed a save of its own (the tracker changes; the first time:
# until it exists), sleep a random part of a save interval (the kill lands
# in training compute, in a save, or in retention), kill -9.  The next run
# must resume from exactly the step the tracker named at the kill.
KILLS=0
EXPECT_RESUME=
for k in 1 2 3 4; do
    extra=()
    [ "$k" = 3 ] && extra=(--async)
    before=$(cat "$B/$TRK" 2>/dev/null || echo none)
    "$TRAINER" "${FLAGS[@]}" "${extra[@]}" --save-path "$B" >"$WORK/B$k.out" 2>"$WORK/B$k.err" &
    PID=$!
    while kill -0 "$PID" 2>/dev/null; do
        cur=$(cat "$B/$TRK" 2>/dev/null || echo none)
        [ "$cur" != "$before" ] && break
        sleep 0.002
    done
    delay=$(( RANDOM % INTERVAL_MS + (k - 1) * INTERVAL_MS / 8 ))
    sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
    killed=0
    if kill -9 "$PID" 2>/dev/null; then killed=1; fi
    rc=0
    wait "$PID" 2>/dev/null || rc=$?
    PID=
    at=$(cat "$B/$TRK" 2>/dev/null || echo none)
    CHECKS=$((CHECKS + 1))
    if [ "$killed" = 1 ] && [ "$rc" = 137 ]; then
        KILLS=$((KILLS + 1))
        pass "run $k ${extra[*]}: killed -9 ${delay} ms after a commit; tracker names step $at"
    elif [ "$rc" = 0 ]; then
        # finished before the kill: possible on a very slow/fast machine
        pass "run $k ${extra[*]}: finished before the kill (no crash this round)"
    else
        fail "run $k ${extra[*]}: exit status $rc (killed=$killed)"
        sed 's/^/  | /' "$WORK/B$k.err" | head -20 >&2
    fi
    if [ -n "$EXPECT_RESUME" ]; then
        # a kill between a commit's rename and its tracker update leaves
        # the tracker behind: then the newer complete step is resumed
        # (and the run says so)
        if grep -q "note: .*the tracker was behind" "$WORK/B$k.out"; then
            CHECKS=$((CHECKS + 1))
            pass "run $k resumed from a step newer than the tracker's ($EXPECT_RESUME) and rewrote it"
        else
            has "$WORK/B$k.out" "resumed from $B/iteration_$(printf '%08d' "$EXPECT_RESUME") (step $EXPECT_RESUME)" \
                "run $k resumed from the step the tracker named ($EXPECT_RESUME)"
        fi
    fi
    if [ "$at" = none ]; then
        fail "run $k: no tracker after a commit was seen"
        EXPECT_RESUME=
    else
        EXPECT_RESUME=$at
        # what the next run will load is complete and valid
        expect 0 "step $at verifies after the kill" "$SHS_BIN" verify "$B/iteration_$(printf '%08d' "$at")"
    fi
done
CHECKS=$((CHECKS + 1))
if [ "$KILLS" -ge 3 ]; then
    pass "$KILLS of 4 runs were killed mid-training"
else
    fail "only $KILLS of 4 runs were killed mid-training (runs finish too fast?)"
fi

expect 0 "final run after the kills" "$TRAINER" "${FLAGS[@]}" --save-path "$B"
cp "$WORK/out" "$WORK/B.out"
has "$WORK/B.out" "resumed from" "the final run resumes"
if [ -n "$EXPECT_RESUME" ] && ! grep -q "note: .*the tracker was behind" "$WORK/B.out"; then
    has "$WORK/B.out" "(step $EXPECT_RESUME)" "the final run resumed from step $EXPECT_RESUME"
fi
CHECKS=$((CHECKS + 1))
BD=$(value final_digest "$WORK/B.out")
BG=$(value global_step "$WORK/B.out")
if [ "$BD" = "$DIGEST" ] && [ "$BG" = "$GSTEP" ]; then
    pass "killed and resumed: final_digest=$BD global_step=$BG, identical to the uninterrupted run"
else
    fail "killed and resumed: final_digest=$BD global_step=$BG, uninterrupted: $DIGEST / $GSTEP"
    for f in "$WORK"/B*.out; do sed "s|^|  $(basename "$f")| |" "$f" >&2; done
fi
CHECKS=$((CHECKS + 1))
left=$(cd "$B" && ls -A | grep -E '^\.(tmp|trash)-|\.tmp\.' || true)
if [ -z "$left" ]; then
    pass "no leftovers of the killed saves in the save path"
else
    fail "leftovers in the save path: $left"
fi
CHECKS=$((CHECKS + 1))
[ "$(cat "$B/$TRK")" = 600 ] && pass "tracker names step 600" || fail "tracker: $(cat "$B/$TRK")"

# ---------------------------------------------------------------- C
# Weights only from A.  Observed behaviour (documented here):
#   - the run loads A's newest step (600) and prints "initialised from
#     ... (saved at step 600, weights only): training starts at step 0"
#     (not "resumed"): with no_load_optim the optimizer state, common.json (progress)
#     and the rank-local blobs (rng, lr_scheduler, dataloader) are not
#     loaded, so the AdamW moments start from zero and the fp32 masters
#     (none registered by the demo) would be refreshed from the weights;
#   - global_step is not restored: training restarts at step 0 and runs the
#     full 650 steps from A's weights (the first logged step is 50), ending
#     at global_step=650 with a digest different from A's;
#   - with no --save-interval (default 1000) only the final save, step 650,
#     is written to C;
#   - the job's own progress wins over load_path: running the same command
#     again resumes from C's own step 650 with its optimizer state and
#     progress (no_load_optim applies to load_path only), so nothing is
#     retrained and the digest stays C's.
expect 0 "weights-only run from A" "$TRAINER" --set no_load_optim=true --load-path "$A" \
    --save-path "$C" --steps 650 --log-every 50
cp "$WORK/out" "$WORK/C.out"
has "$WORK/C.out" "initialised from $A/iteration_00000600 (saved at step 600, weights only): training starts at step 0" \
    "the weights-only run loads A's step 600, weights only, and says training starts over"
lacks "$WORK/C.out" "resumed from" "a weights-only start is not called a resume"
CHECKS=$((CHECKS + 1))
first=$(sed -n 's/^step \([0-9]*\) loss.*/\1/p' "$WORK/C.out" | head -1)
CD=$(value final_digest "$WORK/C.out")
CG=$(value global_step "$WORK/C.out")
if [ "$first" = 50 ] && [ "$CG" = 650 ] && [ -n "$CD" ] && [ "$CD" != "$DIGEST" ]; then
    pass "weights only: global_step restarts at 0 (first logged step $first), ends at $CG, digest $CD differs"
else
    fail "weights only: first logged step '$first', global_step '$CG', digest '$CD' (A: $DIGEST)"
fi
CHECKS=$((CHECKS + 1))
if [ "$(cat "$C/$TRK" 2>/dev/null)" = 650 ] && [ -d "$C/iteration_00000650" ]; then
    pass "C holds the final save, step 650"
else
    fail "C: tracker '$(cat "$C/$TRK" 2>/dev/null)', $(ls -A "$C" 2>/dev/null | tr '\n' ' ')"
fi
expect 0 "the same weights-only command again" "$TRAINER" --set no_load_optim=true \
    --load-path "$A" --save-path "$C" --steps 650 --log-every 0
has "$WORK/out" "resumed from $C/iteration_00000650 (step 650)" \
    "auto-resume from the save path wins over load_path"
has "$WORK/out" "final_digest=$CD" "the resumed run keeps C's digest"

# ---------------------------------------------------------------- usage
expect 2 "--save-interval 0 is rejected" "$TRAINER" "${FLAGS[@]}" --save-interval 0 \
    --save-path "$WORK/D"
has "$WORK/err" "save_interleaved_steps" "the message names save_interleaved_steps"
CHECKS=$((CHECKS + 1))
[ ! -e "$WORK/D" ] && pass "nothing written for the rejected command" || fail "$WORK/D was created"

finish
