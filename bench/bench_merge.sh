#!/usr/bin/env bash
# bench_merge.sh -- `shardsafe merge` of a 4-rank checkpoint against dd of
# the same bytes, in the same run; peak RSS; --jobs 2 against --jobs 1.
#
#   bench/bench_merge.sh [TARGET_DIR] [MIB]     (defaults: $TMPDIR or /tmp, 2048)
#
# Builds Release into build-bench/ (targets shardsafe_cli, bench_merge_gen),
# saves a checkpoint of MIB MiB with 4 ranks (bench_merge_gen: 16 F32
# tensors [rows, 4096] split unevenly over the ranks + one replicated,
# remove_redundancy on), then, warm cache, best of REPS (default 3):
#   dd      the 4 rank files copied with dd bs=16M (read + write of the
#           same bytes: the physical limit of a copy);
#   merge   shardsafe merge STEP OUT --jobs 1 and --jobs 2 (one 5 GB-limit
#           output file; every chunk checksummed);
# output to the page cache in both (no fsync), removed and `sync`ed
# between runs.  Targets: merge >= 0.7x dd; peak RSS <= largest tensor +
# 64 MiB; --jobs 2 faster than --jobs 1.  Prints a markdown section;
# BENCH_APPEND=1 also appends it to bench/results.md (else paste it into
# section 13 by hand: one section, not one per run).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
target=${1:-${TMPDIR:-/tmp}}
mib=${2:-2048}
reps=${REPS:-3}
build="$src/build-bench"
dir=$(mktemp -d "$target/shardsafe-bench-merge.XXXXXX")
trap 'rm -rf "$dir"' EXIT
{ cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSHS_BUILD_TESTS=OFF -DSHS_WITH_MPI=OFF &&
    cmake --build "$build" --target shardsafe_cli bench_merge_gen -j"$(nproc)"; } >"$dir.build.log" 2>&1 ||
    { cat "$dir.build.log" >&2; rm -f "$dir.build.log"; exit 1; }
rm -f "$dir.build.log"
load0=$(cut -d' ' -f1-3 /proc/loadavg)

"$build/bench_merge_gen" "$dir/ckpt" "$mib" >&2
step=$(ls -d "$dir"/ckpt/iteration_*)
files=("$step"/*.safetensors)
bytes=$(stat -c %s "${files[@]}" | awk '{s += $1} END {print s}')
cat "${files[@]}" >/dev/null # warm cache

# run CMD...: wall seconds, CPU seconds (user + system) and max RSS (KiB)
# of one run -> $T $C $M
run() {
    rm -rf "$dir/out" "$dir/dd"
    sync
    local f="$dir/time.txt" u s
    /usr/bin/time -f "%e %U %S %M" -o "$f" "$@" >/dev/null
    read -r T u s M <"$f"
    C=$(awk -v u="$u" -v s="$s" 'BEGIN {print u + s}')
}
min() { awk -v a="$1" -v b="$2" 'BEGIN {print (b < a ? b : a)}'; }
best_dd=9e9 best_1=9e9 best_2=9e9 cpu_dd=9e9 cpu_1=9e9 cpu_2=9e9 rss_1=0 rss_2=0
for r in $(seq "$reps"); do
    run bash -c 'mkdir -p "$0/dd" && for f in "$@"; do dd if="$f" of="$0/dd/${f##*/}" bs=16M status=none; done' "$dir" "${files[@]}"
    best_dd=$(min "$best_dd" "$T") cpu_dd=$(min "$cpu_dd" "$C")
    echo "rep $r: dd $T s (cpu $C s)" >&2
    for j in 1 2; do
        run "$build/shardsafe" merge -q "$step" "$dir/out" --jobs $j
        echo "rep $r: merge --jobs $j $T s (cpu $C s, $M KiB)" >&2
        if [ $j = 1 ]; then
            best_1=$(min "$best_1" "$T") cpu_1=$(min "$cpu_1" "$C") rss_1=$((M > rss_1 ? M : rss_1))
        else
            best_2=$(min "$best_2" "$T") cpu_2=$(min "$cpu_2" "$C") rss_2=$((M > rss_2 ? M : rss_2))
        fi
    done
done
# the merged file really holds the checkpoint's tensors
rm -rf "$dir/out"
"$build/shardsafe" merge -q "$step" "$dir/out"
"$build/shardsafe" diff -q "$step" "$dir/out" || { echo "merged output differs from the checkpoint" >&2; exit 1; }
largest=$((mib * 1024 * 1024 / 16))
load1=$(cut -d' ' -f1-3 /proc/loadavg)

report=$(awk -v bytes="$bytes" -v dd="$best_dd" -v j1="$best_1" -v j2="$best_2" \
    -v cd="$cpu_dd" -v c1="$cpu_1" -v c2="$cpu_2" \
    -v r1="$rss_1" -v r2="$rss_2" -v largest="$largest" -v mib="$mib" 'BEGIN {
    gb = bytes / 1e9
    printf "| what | wall, best of runs | GB/s | ratio to dd | CPU s (user + sys), best |\n|---|---|---|---|---|\n"
    printf "| dd bs=16M of the 4 rank files (%.2f GB) | %.3f s | %.2f | 1.00 | %.2f |\n", gb, dd, gb / dd, cd
    printf "| shardsafe merge --jobs 1 | %.3f s | %.2f | %.2f | %.2f |\n", j1, gb / j1, dd / j1, c1
    printf "| shardsafe merge --jobs 2 | %.3f s | %.2f | %.2f | %.2f |\n", j2, gb / j2, dd / j2, c2
    printf "\n--jobs 2 / --jobs 1 speed: %.2fx. Peak RSS (max over runs): --jobs 1 %.1f MiB, --jobs 2 %.1f MiB; largest tensor %.0f MiB, target <= %.0f MiB.\n",
        j1 / j2, r1 / 1024, r2 / 1024, largest / 1048576, largest / 1048576 + 64
}')
{
    echo
    echo "## merge (bench/bench_merge.sh)"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $load0 at start, $load1 at end."
    echo "Command: \`bench/bench_merge.sh ${1:-} $mib\` (REPS=$reps). Input: $mib MiB checkpoint saved by 4 ranks"
    echo "(bench_merge_gen, remove_redundancy), output one model.safetensors, warm cache, no fsync."
    echo
    echo "$report"
} | if [ "${BENCH_APPEND:-0}" = 1 ]; then tee -a "$src/bench/results.md"; else cat; fi
