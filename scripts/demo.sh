#!/usr/bin/env bash
# Install, build, and show shardsafe at work:
#  1. the demo trainer trains a tiny language model uninterrupted;
#  2. the same run is killed with SIGKILL in the middle of training,
#     restarted with the same command, and ends bitwise identical;
#  3. the CLI inspects and verifies what was saved.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
scripts/setup.sh >/dev/null
scripts/build.sh build >/dev/null
bin=build/shardsafe
work=$(mktemp -d "${TMPDIR:-/tmp}/shardsafe-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
steps=1500
args=(--steps $steps --save-interval 100 --log-every 500)

echo "== 1. uninterrupted run"
build/trainer "${args[@]}" --save-path "$work/ref" | tee "$work/ref.log"
want=$(grep final_digest= "$work/ref.log")

echo; echo "== 2. the same run, killed with SIGKILL mid-training, then restarted"
build/trainer "${args[@]}" --save-path "$work/run" > "$work/run1.log" 2>&1 &
pid=$!
until [[ -s "$work/run/latest_checkpointed_iteration.txt" ]]; do sleep 0.01; done
sleep 0.2
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
echo "killed at: $(tail -n1 "$work/run1.log" 2>/dev/null); last committed step: $(cat "$work/run/latest_checkpointed_iteration.txt")"
build/trainer "${args[@]}" --save-path "$work/run" | tee "$work/run2.log"
got=$(grep final_digest= "$work/run2.log")
if [[ "$got" != "$want" ]]; then
  echo "demo: resumed run differs: $got vs $want" >&2; exit 1
fi
echo "resumed run is bitwise identical: $got"

echo; echo "== 3. what is on disk"
echo "\$ shardsafe ls $work/run"; $bin ls "$work/run" 2>/dev/null || ls -l "$work/run"
last=$(cat "$work/run/latest_checkpointed_iteration.txt")
dir=$(printf '%s/run/iteration_%08d' "$work" "$last")
echo "\$ shardsafe inspect $dir/checkpoint-model-0000000-0000001.safetensors"
$bin inspect "$dir/checkpoint-model-0000000-0000001.safetensors"
echo "\$ shardsafe verify $dir"
$bin verify "$dir"
echo; echo "demo: done"
