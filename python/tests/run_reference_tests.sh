#!/usr/bin/env bash
# Run the reference `safetensors` package's own Python tests
# (bindings/python/tests) against shardsafe, through nothing more than
# module renames, and print the pass/fail counts per file.
#
#   run_reference_tests.sh SRC [REF] [-- PYTEST ARGS...]
#
# SRC is a checkout of https://github.com/huggingface/safetensors or its
# bare git directory; REF (git directory only, default HEAD) a tag or
# commit, e.g. v0.7.0.  The tests are copied to a temporary directory
# (nothing of them is kept), every `import safetensors...` /
# `from safetensors... import` line is rewritten to shardsafe, and pytest
# runs there (the tests write to ./tests/data and ./).  The tensorflow,
# flax/jax, paddle and mlx comparison files are not run: those frameworks
# are not bound here.  Tests for devices this machine lacks (CUDA, MPS,
# NPU, HPU) skip themselves.  docs/python.md lists the results and every
# test we consider wrong or not applicable.
#
# Environment: SHS_PYTHON (default /usr/bin/python3), PYTHONPATH (default
# <repo>/build/python, the module built by scripts/build.sh build).
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
src=$1
shift
ref=HEAD
if [ $# -gt 0 ] && [ "$1" != -- ]; then
  ref=$1
  shift
fi
[ "${1:-}" = -- ] && shift
PY=${SHS_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PYTHONPATH=${PYTHONPATH:-$repo/build/python}

work=$(mktemp -d "${TMPDIR:-/tmp}/shs-reftests.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tests"
if [ -d "$src/bindings/python/tests" ]; then
  cp -r "$src/bindings/python/tests/." "$work/tests/"
  label="$src (checkout)"
elif git --git-dir="$src" rev-parse --verify -q "$ref^{commit}" >/dev/null 2>&1; then
  git --git-dir="$src" archive "$ref" bindings/python/tests | tar -x -C "$work"
  cp -r "$work/bindings/python/tests/." "$work/tests/"
  rm -rf "$work/bindings"
  label="$src at $ref ($(git --git-dir="$src" rev-parse --short "$ref^{commit}"))"
else
  echo "run_reference_tests.sh: $src is neither a safetensors checkout nor a git directory with $ref" >&2
  exit 2
fi
not_run=(test_tf_comparison.py test_flax_comparison.py test_paddle_comparison.py
         test_mlx_comparison.py)
for f in "${not_run[@]}"; do rm -f "$work/tests/$f"; done
mkdir -p "$work/tests/data"
# import lines only: "safetensors" also appears in file names and messages
sed -i -E 's/^([[:space:]]*(from|import)[[:space:]]+)safetensors\b/\1shardsafe/' "$work"/tests/*.py

cd "$work"
set +e
"$PY" -m pytest -p no:cacheprovider -q -rA --continue-on-collection-errors tests "$@" >"$work/out.txt" 2>&1
rc=$?
set -e
cd "$work" && "$PY" - "$work/out.txt" "$label" "${not_run[*]}" <<'EOF'
import re, sys
from collections import defaultdict
out, label, not_run = sys.argv[1], sys.argv[2], sys.argv[3]
counts = defaultdict(lambda: defaultdict(int))
failed = []
for line in open(out, encoding="utf-8", errors="replace"):
    m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (?:\[\d+\] )?(tests/[^:\s]+)(::\S+)?", line)
    if not m:
        continue
    kind, path, test = m.group(1), m.group(2), m.group(3) or ""
    if kind == "ERROR" and not test:
        # the file did not import: each of its tests counts as an error
        n = len(re.findall(r"^\s*def test_", open(path).read(), re.M))
        counts[path][kind] += n
        failed.append(f"ERROR {path} (does not import: {n} tests)")
        continue
    counts[path][kind] += 1
    if kind in ("FAILED", "ERROR"):
        failed.append(f"{kind} {path}{test}")
print(f"reference tests: {label}")
print(f"{'file':34} {'passed':>6} {'failed':>6} {'error':>6} {'skipped':>7}")
tot = defaultdict(int)
for path in sorted(counts):
    c = counts[path]
    print(f"{path:34} {c['PASSED']:6} {c['FAILED']:6} {c['ERROR']:6} {c['SKIPPED']:7}")
    for k, v in c.items():
        tot[k] += v
run = tot["PASSED"] + tot["FAILED"] + tot["ERROR"]
pct = 100.0 * tot["PASSED"] / run if run else 0.0
print(f"{'total':34} {tot['PASSED']:6} {tot['FAILED']:6} {tot['ERROR']:6} {tot['SKIPPED']:7}"
      f"   ({tot['PASSED']}/{run} = {pct:.1f}% of the tests that ran)")
print(f"not run (frameworks not bound here): {not_run}")
for f in failed:
    print(f)
EOF
if [ -n "${SHS_REFTESTS_LOG:-}" ]; then cp "$work/out.txt" "$SHS_REFTESTS_LOG"; fi
exit $rc
