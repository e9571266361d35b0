#!/usr/bin/env bash
# Install, build, and show shardsafe at work:
#  0. Debian packages (scripts/setup.sh) and the build, with its progress;
#  1. the demo trainer trains a tiny language model uninterrupted;
#  2. the same run is killed with SIGKILL in the middle of training,
#     restarted with the same command, and ends bitwise identical;
#  3. the CLI inspects and verifies what was saved.
# Environment: SHS_DEMO_SKIP_SETUP=1 skips step 0's packages;
# SHS_DEMO_BUILD_DIR builds (cmake --build) and runs an existing build
# directory instead of ./build; SHS_DEMO_STEPS (default 1500).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
work=$(mktemp -d "${TMPDIR:-/tmp}/shardsafe-demo.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT

echo "== 0. setup and build"
if [ -z "${SHS_DEMO_SKIP_SETUP:-}" ]; then
  echo "setup: Debian packages (scripts/setup.sh) ..."
  scripts/setup.sh >"$work/setup.log" 2>&1 || {
    tail -n 30 "$work/setup.log" >&2; echo "demo: scripts/setup.sh failed" >&2; exit 1; }
  echo "setup: done"
fi
dir=${SHS_DEMO_BUILD_DIR:-$src/build}
echo "build: $dir (a first build takes a few minutes on two cores)"
# cmake's "[ 45%] ..." lines, once per percent; the whole log on failure
progress() {
  tee "$work/build.log" | awk '
    match($0, /^\[ *[0-9]+%\]/) {
      p = substr($0, RSTART + 1, RLENGTH - 3) + 0
      if (p != last) { printf "build: %3d%% %s\n", p, substr($0, RLENGTH + 2); fflush(); last = p }
    }'
}
if [ -n "${SHS_DEMO_BUILD_DIR:-}" ]; then
  build=(cmake --build "$dir" -j"$(nproc)")
else
  build=(scripts/build.sh build)
fi
if ! "${build[@]}" 2>&1 | progress; then
  tail -n 40 "$work/build.log" >&2
  echo "demo: the build failed (above)" >&2
  exit 1
fi
echo "build: done"
bin=$dir/shardsafe
trainer=$dir/trainer
steps=${SHS_DEMO_STEPS:-1500}
args=(--steps "$steps" --save-interval 100 --log-every 500)

echo; echo "== 1. uninterrupted run"
"$trainer" "${args[@]}" --save-path "$work/ref" | tee "$work/ref.log"
want=$(grep final_digest= "$work/ref.log")

echo; echo "== 2. the same run, killed with SIGKILL mid-training, then restarted"
"$trainer" "${args[@]}" --save-path "$work/run" > "$work/run1.log" 2>&1 &
pid=$!
until [[ -s "$work/run/latest_checkpointed_iteration.txt" ]] || ! kill -0 "$pid" 2>/dev/null; do
  sleep 0.01
done
sleep 0.2
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
pid=
echo "killed at: $(tail -n1 "$work/run1.log" 2>/dev/null); last committed step: $(cat "$work/run/latest_checkpointed_iteration.txt")"
"$trainer" "${args[@]}" --save-path "$work/run" | tee "$work/run2.log"
got=$(grep final_digest= "$work/run2.log")
if [[ "$got" != "$want" ]]; then
  echo "demo: resumed run differs: $got vs $want" >&2; exit 1
fi
echo "resumed run is bitwise identical: $got"

echo; echo "== 3. what is on disk"
echo "\$ shardsafe ls $work/run"; "$bin" ls "$work/run" 2>/dev/null || ls -l "$work/run"
last=$(cat "$work/run/latest_checkpointed_iteration.txt")
step_dir=$(printf '%s/run/iteration_%08d' "$work" "$last")
echo "\$ shardsafe inspect $step_dir/checkpoint-model-0000000-0000001.safetensors"
"$bin" inspect "$step_dir/checkpoint-model-0000000-0000001.safetensors"
echo "\$ shardsafe verify $step_dir"
"$bin" verify "$step_dir"
echo; echo "demo: done"
