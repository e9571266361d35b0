#!/usr/bin/env bash
# Distributed checkpoints under mpirun: N ranks save, M ranks load with
# another layout, for N, M in 1..4; one rank failing its writes commits
# nothing and every rank names it.
set -euo pipefail
: "${SHS_BUILD_DIR:?}"
drv=$SHS_BUILD_DIR/mpi_ckpt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI's own allocations are not ours to report
export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
work=$(mktemp -d "${TMPDIR:-/tmp}/shs-mpi.XXXXXX")
trap 'rm -rf "$work"' EXIT
run() { mpirun -np "$1" --oversubscribe "${@:2}" > "$work/out" 2>&1; }
fail() { echo "FAIL: $*" >&2; cat "$work/out" >&2; exit 1; }

layouts=(rows cols grid replicated)
step=0
for n in 1 2 3 4; do
  for m in 1 2 3 4; do
    save_layout=${layouts[$(( (n + m) % 4 ))]}
    load_layout=${layouts[$(( (n * m + 1) % 4 ))]}
    step=$((step + 1))
    sp=$work/sp-$n-$m
    run "$n" "$drv" save "$sp" $step "$save_layout" || fail "save np=$n $save_layout"
    [[ $(cat "$sp/latest_checkpointed_iteration.txt") == "$step" ]] || fail "tracker np=$n"
    run "$m" "$drv" load "$sp" "$load_layout" || fail "load $n->$m $save_layout->$load_layout"
    [[ $(grep -c "0 wrong values" "$work/out") == "$m" ]] || fail "values $n->$m"
    if [[ $n == "$m" ]]; then
      grep -q "rank state restored" "$work/out" || fail "rank state not restored $n->$m"
    else
      grep -q "rank state not restored" "$work/out" || fail "rank state restored across $n->$m"
    fi
    echo "ok: $n ranks ($save_layout) -> $m ranks ($load_layout)"
  done
done

# replicated tensors saved by every rank: loaded once, files per rank
sp=$work/redundant
run 4 "$drv" save "$sp" 9 replicated || fail "replicated save"
run 2 "$drv" load "$sp" rows || fail "replicated load"
echo "ok: replicated 4 -> 2"

# remove_redundancy: every replicated tensor written by exactly one rank,
# and a second save with the same layout reuses the cached plan (one gather
# for the metadata instead of two)
sp=$work/dedup
run 4 "$drv" save "$sp" 3 replicated --remove-redundancy || fail "dedup save"
[[ $(grep -c "gathers 2 then 1" "$work/out") == 4 ]] || fail "layout cache not used"
state=$(grep -o "of [0-9]* bytes" "$work/out" | awk '{s += $2} END {print s}')
# w (240) + exp_avg (240) + b (56): unique bytes, written once in total
[[ $state == 536 ]] || fail "replicas written more than once ($state bytes)"
files=$(ls "$sp/iteration_00000004" | grep -c -- '-model-\|-opt-')
[[ $files -le 3 ]] || fail "replicated tensors written by every rank ($files files)"
run 3 "$drv" load "$sp" grid || fail "dedup load"
[[ $(grep -c "0 wrong values" "$work/out") == 3 ]] || fail "dedup values"
echo "ok: remove_redundancy writes each replica once; layout cache reused"

# load_balanced: every saved byte needed is read from storage exactly once
# over all ranks (w 240 + exp_avg 240 + b 56 = 536), the rest travels by
# messages; without it the replicated "b" is read by every rank
for m in 2 3 4; do
  sp=$work/sp-4-$m
  run "$m" "$drv" load "$sp" cols --balanced || fail "balanced load 4->$m"
  [[ $(grep -c "0 wrong values" "$work/out") == "$m" ]] || fail "balanced values 4->$m"
  total=$(grep -o "read [0-9]* bytes" "$work/out" | awk '{s += $2} END {print s}')
  [[ $total == 536 ]] || fail "balanced load 4->$m read $total bytes, not 536"
  run "$m" "$drv" load "$sp" cols || fail "plain load 4->$m"
  total=$(grep -o "read [0-9]* bytes" "$work/out" | awk '{s += $2} END {print s}')
  [[ $total -gt 536 ]] || fail "plain load 4->$m read only $total bytes"
  echo "ok: load_balanced 4 -> $m reads every byte once"
done

# damaged or mismatching checkpoints: every rank fails with a message
# naming the tensor or the file (plain and balanced loads)
sp=$work/damaged
run 4 "$drv" save "$sp" 5 rows || fail "save for damage tests"
step=$sp/iteration_00000005
SHS_BAD_SHAPE=1 run 3 -x SHS_BAD_SHAPE "$drv" load "$sp" cols && fail "mis-shaped load succeeded"
[[ $(grep -c "load failed: .*tensor 'w'.*\[10,7\].*\[10,6\]" "$work/out") == 3 ]] ||
  fail "shape mismatch not named on every rank"
cp -a "$sp" "$work/uncovered"
/usr/bin/python3 - "$work/uncovered/iteration_00000005/metadata.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["tensors"]["w"]["chunks"].pop(1)      # rows of rank 1 are no longer covered
json.dump(m, open(sys.argv[1], "w"))
PY
for flag in "" --balanced; do
  run 3 "$drv" load "$work/uncovered" cols $flag && fail "uncovered load succeeded $flag"
  [[ $(grep -c "load failed: .*'w'.*cover\|load failed: .*tensor .*not covered" "$work/out") == 3 ]] ||
    fail "uncovered box not reported on every rank $flag"
done
rm "$step/checkpoint-model-0000002-0000004.safetensors"
for flag in "" --balanced; do
  run 2 "$drv" load "$sp" rows $flag && fail "load with a missing file succeeded $flag"
  [[ $(grep -c "load failed: .*checkpoint-model-0000002-0000004.safetensors" "$work/out") == 2 ]] ||
    fail "missing rank file not named on every rank $flag"
done
echo "ok: mis-shaped, uncovered and missing-file checkpoints fail clearly on every rank"

# one rank fails: no commit anywhere, every rank names it
sp=$work/failing
run 3 "$drv" save "$sp" 1 rows || fail "first save"
if SHS_FAIL_RANK=1 run 3 -x SHS_FAIL_RANK "$drv" save "$sp" 2 rows; then
  fail "a save with a failing rank succeeded"
fi
[[ $(grep -c "save failed: rank 1: " "$work/out") == 3 ]] || fail "not every rank named rank 1"
grep -q "No space left" "$work/out" || fail "the cause is not reported"
[[ $(cat "$sp/latest_checkpointed_iteration.txt") == 1 ]] || fail "tracker moved"
[[ ! -e "$sp/iteration_00000002" ]] || fail "step 2 committed"
ls -A "$sp" | grep -q '^\.tmp-' && fail "temporary directory left behind"
run 2 "$drv" load "$sp" cols || fail "step 1 no longer loads"
echo "ok: a failing rank commits nothing"
echo "mpi: all checks passed"
