#!/usr/bin/env bash
# Seed checkpoint flow (torchtitan's create_seed_checkpoint): one process
# writes the initialised model as step 0; a 4-rank TP x DP job starts from
# it (initial_load_path, resharded); its step-0 save holds exactly the
# seed's weights; it then trains on.
set -euo pipefail
: "${SHS_BUILD_DIR:?}" "${SHS_SOURCE_DIR:?}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
work=$(mktemp -d "${TMPDIR:-/tmp}/shs-seed.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$work/out" >&2 2>/dev/null || true; exit 1; }

"$SHS_BUILD_DIR/trainer" --set create_seed_checkpoint=true --save-path "$work/seed" \
  > "$work/out" 2>&1 || fail "seed"
grep -q "seed checkpoint written" "$work/out" || fail "no seed message"
[[ $(cat "$work/seed/latest_checkpointed_iteration.txt") == 0 ]] || fail "seed step"
ls "$work/seed/iteration_00000000" | grep -q -- '-opt-' && fail "seed holds optimizer state"

# a seed is made on one process only
if mpirun -np 2 --oversubscribe "$SHS_BUILD_DIR/trainer_mpi" --set create_seed_checkpoint=true \
     --save-path "$work/seed2" > "$work/out" 2>&1; then
  fail "create_seed_checkpoint accepted on 2 ranks"
fi
grep -q "create_seed_checkpoint runs on one process" "$work/out" || fail "no clear error"

mpirun -np 4 --oversubscribe "$SHS_BUILD_DIR/trainer_mpi" --set initial_load_path="$work/seed" \
  --save-path "$work/run" --steps 0 --log-every 0 > "$work/out" 2>&1 || fail "load seed on 4 ranks"
grep -q "weights only" "$work/out" || fail "seed not loaded"
/usr/bin/python3 "$SHS_SOURCE_DIR/tests/mpi/compare_ckpt.py" "$work/seed/iteration_00000000" \
  "$work/run/iteration_00000000" model > "$work/out" 2>&1 || fail "seed weights changed on 4 ranks"
echo "ok: $(cat "$work/out")"

mpirun -np 4 --oversubscribe "$SHS_BUILD_DIR/trainer_mpi" --set initial_load_path="$work/seed" \
  --save-path "$work/run2" --steps 60 --save-interval 30 --log-every 0 > "$work/out" 2>&1 ||
  fail "train from the seed"
grep -q "^global_step=60" "$work/out" || fail "did not train to 60"
echo "seed: all checks passed"
