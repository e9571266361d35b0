#!/usr/bin/env bash
# The README's "Checkpoints" example is real: its C snippet, wrapped in a
# main() with the few names it leaves to the reader, compiles against the
# public header, links the shared library, trains, saves, and resumes.
set -euo pipefail
. "$(dirname "$0")/lib.bash"

cc=${CC:-cc}
# the first ```c block after "## Checkpoints"
awk '/^## Checkpoints/{on=1} on&&/^```c$/{grab=1; next} grab&&/^```$/{exit} grab{print}' \
    "$SHS_SOURCE_DIR/README.md" | sed "s|\"/ckpt\"|\"$WORK/ckpt\"|" >"$WORK/snippet.c"
if ! grep -q shs_manager_create "$WORK/snippet.c"; then
    fail "README snippet not found"
    finish
fi
{
    cat <<'PRE'
#include <shardsafe.h>
#include <stdio.h>
#include <string.h>
static uint64_t shape[2] = { 4, 3 };
static float weights[12], exp_avg[12];
static uint64_t rng = 42;
static const int64_t total_steps = 5;
static void train_one_step(void)
{
    for (int i = 0; i < 12; i++) {
        weights[i] += 0.5f;
        exp_avg[i] += 0.25f;
    }
    rng = rng * 6364136223846793005ull + 1;
}
int main(void)
{
PRE
    cat "$WORK/snippet.c"
    echo '    printf("global_step=%lld w0=%g rng=%llu\n", (long long)p.global_step, weights[0],'
    echo '           (unsigned long long)rng);'
    echo '    return 0;'
    echo '}'
} >"$WORK/readme.c"
printf 'checkpoint:\n  save_interleaved_steps: 2\n' >"$WORK/train.yaml"

expect 0 "the README snippet compiles with the public header only" \
    "$cc" -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -I "$SHS_SOURCE_DIR/include" \
    "$WORK/readme.c" -o "$WORK/readme" -L "$SHS_BUILD_DIR" -lshardsafe \
    -Wl,-rpath,"$SHS_BUILD_DIR" ${SHS_SANITIZE_FLAGS:-}
cd "$WORK"
expect 0 "it trains and saves" ./readme
has "$WORK/out" "global_step=5 w0=2.5" "five steps trained"
RNG=$(sed -n 's/.* rng=//p' "$WORK/out")
CHECKS=$((CHECKS + 1))
[ -n "$RNG" ] && [ "$RNG" != 42 ] && pass "the RNG advanced ($RNG)" || fail "rng '$RNG'"
expect 0 "the save path verifies" "$SHS_BIN" verify "$WORK/ckpt"
expect 0 "its tracker names the final step" test "$(cat "$WORK/ckpt/latest_checkpointed_iteration.txt")" = 5
expect 0 "run again: it resumes instead of training again" ./readme
has "$WORK/out" "global_step=5 w0=2.5" "the resumed weights are the saved ones"
has "$WORK/out" "rng=$RNG" "the resumed RNG is the saved one (the README restores it)"
finish
