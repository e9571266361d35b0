# progress.sh -- the progress line of convert, verify and diff: a single
# \r-updated line on stderr when it is a terminal, cleared at the end;
# never when stderr is a pipe or a file, never with -q.
. "$(dirname "$0")/lib.bash"

"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
# 24 MB: three 8 MiB chunks
mkst.write(f"{W}/big.safetensors", [mkst.entry("w", np.zeros(6_000_000, np.float32))])
mkst.write(f"{W}/big2.safetensors", [mkst.entry("w", np.zeros(6_000_000, np.float32))])
EOF
BIG="$WORK/big.safetensors"
BIG2="$WORK/big2.safetensors"

# stderr a pipe (or a file): no progress
for cmd in "verify $BIG" "convert $BIG $WORK/c.safetensors --dtype bf16" "diff $BIG $BIG2"; do
    CHECKS=$((CHECKS + 1))
    set +e
    $SHS_BIN $cmd 2>&1 >/dev/null | cat >"$WORK/err"
    set -e
    if grep -q $'\r' "$WORK/err" || grep -q "MiB of" "$WORK/err"; then
        fail "progress with stderr a pipe: ${cmd%% *}"; od -c "$WORK/err" | head >&2
    else
        pass "no progress with stderr a pipe: ${cmd%% *}"
    fi
done
rm -f "$WORK/c.safetensors"

command -v script >/dev/null || { echo "SKIP: script (util-linux) not found"; exit 77; }

# stderr a terminal: script(1) runs the command on a pseudo-terminal
term() {
    script -qec "$1" /dev/null </dev/null >"$WORK/tty.out" 2>&1
}
for cmd in "verify $BIG" "convert $BIG $WORK/c.safetensors --dtype bf16" "diff $BIG $BIG2"; do
    name=${cmd%% *}
    CHECKS=$((CHECKS + 1))
    set +e; term "$SHS_BIN $cmd"; RC=$?; set -e
    if [ "$RC" -eq 0 ] && "$PY" - "$WORK/tty.out" "$name" <<'EOF'
import re, sys
out = open(sys.argv[1], "rb").read().decode()
name = sys.argv[2]
# at least one update: "\r<name>: X MiB of 22.9 MiB (N%)"
ups = re.findall("\r" + name + r": [0-9.]+ [KMG]?i?B of [0-9.]+ MiB \(\d+%\)(?:, [0-9.]+ [KMG]?i?B/s)?", out)
assert ups, repr(out[:300])
# cleared: the last \r-line before the result is blanks only
i = out.rindex("\r" + name + ":")
rest = out[i + 1:]
j = rest.index("\r")
k = rest.index("\r", j + 1)
assert rest[j + 1:k].strip() == "" and len(rest[j + 1:k]) >= len(rest[:j]), repr(rest[:200])
assert "\n" not in rest[:k], "progress is a single line"
EOF
    then pass "$name: progress line on a terminal, cleared"
    else fail "$name: progress on a terminal (status $RC)"; od -c "$WORK/tty.out" | head -20 >&2
    fi
    rm -f "$WORK/c.safetensors"
    # -q: never
    CHECKS=$((CHECKS + 1))
    set +e; term "$SHS_BIN -q $cmd"; set -e
    if grep -q "MiB of" "$WORK/tty.out"; then fail "$name -q showed progress"; else pass "$name -q: no progress"; fi
    rm -f "$WORK/c.safetensors"
done

finish
