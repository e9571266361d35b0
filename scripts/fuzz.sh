#!/usr/bin/env bash
# fuzz.sh -- build the libFuzzer targets with clang and run one of them.
#
#   scripts/fuzz.sh [SECONDS] [TARGET] [-- extra libFuzzer flags]
#
# SECONDS defaults to 60, TARGET to "header" (fuzz/fuzz_header.c with the
# seeds in fuzz/corpus/header/).  The seeds are copied to a scratch corpus
# (build-fuzz/corpus-TARGET) so the committed corpus only changes when you
# decide to add a find.  Environment:
#   BUILD_DIR        build directory            (default: <repo>/build-fuzz)
#   JOBS             parallel fuzzing processes (default: 1; >1 uses
#                    -fork=JOBS -ignore_crashes=1, so it runs the full time)
#   MAX_LEN          libFuzzer -max_len         (default: 16384)
#   SHS_FUZZ_EXTRA_FLAGS  extra compile flags, e.g. -fno-sanitize=nonnull-attribute
set -euo pipefail

secs=${1:-60}
target=${2:-header}
shift $(( $# > 2 ? 2 : $# ))
[[ ${1:-} == -- ]] && shift

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-fuzz}
jobs=${JOBS:-1}
max_len=${MAX_LEN:-16384}
seeds=$root/fuzz/corpus/$target
work=$build/corpus-$target
artifacts=$build/artifacts-$target

if ! command -v clang >/dev/null 2>&1 ||
   ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    echo "fuzz.sh: installing clang and libFuzzer" >&2
    sudo_cmd=""
    [[ $(id -u) -ne 0 ]] && sudo_cmd=sudo
    $sudo_cmd apt-get install -y clang libclang-rt-14-dev
fi

cmake -S "$root" -B "$build" -DSHS_FUZZ=ON -DCMAKE_C_COMPILER=clang \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DSHS_FUZZ_EXTRA_FLAGS=${SHS_FUZZ_EXTRA_FLAGS:-}" >/dev/null
cmake --build "$build" --target "fuzz_$target" -j"$(nproc)" >/dev/null

mkdir -p "$work" "$artifacts"
cp -n "$seeds"/* "$work"/ 2>/dev/null || true

echo "fuzz.sh: running fuzz_$target for ${secs}s (corpus $work)"
# A dictionary of the header's tokens, so mutations speak safetensors JSON,
# plus fuzz/TARGET.dict when the target has one.
dict=$build/$target.dict
{
    for tok in '{' '}' '[' ']' ':' ',' '"' '\\' '\\u' '\\ud83d\\ude00' \
               '\\u0000' 'null' 'true' 'false' '-' '.' 'e+' '1e2' '0' \
               '18446744073709551615' '18446744073709551616' '4294967296' \
               '"__metadata__"' '"dtype"' '"shape"' '"data_offsets"' \
               '"format":"pt"' '[0,0]' '[]' ' ' '\x0a' '\xef\xbb\xbf' '\xc3\xa9'; do
        printf '"%s"\n' "${tok//\"/\\\"}"
    done
    for dt in BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 \
              F8_E4M3FNUZ F8_E5M2FNUZ I16 U16 F16 BF16 I32 U32 F32 C64 F64 \
              I64 U64; do
        printf '"\\"%s\\""\n' "$dt"
    done
    # the target's own tokens (fuzz/TARGET.dict), if it has any
    if [[ -f $root/fuzz/$target.dict ]]; then
        grep -v '^#' "$root/fuzz/$target.dict"
    fi
} > "$dict"

# Several processes: fork mode, which keeps going after a crash (each find
# is still written to the artifacts directory).
par=()
(( jobs > 1 )) && par=(-fork="$jobs" -ignore_crashes=1)
set +e
(cd "$artifacts" && "$build/fuzz/fuzz_$target" "$work" \
    -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" -dict="$dict" \
    "${par[@]}" "$@")
rc=$?
set -e

finds=$(ls "$artifacts" 2>/dev/null | grep -E '^(crash|leak|timeout|oom|slow-unit)-' || true)
if [[ -n $finds ]]; then
    echo
    echo "fuzz.sh: FINDINGS in $artifacts:"
    for f in $finds; do echo "  $artifacts/$f"; done
    echo
    echo "Reproduce one:    $build/fuzz/fuzz_$target <file>"
    echo "Or under gcc:     build/tests/replay_fuzz_$target <file>"
fi
cat <<MSG

To add finds to the committed seeds (after the bug is fixed), minimise and
copy them in, then run the replay test:
  $build/fuzz/fuzz_$target -minimize_crash=1 -runs=10000 <crash-file>
  cp <minimised-file> $seeds/<descriptive-name>
  ctest --test-dir build -L fuzz
To fold new coverage from the scratch corpus back into the seeds:
  mkdir /tmp/merged && $build/fuzz/fuzz_$target -merge=1 /tmp/merged $seeds $work
  (review, keep files small, copy the useful ones into $seeds)
MSG
exit $rc
