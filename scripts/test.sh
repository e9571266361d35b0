#!/usr/bin/env bash
# Install dependencies, build, and run the whole test suite twice: a normal
# build and an AddressSanitizer + UndefinedBehaviorSanitizer build.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
scripts/setup.sh

scripts/build.sh build -DSHS_WITH_MPI=ON
ctest --test-dir build --output-on-failure -j"$(nproc)"

scripts/build.sh build-asan -DSHS_SANITIZE=ON -DSHS_WITH_MPI=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)"
