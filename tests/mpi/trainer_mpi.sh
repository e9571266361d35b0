#!/usr/bin/env bash
# trainer_mpi (tensor x data parallel demo trainer) under mpirun:
#  1. uninterrupted 4-rank run (TP2 x DP2)                       -> digest D
#  2. the same run killed with SIGKILL after its first commit, then
#     restarted with the same command                            -> D (bitwise)
#  3. the step-300 checkpoint loaded on 2 ranks (TP2 x DP1), 3 ranks
#     (TP3 x DP1, uneven hidden split) and 3 ranks (TP1 x DP3), final save
#     only: digest D, and every global tensor of the new save equal to the
#     original's (assembled from the chunks of both step directories)
#  4. resume on 3 ranks and train 50 more steps: rank-local state is not
#     restored (world size changed), the run trains on deterministically.
set -euo pipefail
: "${SHS_BUILD_DIR:?}"
SHS_SOURCE_DIR=${SHS_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
exe=$SHS_BUILD_DIR/trainer_mpi
py=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
work=$(mktemp -d "${TMPDIR:-/tmp}/shs-trainer-mpi.XXXXXX")
pgid= sid=
cleanup() {
  if [[ -n $sid ]]; then kill -9 -- "-$pgid" $(ps -o pid= -s "$sid" 2>/dev/null) 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
SECONDS=0
fail() { echo "FAIL: $*" >&2; [[ -f $work/out ]] && cat "$work/out" >&2; exit 1; }
run() { # run NP OUT ARGS...: mpirun into OUT, fail on error
  local np=$1 out=$2
  shift 2
  mpirun -np "$np" --oversubscribe "$exe" "$@" > "$out" 2>&1 ||
    { cp "$out" "$work/out"; fail "mpirun -np $np trainer_mpi $*"; }
}
digest() { sed -n 's/^final_digest=//p' "$1"; }
gstep() { sed -n 's/^global_step=//p' "$1"; }

# Compare the global tensors of two step directories: every tensor's array
# assembled from its chunks (replicas must agree, every element covered).
compare() { "$py" "$SHS_SOURCE_DIR/tests/mpi/compare_ckpt.py" "$@"; }

common=(--steps 300 --save-interval 50 --log-every 100)

# 1. uninterrupted
run 4 "$work/a.out" "${common[@]}" --save-path "$work/A"
D=$(digest "$work/a.out")
[[ -n $D && $(gstep "$work/a.out") == 300 ]] || { cp "$work/a.out" "$work/out"; fail "run A"; }
grep -q "world 4 = tp 2 x dp 2" "$work/a.out" || { cp "$work/a.out" "$work/out"; fail "topology"; }
echo "ok: uninterrupted 4 ranks (tp2 x dp2): final_digest=$D (${SECONDS}s)"

# 2. killed with SIGKILL after the first commit, then restarted
TRAINER_MPI_STEP_DELAY_MS=10 setsid mpirun -np 4 --oversubscribe -x TRAINER_MPI_STEP_DELAY_MS \
  "$exe" "${common[@]}" --save-path "$work/B" > "$work/b1.out" 2>&1 &
mpid=$!
pgid=$(ps -o pgid= -p "$mpid" | tr -d ' ')
sid=$(ps -o sid= -p "$mpid" | tr -d ' ')
for _ in $(seq 600); do
  [[ -e $work/B/latest_checkpointed_iteration.txt ]] && break
  kill -0 "$mpid" 2>/dev/null || break
  sleep 0.05
done
[[ -e $work/B/latest_checkpointed_iteration.txt ]] || { cp "$work/b1.out" "$work/out"; fail "no commit before exit"; }
sleep 0.3 # into the next interval, possibly mid-save
# SIGKILL the whole job at once.  Open MPI 4.1 puts every rank in its own
# process group, so `kill -9 -- -PGID` alone kills only mpirun and the
# orphaned ranks train on and commit further steps: kill by session.
kill -9 -- "-$pgid" $(ps -o pid= -s "$sid" 2>/dev/null) 2>/dev/null || true
wait "$mpid" 2>/dev/null || true
for _ in $(seq 100); do
  left=$(ps -o pid= -s "$sid" 2>/dev/null | tr -d ' ' || true)
  [[ -z $left ]] && break
  kill -9 $left 2>/dev/null || true
  sleep 0.05
done
[[ -z $left ]] || fail "ranks of the killed job survive: $left"
pgid= sid=
grep -q '^final_digest=' "$work/b1.out" && fail "the killed run finished before the kill"
killed_at=$(cat "$work/B/latest_checkpointed_iteration.txt")
run 4 "$work/b2.out" "${common[@]}" --save-path "$work/B"
grep -q "resumed from .*iteration_0*$killed_at (step $killed_at)" "$work/b2.out" ||
  { cp "$work/b2.out" "$work/out"; fail "restart did not resume from step $killed_at"; }
grep -q "not restored" "$work/b2.out" && { cp "$work/b2.out" "$work/out"; fail "rank state not restored on the same world size"; }
[[ $(digest "$work/b2.out") == "$D" ]] ||
  { cp "$work/b2.out" "$work/out"; fail "killed at step $killed_at + resumed: $(digest "$work/b2.out") != $D"; }
echo "ok: killed after step $killed_at committed, resumed: final_digest=$D (${SECONDS}s)"

# 3. reshard on load: 2 ranks, 3 ranks with tp 3, 3 ranks with tp 1
stepA=$work/A/iteration_00000300
for cfg in "2 2" "3 3" "3 1"; do
  read -r np tp <<< "$cfg"
  C=$work/C-$np-$tp
  run "$np" "$work/c.out" --steps 300 --tp "$tp" --load-path "$work/A" --save-path "$C"
  grep -q "rank-local state not restored: world size changed; RNG re-derived from step 300" "$work/c.out" ||
    { cp "$work/c.out" "$work/out"; fail "np=$np: no 'not restored' message"; }
  [[ $(gstep "$work/c.out") == 300 ]] || { cp "$work/c.out" "$work/out"; fail "np=$np: global_step"; }
  [[ $(digest "$work/c.out") == "$D" ]] ||
    { cp "$work/c.out" "$work/out"; fail "np=$np tp=$tp: digest $(digest "$work/c.out") != $D"; }
  [[ -f $C/iteration_00000300/metadata.json ]] || { cp "$work/c.out" "$work/out"; fail "np=$np: no final save"; }
  compare "$stepA" "$C/iteration_00000300" > "$work/cmp" 2>&1 || { cp "$work/cmp" "$work/out"; fail "np=$np tp=$tp: saved tensors differ"; }
  "$SHS_BUILD_DIR/shardsafe" diff "$stepA" "$C/iteration_00000300" > "$work/diff" 2>&1 ||
    { cp "$work/diff" "$work/out"; fail "np=$np tp=$tp: shardsafe diff finds differences"; }
  echo "ok: 4 -> $np ranks (tp$tp x dp$((np / tp))): same digest, $(cat "$work/cmp") (${SECONDS}s)"
done

# 4. resume on 3 ranks (default tp 1 x dp 3) and train on, twice: deterministic
for i in 1 2; do
  run 3 "$work/e$i.out" --steps 350 --save-interval 50 --load-path "$work/A" --save-path "$work/E$i"
  grep -q "rank-local state not restored: world size changed; RNG re-derived from step 300" "$work/e$i.out" ||
    { cp "$work/e$i.out" "$work/out"; fail "3 ranks: no 'not restored' message"; }
  [[ $(gstep "$work/e$i.out") == 350 ]] || { cp "$work/e$i.out" "$work/out"; fail "3 ranks: global_step"; }
done
[[ $(digest "$work/e1.out") == $(digest "$work/e2.out") ]] || fail "resharded resume is not deterministic"
[[ $(digest "$work/e1.out") != "$D" ]] || fail "no training after the resharded resume"
echo "ok: 4 -> 3 ranks, trained to step 350: final_digest=$(digest "$work/e1.out") (${SECONDS}s)"
echo "trainer_mpi: all checks passed in ${SECONDS}s"
