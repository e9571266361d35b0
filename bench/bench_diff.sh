#!/usr/bin/env bash
# bench/bench_diff.sh SHARDSAFE A B WORKDIR -- `shardsafe diff --full A B`
# throughput and peak RSS, against `cmp` of two identical files of A's
# bytes (the same byte count per side, read and compared as fast as the
# kernel and memcmp allow).  A and B hold the same values saved with
# different chunkings (bench_read's read4 and read3), so diff must read and
# reassemble everything; it must also say "identical" (exit 0).
#
# Warm page cache (one untimed run of each first), then best of 3,
# interleaved.  Wall time from date(1), peak RSS and CPU time from
# /usr/bin/time.  Prints human lines and "@@" lines (mode "diff") for
# bench/report.py; the speed is computed there from bench_read's
# state_bytes (bytes per side / time).
set -euo pipefail
SHS=$1 A=$2 B=$3 WORK=$4
REPS=3

# One timed run: prints "wall_s maxrss_kib cpu_s exit".
timed() {
    local t0 t1 out rc=0
    t0=$(date +%s.%N)
    out=$(/usr/bin/time -f '%M %U %S' "$@" 2>&1 >/dev/null) || rc=$?
    t1=$(date +%s.%N)
    out=$(printf '%s\n' "$out" | tail -n1)
    awk -v a="$t0" -v b="$t1" -v o="$out" -v rc="$rc" 'BEGIN {
        split(o, f, " "); printf "%.4f %d %.4f %d\n", b - a, f[1], f[2] + f[3], rc }'
}

emit() { # key value unit label
    printf '@@ {"mode":"diff","key":"%s","value":%s,"unit":"%s","label":"%s"}\n' "$@"
}

# The baseline's files: A's data files end to end, and a copy.
step_a=$(dirname "$(find "$A" -name metadata.json | head -n1)")
cat "$step_a"/*.safetensors >"$WORK/cmp_a.bin"
cp "$WORK/cmp_a.bin" "$WORK/cmp_b.bin"
cmp_bytes=$(stat -c %s "$WORK/cmp_a.bin")

"$SHS" diff --full "$A" "$B" >/dev/null || { echo "bench_diff: diff of $A and $B did not say identical" >&2; exit 1; }
cmp "$WORK/cmp_a.bin" "$WORK/cmp_b.bin"

best_d="" best_c="" rss_d=0 rss_c=0 cpu_d="" cpu_c=""
for _ in $(seq $REPS); do
    read -r t m c rc < <(timed "$SHS" diff --full "$A" "$B")
    [ "$rc" = 0 ] || { echo "bench_diff: diff exit $rc" >&2; exit 1; }
    echo "diff --full: $t s, peak RSS $((m / 1024)) MiB, CPU $c s"
    if [ -z "$best_d" ] || awk -v a="$t" -v b="$best_d" 'BEGIN { exit !(a < b) }'; then best_d=$t; fi
    if [ -z "$cpu_d" ] || awk -v a="$c" -v b="$cpu_d" 'BEGIN { exit !(a < b) }'; then cpu_d=$c; fi
    [ "$m" -gt "$rss_d" ] && rss_d=$m
    read -r t m c rc < <(timed cmp "$WORK/cmp_a.bin" "$WORK/cmp_b.bin")
    [ "$rc" = 0 ] || { echo "bench_diff: cmp exit $rc" >&2; exit 1; }
    echo "cmp baseline: $t s, peak RSS $((m / 1024)) MiB, CPU $c s"
    if [ -z "$best_c" ] || awk -v a="$t" -v b="$best_c" 'BEGIN { exit !(a < b) }'; then best_c=$t; fi
    if [ -z "$cpu_c" ] || awk -v a="$c" -v b="$cpu_c" 'BEGIN { exit !(a < b) }'; then cpu_c=$c; fi
    [ "$m" -gt "$rss_c" ] && rss_c=$m
done
rm -f "$WORK/cmp_a.bin" "$WORK/cmp_b.bin"

echo "shardsafe diff --full $A $B: best $best_d s (CPU $cpu_d s), peak RSS $((rss_d / 1024)) MiB;" \
     "cmp of two $cmp_bytes-byte files: best $best_c s, peak RSS $((rss_c / 1024)) MiB"
emit diff_s "$best_d" s "shardsafe diff --full, best of $REPS"
emit diff_cpu_s "$cpu_d" s "CPU time (user + system), best"
emit diff_rss "$(awk -v m="$rss_d" 'BEGIN { printf "%.1f", m / 1024 }')" MiB "peak RSS, max of the runs"
emit cmp_s "$best_c" s "cmp of two identical files of A's bytes, best of $REPS"
emit cmp_cpu_s "$cpu_c" s "CPU time of cmp, best"
emit cmp_rss "$(awk -v m="$rss_c" 'BEGIN { printf "%.1f", m / 1024 }')" MiB "peak RSS of cmp"
emit cmp_bytes "$cmp_bytes" B "bytes per side for cmp"
