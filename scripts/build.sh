#!/usr/bin/env bash
# Configure and build into a build directory: scripts/build.sh DIR [cmake args]
set -euo pipefail
dir=${1:-build}; shift || true
src=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$src" -B "$src/$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$src/$dir" -j"$(nproc)"
