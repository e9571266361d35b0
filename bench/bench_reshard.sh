#!/usr/bin/env bash
# bench/bench_reshard.sh [DIR] [MIB] -- `shardsafe reshard` of a checkpoint
# saved by 4 ranks (bench_read's: 8 F32 tensors split by rows, MIB of
# tensor data, default 1024) to 2 ranks (--world-size 2, the saved layout
# scaled) and to 3 ranks (a layout file), against copying the same step
# directory file by file with `dd bs=4M` in the same run (the same bytes
# read and written through user space, no checksum, no resplit; `cp` would
# use copy_file_range and move no bytes through memory); no fsync for
# either.  Peak RSS of each reshard (GNU time).  Builds Release
# in build-bench/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-${TMPDIR:-/tmp}}
MIB=${2:-1024}
cmake -S "$ROOT" -B "$ROOT/build-bench" -DCMAKE_BUILD_TYPE=Release -DSHS_BUILD_TESTS=OFF >/dev/null
cmake --build "$ROOT/build-bench" --target shardsafe_cli bench_read -j"$(nproc)" >/dev/null
B="$ROOT/build-bench/shardsafe"
work=$(mktemp -d "$DIR/shs-reshard-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$ROOT/build-bench/bench_read" "$work" "$MIB" >/dev/null
src=$(ls -d "$work"/read4/iteration_*)
cat >"$work/three.json" <<'EOF'
{"world_size": 3, "tensors": {"*": {"split_dim": 0}}}
EOF
now() { date +%s.%N; }
best_cp=1e9 best2=1e9 best3=1e9
for rep in 1 2 3; do
    rm -rf "$work/cp" "$work/two" "$work/three"
    mkdir "$work/cp"
    t0=$(now)
    for f in "$src"/*; do dd if="$f" of="$work/cp/${f##*/}" bs=4M status=none; done
    t1=$(now)
    rss2=$(/usr/bin/time -f %M "$B" reshard "$src" "$work/two" --world-size 2 --no-fsync -q 2>&1 | tail -n1)
    t2=$(now)
    rss3=$(/usr/bin/time -f %M "$B" reshard "$src" "$work/three" --layout "$work/three.json" --no-fsync -q 2>&1 | tail -n1)
    t3=$(now)
    read -r best_cp best2 best3 < <(python3 -c "
print(min($best_cp, $t1 - $t0), min($best2, $t2 - $t1), min($best3, $t3 - $t2))")
done
bytes=$(du -sb "$src" | cut -f1)
python3 - "$bytes" "$best_cp" "$best2" "$best3" "$rss2" "$rss3" <<'EOF'
import sys
b, cp, t2, t3, r2, r3 = int(sys.argv[1]), *map(float, sys.argv[2:5]), int(sys.argv[5]), int(sys.argv[6])
gb = b / 1e9
print(f"step directory {b / 2**20:.0f} MiB (4 ranks); best of 3, no fsync")
print(f"dd bs=4M of every file:    {cp:.3f} s  {gb / cp:.2f} GB/s")
print(f"reshard 4 -> 2 (scaled):   {t2:.3f} s  {gb / t2:.2f} GB/s  ratio to dd {cp / t2:.2f}  peak RSS {r2 / 1024:.0f} MiB")
print(f"reshard 4 -> 3 (layout):   {t3:.3f} s  {gb / t3:.2f} GB/s  ratio to dd {cp / t3:.2f}  peak RSS {r3 / 1024:.0f} MiB")
EOF
