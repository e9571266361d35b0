#!/usr/bin/env bash
# Install, build, and show shardsafe on a real multi-tensor file: write it,
# inspect it, verify it, convert it to bf16, and watch verify reject a
# damaged copy with a one-line reason.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
scripts/setup.sh >/dev/null
scripts/build.sh build >/dev/null
bin=build/shardsafe
work=$(mktemp -d "${TMPDIR:-/tmp}/shardsafe-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
run() { echo; echo "\$ $*"; "$@"; }

run build/demo_write "$work/model.safetensors"
run $bin inspect "$work/model.safetensors" --limit 8
run $bin verify "$work/model.safetensors"
run $bin convert "$work/model.safetensors" "$work/model-bf16.safetensors" --dtype bf16
run $bin inspect "$work/model-bf16.safetensors" --limit 4
run $bin verify "$work/model-bf16.safetensors"
head -c 5000 "$work/model.safetensors" > "$work/truncated.safetensors"
echo; echo "\$ $bin verify $work/truncated.safetensors   # damaged on purpose"
if $bin verify "$work/truncated.safetensors"; then
  echo "demo: verify accepted a truncated file" >&2; exit 1
fi
echo; echo "demo: done"
