#!/usr/bin/env bash
# bench/crash_soak.sh [ITERATIONS [CHUNK]] -- the long mode of the kill -9
# crash test (tests/test_crash.c): builds test_crash in a Release build
# directory and runs ITERATIONS (default 1000) kill/reopen/verify
# iterations, in runs of CHUNK (default 100) iterations with their own
# seeds, so one failure does not end the soak.  Prints the iterations run
# and the failures (with the seed, iteration and log of each); exits 1 if
# any run failed.
#
# Environment: SHS_SOAK_BUILD_DIR (default build-soak/ in the source tree),
# TMPDIR (where the save paths go; each run removes its own unless it
# failed), SHS_CRASH_SEED (seed of the first run; the next ones add 1).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SHS_SOAK_BUILD_DIR:-$ROOT/build-soak}
ITERS=${1:-1000}
CHUNK=${2:-100}
case "$ITERS$CHUNK" in *[!0-9]*) echo "usage: crash_soak.sh [ITERATIONS [CHUNK]]" >&2; exit 2 ;; esac
[ "$CHUNK" -gt 0 ] || CHUNK=100

log() { printf '== %s\n' "$*" >&2; }

log "building test_crash (Release) in $BUILD"
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$BUILD/soak-cmake.log" 2>&1 ||
    { cat "$BUILD/soak-cmake.log" >&2; exit 1; }
cmake --build "$BUILD" --target test_crash -j "$(nproc)" >"$BUILD/soak-cmake.log" 2>&1 ||
    { cat "$BUILD/soak-cmake.log" >&2; exit 1; }
BIN=$BUILD/tests/test_crash
LOGDIR=$BUILD/crash-soak-logs
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR"

seed=${SHS_CRASH_SEED:-$(( ($(date +%s) << 8) ^ $$ ))}
done_iters=0
failures=0
runs=0
failed_runs=()
t0=$(date +%s)
while [ "$done_iters" -lt "$ITERS" ]; do
    n=$(( ITERS - done_iters < CHUNK ? ITERS - done_iters : CHUNK ))
    runs=$((runs + 1))
    out=$LOGDIR/run$runs.log
    rc=0
    SHS_CRASH_ITERS=$n SHS_CRASH_SEED=$seed "$BIN" >"$out" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then
        done_iters=$((done_iters + n))
        summary=$(sed -n 's/^crash test: \([0-9]* iterations in [0-9.]* s\): \([0-9]*\) saves.*/\1, \2 saves committed/p' "$out")
        log "run $runs (seed $seed): ok, $summary"
    else
        failures=$((failures + 1))
        at=$(sed -n 's/^CRASH TEST FAILURE (seed [0-9]*, iteration \([0-9]*\)).*/\1/p' "$out" | head -1)
        # a failed run stops at the failing iteration
        if [ -n "$at" ]; then done_iters=$((done_iters + at + 1)); else done_iters=$((done_iters + n)); fi
        failed_runs+=("run $runs: seed $seed, iteration ${at:-?} (log: $out)")
        log "run $runs (seed $seed): FAILED at iteration ${at:-?}, exit $rc"
        grep -E 'CRASH TEST FAILURE|last error|save path' "$out" | head -5 >&2 || tail -20 "$out" >&2
    fi
    seed=$((seed + 1))
done
t1=$(date +%s)

echo "crash soak: $done_iters iterations in $runs runs, $((t1 - t0)) s, $failures failure(s)"
for f in "${failed_runs[@]+"${failed_runs[@]}"}"; do
    echo "  $f"
done
echo "reproduce one run: SHS_CRASH_ITERS=$CHUNK SHS_CRASH_SEED=<seed> $BIN"
[ "$failures" -eq 0 ]
