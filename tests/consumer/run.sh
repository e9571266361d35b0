#!/usr/bin/env bash
# Install the built library into a temporary prefix, then build a consumer
# against it twice: with CMake find_package, and with pkg-config.
set -euo pipefail
: "${SHS_BUILD_DIR:?}" "${SHS_SOURCE_DIR:?}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shs-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$SHS_BUILD_DIR" --prefix "$tmp/prefix" >/dev/null
cmake -S "$SHS_SOURCE_DIR/tests/consumer" -B "$tmp/build" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_FLAGS="${SHS_SANITIZE_FLAGS:-}" \
  -DCMAKE_EXE_LINKER_FLAGS="${SHS_SANITIZE_FLAGS:-}" >/dev/null
cmake --build "$tmp/build" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib/x86_64-linux-gnu" \
  "$tmp/build/consumer" "$tmp/a.safetensors"
export PKG_CONFIG_PATH="$(dirname "$(find "$tmp/prefix" -name shardsafe.pc)")"
# shellcheck disable=SC2046
cc -std=c11 -o "$tmp/pc" "$SHS_SOURCE_DIR/tests/consumer/main.c" \
  $(pkg-config --define-prefix --cflags shardsafe) $(pkg-config --define-prefix --static --libs shardsafe) \
  -Wl,-rpath,"$(pkg-config --define-prefix --variable=libdir shardsafe)" ${SHS_SANITIZE_FLAGS:-}
"$tmp/pc" "$tmp/b.safetensors"
# only the API is exported from the shared library
lib=$(find "$tmp/prefix" -name 'libshardsafe.so.*.*' | head -n1)
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDB]/ {print $3}' | grep -v '^shs_' | grep -v '^_' || true)
internal=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep '^shs__' || true)
if [[ -n "$bad$internal" ]]; then
  echo "unexpected exported symbols: $bad $internal" >&2; exit 1
fi
# the MPI backend, when this build has it
if find "$tmp/prefix" -name 'libshardsafe_mpi.so*' | grep -q .; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
  cmake -S "$SHS_SOURCE_DIR/tests/consumer/mpi" -B "$tmp/build-mpi" \
    -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_FLAGS="${SHS_SANITIZE_FLAGS:-}" \
    -DCMAKE_EXE_LINKER_FLAGS="${SHS_SANITIZE_FLAGS:-}" >/dev/null
  cmake --build "$tmp/build-mpi" >/dev/null
  LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib/x86_64-linux-gnu" \
    mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH "$tmp/build-mpi/mpi_consumer" "$tmp/mpi-ckpt"
fi
echo "consumer: cmake and pkg-config builds OK"
