# lib.bash -- sourced by the CLI tests (tests/cli/*.sh); not a test itself.
#
# Environment (set by ctest): SHS_BIN (the shardsafe binary), SHS_SOURCE_DIR,
# SHS_BUILD_DIR, TMPDIR.  Checks keep going after a failure so one run shows
# every problem; `finish` exits 1 if any check failed.
set -euo pipefail

: "${SHS_BIN:?SHS_BIN must name the shardsafe binary}"
: "${SHS_SOURCE_DIR:?SHS_SOURCE_DIR must name the source tree}"
[ -x "$SHS_BIN" ] || { echo "not executable: $SHS_BIN" >&2; exit 1; }

# Debian's interpreter: it has numpy (the one first on PATH may not).
PY=/usr/bin/python3
"$PY" -c 'import numpy' 2>/dev/null || { echo "$PY lacks numpy (apt-get install python3-numpy)" >&2; exit 1; }
export PYTHONPATH="$SHS_SOURCE_DIR/tests/cli"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/shs-cli-XXXXXX")
export WORK
trap 'rm -rf "$WORK"' EXIT

FAILS=0
CHECKS=0
SKIPS=0

fail() {
    echo "FAIL: $*" >&2
    FAILS=$((FAILS + 1))
}

pass() {
    echo "ok: $*"
}

# run CMD...: stdout to $WORK/out, stderr to $WORK/err, status in $RC.
run() {
    set +e
    "$@" >"$WORK/out" 2>"$WORK/err"
    RC=$?
    set -e
}

show_output() {
    sed 's/^/  stdout| /' "$WORK/out" | head -40 >&2
    sed 's/^/  stderr| /' "$WORK/err" | head -40 >&2
}

# expect WANT_STATUS DESCRIPTION CMD...
expect() {
    local want=$1 desc=$2
    shift 2
    CHECKS=$((CHECKS + 1))
    run "$@"
    if [ "$RC" -ne "$want" ]; then
        fail "$desc: exit status $RC, expected $want"
        show_output
    else
        pass "$desc"
    fi
}

# has FILE TEXT DESCRIPTION: FILE contains the fixed string TEXT.
has() {
    CHECKS=$((CHECKS + 1))
    if grep -qF -- "$2" "$1"; then
        pass "$3"
    else
        fail "$3: '$2' not found in $(basename "$1")"
        sed 's/^/  | /' "$1" | head -40 >&2
    fi
}

# lacks FILE TEXT DESCRIPTION
lacks() {
    CHECKS=$((CHECKS + 1))
    if grep -qF -- "$2" "$1"; then
        fail "$3: '$2' unexpectedly found in $(basename "$1")"
        sed 's/^/  | /' "$1" | head -40 >&2
    else
        pass "$3"
    fi
}

# py DESCRIPTION <<'EOF' ... EOF: a Python check (assert) read from stdin.
py() {
    CHECKS=$((CHECKS + 1))
    if "$PY" - >"$WORK/py.out" 2>&1; then
        pass "$1"
    else
        fail "$1"
        sed 's/^/  py| /' "$WORK/py.out" | tail -30 >&2
    fi
}

# skip DESCRIPTION: a part of the test that cannot run on this machine.
# The test then ends as skipped (exit 77, shown by ctest), not as passed,
# even when every check that ran passed.
skip() {
    SKIPS=$((SKIPS + 1))
    echo "SKIP: $*"
}

finish() {
    if [ "$FAILS" -ne 0 ]; then
        echo "$FAILS of $CHECKS checks failed" >&2
        exit 1
    fi
    if [ "$SKIPS" -ne 0 ]; then
        echo "all $CHECKS checks passed; $SKIPS part(s) skipped (above): reported as skipped"
        exit 77
    fi
    echo "all $CHECKS checks passed"
}
