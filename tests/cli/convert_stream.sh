# convert_stream.sh -- `convert IN -` writes the file to stdout; Ctrl-C
# (SIGINT) in the middle of a conversion leaves no OUT and no temporary
# file, and the process dies of SIGINT (status 130).
. "$(dirname "$0")/lib.bash"

"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
mkst.write(f"{W}/a.safetensors", [mkst.entry("w", np.linspace(-3, 3, 1000, dtype=np.float32)),
                                  mkst.entry("step", np.array([7], np.int64))],
           metadata={"format": "pt"})
# ~200 MB of zeros, sparse: written as a header and a hole
n = 50_000_000
import json, struct
hdr = json.dumps({"big": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}},
                 separators=(",", ":")).encode()
hdr += b" " * ((8 - (8 + len(hdr)) % 8) % 8)
with open(f"{W}/big.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hdr)))
    f.write(hdr)
    f.truncate(8 + len(hdr) + 4 * n)
EOF
A="$WORK/a.safetensors"

# ---- OUT "-" ----
expect 0 "convert to a file" "$SHS_BIN" convert "$A" "$WORK/file.safetensors" --dtype bf16
CHECKS=$((CHECKS + 1))
set +e
TMPDIR="$WORK/tmp" "$SHS_BIN" convert "$A" - --dtype bf16 >"$WORK/stdout.safetensors" 2>"$WORK/err"
RC=$?
set -e
mkdir -p "$WORK/tmp"
if [ "$RC" -ne 0 ]; then
    # TMPDIR did not exist: the error says so
    grep -q "cannot create a temporary directory" "$WORK/err" && pass "missing TMPDIR reported" ||
        { fail "convert - with a missing TMPDIR: status $RC"; cat "$WORK/err" >&2; }
else
    fail "convert - succeeded with a missing TMPDIR"
fi
expect 0 "convert IN - (stdout)" env TMPDIR="$WORK/tmp" "$SHS_BIN" convert "$A" - --dtype bf16
cp "$WORK/out" "$WORK/stdout.safetensors"
CHECKS=$((CHECKS + 1))
cmp -s "$WORK/stdout.safetensors" "$WORK/file.safetensors" && pass "stdout holds the same bytes as OUT" ||
    fail "stdout differs from OUT"
[ -s "$WORK/err" ] && { fail "convert - printed on stderr"; show_output; } || true
CHECKS=$((CHECKS + 1))
[ -z "$(ls -A "$WORK/tmp")" ] && pass "convert - leaves nothing in TMPDIR" || { fail "TMPDIR not empty"; ls -la "$WORK/tmp" >&2; }
expect 0 "convert - -v: summary on stderr only" env TMPDIR="$WORK/tmp" "$SHS_BIN" convert -v "$A" - --dtype bf16
has "$WORK/err" "-> (standard output)" "verbose summary names stdout"
CHECKS=$((CHECKS + 1))
cmp -s "$WORK/out" "$WORK/file.safetensors" && pass "-v does not touch stdout" || fail "-v changed stdout"
expect 0 "the streamed file passes verify" "$SHS_BIN" verify "$WORK/stdout.safetensors"
CHECKS=$((CHECKS + 1))
"$SHS_BIN" convert "$A" - --dtype f16 2>/dev/null | cmp -s - <("$SHS_BIN" convert "$A" - --dtype f16 2>/dev/null) &&
    pass "convert - into a pipe" || fail "convert - into a pipe"
if command -v script >/dev/null; then
    CHECKS=$((CHECKS + 1))
    set +e; script -qec "$SHS_BIN convert $A - --dtype f16" /dev/null </dev/null >"$WORK/tty.out" 2>&1; RC=$?; set -e
    if [ "$RC" -eq 2 ] && grep -q "refusing to write a safetensors file to a terminal" "$WORK/tty.out"; then
        pass "convert - refuses a terminal"
    else
        fail "convert - on a terminal: status $RC"; head -c 300 "$WORK/tty.out" >&2
    fi
fi

# ---- SIGINT in the middle ----
# The test stops the process (SIGSTOP) once its temporary file exists, sends
# SIGINT and lets it go on (SIGCONT): the signal lands mid-way without any
# timing assumption.  `env --default-signal=INT`: a background job of a
# non-interactive shell starts with SIGINT ignored, which convert respects.
sigint_case() {   # DESCRIPTION DIR OUT-ARG
    local desc=$1 dir=$2 out=$3
    CHECKS=$((CHECKS + 1))
    set +e
    env --default-signal=INT TMPDIR="$WORK/tmp" "$SHS_BIN" convert "$WORK/big.safetensors" "$out" --dtype bf16 \
        >"$WORK/sig.out" 2>"$WORK/sig.err" &
    local pid=$! i
    for i in $(seq 1 3000); do
        find "$dir" -name '*.tmp.*' -print -quit 2>/dev/null | grep -q . && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.01
    done
    kill -STOP "$pid" 2>/dev/null
    kill -INT "$pid" 2>/dev/null
    kill -CONT "$pid" 2>/dev/null
    wait "$pid"
    local rc=$?
    set -e
    local left
    left=$(find "$dir" -name '*.tmp.*' -o -name 'shardsafe-convert-*' -o -name 'out.safetensors' | head -3)
    if [ "$rc" -eq 130 ] && [ -z "$left" ] && grep -q "interrupted by signal 2; output discarded" "$WORK/sig.err"; then
        pass "$desc: status 130, temporary file removed"
    else
        fail "$desc: status $rc, left: ${left:-nothing}"; cat "$WORK/sig.err" >&2
    fi
}
sigint_case "SIGINT converting to a file" "$WORK" "$WORK/big.bf16.safetensors"
CHECKS=$((CHECKS + 1))
[ ! -e "$WORK/big.bf16.safetensors" ] && pass "SIGINT: no OUT" || fail "SIGINT: OUT exists"
echo "old contents" >"$WORK/keep.safetensors"
sigint_case "SIGINT over an existing OUT" "$WORK" "$WORK/keep.safetensors"
CHECKS=$((CHECKS + 1))
[ "$(cat "$WORK/keep.safetensors")" = "old contents" ] && pass "SIGINT: existing OUT untouched" ||
    fail "SIGINT: existing OUT changed"
sigint_case "SIGINT converting to stdout" "$WORK/tmp" -

rm -f "$WORK/big.safetensors"
finish
