#!/usr/bin/env bash
# Install the built library into a temporary prefix, move the prefix (the
# installed files must not remember where they were installed), then build
# consumers against it: the base package with CMake (MPI disabled) and with
# pkg-config, and, when this build has the MPI backend, the mpi component
# with CMake and shardsafe-mpi.pc.  Every consumer must compile against the
# installed header, not the source tree's.
set -euo pipefail
: "${SHS_BUILD_DIR:?}" "${SHS_SOURCE_DIR:?}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shs-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
san=${SHS_SANITIZE_FLAGS:-}
fail() { echo "consumer: FAIL: $*" >&2; exit 1; }

# A staged install (DESTDIR) must not run ldconfig, even into /usr/local.
DESTDIR=$tmp/dest cmake --install "$SHS_BUILD_DIR" --prefix /usr/local >"$tmp/dest.log"
grep -q "ldconfig not run (DESTDIR is set)" "$tmp/dest.log" || fail "DESTDIR install: $(cat "$tmp/dest.log")"
[[ -f $tmp/dest/usr/local/include/shardsafe.h ]] || fail "DESTDIR install put no header in $tmp/dest"
rm -rf "$tmp/dest"

cmake --install "$SHS_BUILD_DIR" --prefix "$tmp/stage" >"$tmp/install.log"
grep -q "ldconfig not run (prefix" "$tmp/install.log" || fail "install: $(cat "$tmp/install.log")"
mkdir "$tmp/moved"
mv "$tmp/stage" "$tmp/moved/prefix"
P=$tmp/moved/prefix
libdir=$(dirname "$(find "$P" -name 'libshardsafe.so.*.*' | head -n1)")
pcdir=$libdir/pkgconfig

# No installed text file names the install place, the sources or the build.
# ($P lies inside the build tree: look for exact directories only.)
leaks=$(grep -rlF -e "$tmp/stage" -e "$SHS_SOURCE_DIR/include" -e "$SHS_SOURCE_DIR/src" \
          -e "$SHS_BUILD_DIR/lib" "$P/include" "$libdir/cmake" "$pcdir" || true)
[[ -z $leaks ]] || fail "installed files name build-time paths: $leaks"
# The base CMake package does not mention MPI; only its component does.
if grep -il mpi "$libdir"/cmake/shardsafe/shardsafeTargets*.cmake; then
  fail "the base CMake export set refers to MPI"
fi

# -H lists every header a compile reads: shardsafe.h must be the installed one.
check_header() { # LOG WHAT
  local got
  got=$(grep -E '^\.+ .*/shardsafe(_mpi)?\.h$' "$1" | sed 's/^\.* //' | sort -u)
  [[ -n $got ]] || fail "$2: no shardsafe header in the -H output"
  while read -r h; do
    [[ $(realpath "$h") == $(realpath "$P/include")/* ]] || fail "$2 compiled against $h"
  done <<<"$got"
}

# 1. CMake, base package, with find_package(MPI) made impossible.
cmake -S "$SHS_SOURCE_DIR/tests/consumer" -B "$tmp/build" \
  -DCMAKE_PREFIX_PATH="$P" -DSHS_EXPECT_PREFIX="$P" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
  -DCMAKE_C_FLAGS="-H $san" -DCMAKE_EXE_LINKER_FLAGS="$san" >"$tmp/cfg.log" 2>&1 \
  || { cat "$tmp/cfg.log" >&2; fail "cmake configure of the base consumer"; }
cmake --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; fail "build"; }
check_header "$tmp/build.log" "cmake consumer"
"$tmp/build/consumer" "$tmp/a.safetensors"
"$tmp/build/consumer_static" "$tmp/a2.safetensors"

# 2. pkg-config, base package: the prefix is found from the .pc file's place.
export PKG_CONFIG_PATH=$pcdir
[[ $(realpath "$(pkg-config --variable=prefix shardsafe)") == $(realpath "$P") ]] \
  || fail "shardsafe.pc: prefix $(pkg-config --variable=prefix shardsafe), installed at $P"
# shellcheck disable=SC2046
cc -std=c11 -H -o "$tmp/pc" "$SHS_SOURCE_DIR/tests/consumer/main.c" \
  $(pkg-config --cflags shardsafe) $(pkg-config --libs shardsafe) \
  -Wl,-rpath,"$(pkg-config --variable=libdir shardsafe)" $san 2>"$tmp/pc.log" \
  || { cat "$tmp/pc.log" >&2; fail "pkg-config consumer"; }
check_header "$tmp/pc.log" "pkg-config consumer"
"$tmp/pc" "$tmp/b.safetensors"

# The installed CLI finds the moved library through its RPATH.
env -u LD_LIBRARY_PATH "$P/bin/shardsafe" --version | grep -q "shardsafe" \
  || fail "installed CLI does not run from the moved prefix"

# Only the API is exported from the shared libraries.
for lib in "$libdir"/libshardsafe.so.*.* "$libdir"/libshardsafe_mpi.so.*.*; do
  [[ -e $lib ]] || continue
  bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDB]/ {print $3}' | grep -v '^shs_' | grep -v '^_' || true)
  internal=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep '^shs__' || true)
  [[ -z "$bad$internal" ]] || fail "$(basename "$lib") exports $bad $internal"
done

# Components: an unknown one fails with a clear message.
if cmake -S "$SHS_SOURCE_DIR/tests/consumer/mpi" -B "$tmp/build-bad" -DSHS_COMPONENT=nosuch \
     -DCMAKE_PREFIX_PATH="$P" >"$tmp/bad.log" 2>&1; then
  fail "find_package(shardsafe COMPONENTS nosuch) succeeded"
fi
grep -q "component 'nosuch': no such component" "$tmp/bad.log" || { cat "$tmp/bad.log" >&2; fail "message"; }

if [[ ! -e $pcdir/shardsafe-mpi.pc ]]; then
  # an MPI backend that was built but not installed is a failure, not a
  # build without MPI (CI builds with -DSHS_WITH_MPI=ON)
  if compgen -G "$SHS_BUILD_DIR/libshardsafe_mpi.so*" >/dev/null ||
     grep -q '^SHS_WITH_MPI:STRING=ON$' "$SHS_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
    fail "this build has the MPI backend, but the install has no shardsafe-mpi.pc"
  fi
  # built without MPI: asking for the component says so
  if cmake -S "$SHS_SOURCE_DIR/tests/consumer/mpi" -B "$tmp/build-mpi" \
       -DCMAKE_PREFIX_PATH="$P" >"$tmp/mpi.log" 2>&1; then
    fail "find_package(shardsafe COMPONENTS mpi) succeeded in a build without MPI"
  fi
  grep -q "built without MPI" "$tmp/mpi.log" || { cat "$tmp/mpi.log" >&2; fail "message"; }
  echo "consumer: cmake, static and pkg-config builds OK (no MPI backend in this build)"
  exit 0
fi

# 3. The MPI backend: CMake component and shardsafe-mpi.pc, run on 2 ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
cmake -S "$SHS_SOURCE_DIR/tests/consumer/mpi" -B "$tmp/build-mpi" \
  -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_FLAGS="-H $san" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" >"$tmp/cfg-mpi.log" 2>&1 \
  || { cat "$tmp/cfg-mpi.log" >&2; fail "cmake configure of the mpi consumer"; }
cmake --build "$tmp/build-mpi" >"$tmp/build-mpi.log" 2>&1 || { cat "$tmp/build-mpi.log" >&2; fail "build"; }
check_header "$tmp/build-mpi.log" "cmake mpi consumer"
mpirun -np 2 --oversubscribe "$tmp/build-mpi/mpi_consumer" "$tmp/mpi-ckpt"

# shellcheck disable=SC2046
cc -std=c11 -H -o "$tmp/pc-mpi" "$SHS_SOURCE_DIR/tests/consumer/mpi/main.c" \
  $(pkg-config --cflags shardsafe-mpi) $(pkg-config --libs shardsafe-mpi) \
  -Wl,-rpath,"$(pkg-config --variable=libdir shardsafe-mpi)" $san 2>"$tmp/pc-mpi.log" \
  || { cat "$tmp/pc-mpi.log" >&2; fail "pkg-config mpi consumer"; }
check_header "$tmp/pc-mpi.log" "pkg-config mpi consumer"
mpirun -np 2 --oversubscribe "$tmp/pc-mpi" "$tmp/mpi-ckpt-pc"
echo "consumer: cmake, static, pkg-config and MPI (cmake + pkg-config) builds OK"
