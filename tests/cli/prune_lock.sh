# prune_lock.sh -- `shardsafe prune` holds the save path's lock: it refuses,
# naming the holder, while a trainer saves there, and works once the
# trainer is gone.  --dry-run removes nothing, takes no lock and warns.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }

SP="$WORK/save"
"$TRAINER" --steps 30 --save-path "$SP" --save-interval 10 --log-every 0 >"$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log" >&2; exit 1; }
NSTEPS=$(ls -d "$SP"/iteration_* | wc -l)
[ "$NSTEPS" -ge 3 ] || { echo "trainer wrote only $NSTEPS steps" >&2; exit 1; }
# a second run resuming on the same save path, saving for a long time
"$TRAINER" --steps 100000000 --save-path "$SP" --load-path "$SP" --save-interval 1000000 \
    --log-every 0 >"$WORK/train2.log" 2>&1 &
TPID=$!
stop_trainer() {
    if [ -n "${TPID:-}" ]; then
        kill "$TPID" 2>/dev/null || true
        wait "$TPID" 2>/dev/null || true
        TPID=
    fi
}
trap 'stop_trainer; rm -rf "$WORK"' EXIT
# the lock file names the holder once the lock is taken; no time limit
# beyond the trainer dying
until grep -qx "pid $TPID" "$SP/.shardsafe.lock" 2>/dev/null; do
    kill -0 "$TPID" 2>/dev/null || { cat "$WORK/train2.log" >&2; echo "trainer exited" >&2; exit 1; }
    sleep 0.1
done
# what a save in progress looks like: prune must not take it for a leftover
mkdir "$SP/.tmp-iteration_00000099-x"

expect 1 "prune refuses while a trainer holds the lock" "$SHS_BIN" prune "$SP" --keep 1
has "$WORK/err" "pid $TPID" "the refusal names the holder's pid"
has "$WORK/err" "nothing pruned" "the refusal says nothing was pruned"
[ "$(ls -d "$SP"/iteration_* | wc -l)" -eq "$NSTEPS" ] && [ -d "$SP/.tmp-iteration_00000099-x" ] &&
    pass "nothing removed while locked" || fail "prune removed something while locked"
expect 1 "prune --json refuses too" "$SHS_BIN" prune "$SP" --keep 1 --json
has "$WORK/err" "pid $TPID" "the --json refusal names the holder"

expect 0 "prune --dry-run works beside the trainer" "$SHS_BIN" prune "$SP" --keep 1 --dry-run
has "$WORK/err" "locked by pid $TPID" "--dry-run warns that the lock is held"
has "$WORK/out" "would remove" "--dry-run lists what a prune would remove"
[ "$(ls -d "$SP"/iteration_* | wc -l)" -eq "$NSTEPS" ] && pass "--dry-run removed nothing" ||
    fail "--dry-run removed a step"

stop_trainer
expect 0 "prune works once the trainer is gone" "$SHS_BIN" prune "$SP" --keep 1
lacks "$WORK/err" "locked" "no lock warning after the trainer is gone"
[ "$(ls -d "$SP"/iteration_* | wc -l)" -eq 1 ] && [ ! -e "$SP/.tmp-iteration_00000099-x" ] &&
    pass "prune kept one step and removed the leftover" || fail "after prune: $(ls -A "$SP")"
expect 0 "prune --dry-run without a holder" "$SHS_BIN" prune "$SP" --keep 1 --dry-run
lacks "$WORK/err" "locked" "no lock warning without a holder"

finish
