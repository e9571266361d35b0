#!/usr/bin/env bash
# Install dependencies, build, and run the test suite: a normal build and an
# AddressSanitizer + UndefinedBehaviorSanitizer build run everything (warnings
# are errors in both); a ThreadSanitizer build runs the tests of the
# library's own threads (ctest label `threads`); GCC's -fanalyzer checks the
# library's sources; clang-format checks the house style.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
jobs=$(nproc)
scripts/setup.sh

echo "== house style (.clang-format)"
# Formatting is mechanical: any C file that clang-format would change fails.
if [[ -d .git ]]; then
  git ls-files -z '*.c' '*.h' | xargs -0 clang-format --dry-run --Werror
else
  find src cli include tests examples bench fuzz src_mpi -name '*.[ch]' -print0 |
    xargs -0 clang-format --dry-run --Werror
fi

echo "== normal build"
scripts/build.sh build -DSHS_WITH_MPI=ON -DSHS_WERROR=ON
ctest --test-dir build --output-on-failure -j"$jobs" --output-junit "$src/build/junit.xml"
/usr/bin/python3 scripts/check_skips.py build/junit.xml normal

echo "== AddressSanitizer + UndefinedBehaviorSanitizer"
scripts/build.sh build-asan -DSHS_SANITIZE=ON -DSHS_WITH_MPI=ON -DSHS_WERROR=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --output-junit "$src/build-asan/junit.xml"
/usr/bin/python3 scripts/check_skips.py build-asan/junit.xml asan

echo "== ThreadSanitizer: async save and threaded load (ctest -L threads)"
# Release (-O3): the optimiser's own warnings (-Wmaybe-uninitialized,
# -Wstringop-overflow, -Wformat-truncation) only show at -O3, and are errors too.
scripts/build.sh build-tsan -DSHS_TSAN=ON -DSHS_WITH_MPI=OFF -DSHS_WERROR=ON -DCMAKE_BUILD_TYPE=Release
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L threads --no-tests=error \
  --output-junit "$src/build-tsan/junit.xml"
/usr/bin/python3 scripts/check_skips.py build-tsan/junit.xml tsan

echo "== GCC -fanalyzer over the library"
# Any finding fails the suite (the library is clean today).
analyzer_fatal=1
cmake -S "$src" -B "$src/build-analyzer" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSHS_ANALYZER=ON -DSHS_WITH_MPI=OFF -DSHS_BUILD_TESTS=OFF >/dev/null
# --clean-first: every source is analysed on every run, not only changed ones
cmake --build "$src/build-analyzer" --target shardsafe_obj --clean-first -j"$jobs" \
  >"$src/build-analyzer/analyzer.log" 2>&1 || { cat "$src/build-analyzer/analyzer.log"; exit 1; }
findings=$(grep -E 'warning: .*\[-Wanalyzer-' "$src/build-analyzer/analyzer.log" | sort -u || true)
if [[ -n $findings ]]; then
  echo "$findings"
  n=$(wc -l <<<"$findings")
  echo "analyzer: $n finding(s); full report: build-analyzer/analyzer.log"
  if ((analyzer_fatal)); then
    exit 1
  fi
else
  echo "analyzer: no findings"
fi
echo "test.sh: all steps passed"
