# usage.sh -- --help, --version and usage errors (exit status 2) of every command.
. "$(dirname "$0")/lib.bash"

"$PY" - <<'EOF'
import os, numpy as np, mkst
mkst.write(os.path.join(os.environ["WORK"], "a.safetensors"),
           [mkst.entry("w", np.ones(4, np.float32))])
EOF
A="$WORK/a.safetensors"

expect 0 "--help" "$SHS_BIN" --help
has "$WORK/out" "Usage: shardsafe <command>" "--help on stdout"
has "$WORK/out" "inspect" "--help lists inspect"
has "$WORK/out" "verify" "--help lists verify"
has "$WORK/out" "convert" "--help lists convert"
expect 0 "-h" "$SHS_BIN" -h
expect 0 "--version" "$SHS_BIN" --version
has "$WORK/out" "shardsafe 0.1.0" "--version prints the version"
expect 0 "help convert" "$SHS_BIN" help convert
has "$WORK/out" "--dtype" "help convert shows convert's help"

for cmd in inspect verify convert; do
    expect 0 "$cmd --help" "$SHS_BIN" "$cmd" --help
    has "$WORK/out" "Usage: shardsafe $cmd" "$cmd --help text"
    expect 0 "$cmd -h" "$SHS_BIN" "$cmd" -h
    expect 2 "$cmd: unknown option" "$SHS_BIN" "$cmd" --no-such-option "$A"
    has "$WORK/err" "shardsafe: $cmd: unknown option '--no-such-option'" "$cmd: unknown option named"
    [ -s "$WORK/out" ] && fail "$cmd: usage error printed on stdout" || true
done

# ---- options every command takes ----
for cmd in inspect verify convert ls prune diff; do
    expect 0 "$cmd --help" "$SHS_BIN" "$cmd" --help
    has "$WORK/out" "Usage: shardsafe $cmd" "$cmd --help text"
    has "$WORK/out" "--json" "$cmd --help names the global options"
    expect 0 "$cmd --version" "$SHS_BIN" "$cmd" --version
    CHECKS=$((CHECKS + 1))
    [ "$(cat "$WORK/out")" = "shardsafe $("$SHS_BIN" --version | cut -d' ' -f2)" ] &&
        pass "$cmd --version: 'shardsafe VERSION'" || { fail "$cmd --version"; show_output; }
    expect 0 "$cmd -qh (combined short flags)" "$SHS_BIN" "$cmd" -qh
    has "$WORK/out" "Usage: shardsafe $cmd" "$cmd -qh shows the help"
    expect 2 "$cmd: misspelt --json" "$SHS_BIN" "$cmd" --jsno "$A"
    has "$WORK/err" "unknown option '--jsno' (did you mean '--json'?)" "$cmd: did you mean --json"
    expect 2 "$cmd: --json with --quiet" "$SHS_BIN" "$cmd" --json --quiet "$A"
    has "$WORK/err" "--json and --quiet exclude each other" "$cmd: --json/--quiet message"
    expect 2 "$cmd: unknown short option" "$SHS_BIN" "$cmd" -Z "$A"
    has "$WORK/err" "unknown option '-Z'" "$cmd: -Z named"
    expect 2 "$cmd: --quiet=1" "$SHS_BIN" "$cmd" --quiet=1 "$A"
    has "$WORK/err" "option '--quiet' takes no value" "$cmd: a flag takes no value"
done
"$SHS_BIN" --version >"$WORK/out"
CHECKS=$((CHECKS + 1))
grep -qxE 'shardsafe [0-9]+\.[0-9]+\.[0-9]+' "$WORK/out" && pass "--version is 'shardsafe X.Y.Z'" ||
    { fail "--version format"; cat "$WORK/out" >&2; }
expect 0 "global options before the command" "$SHS_BIN" -q inspect "$A"
CHECKS=$((CHECKS + 1))
[ -s "$WORK/out" ] && { fail "-q before the command printed"; show_output; } || pass "-q before the command"
expect 0 "inspect -q prints nothing" "$SHS_BIN" inspect -q "$A"
CHECKS=$((CHECKS + 1))
[ -s "$WORK/out" ] || [ -s "$WORK/err" ] && { fail "inspect -q printed"; show_output; } || pass "inspect -q is silent"
expect 0 "inspect -v says what it does" "$SHS_BIN" inspect -v "$A"
has "$WORK/err" "shardsafe: inspect: $A: 1 tensors" "-v note on stderr"
expect 0 "-qv: the last of -q/-v counts" "$SHS_BIN" inspect -qv "$A"
has "$WORK/out" "file:" "-qv is verbose"
expect 0 "-vq: the last of -q/-v counts" "$SHS_BIN" inspect -vq "$A"
[ -s "$WORK/out" ] && { fail "-vq printed"; show_output; } || pass "-vq is quiet"
expect 0 "short option with its value attached (-n1)" "$SHS_BIN" inspect -n1 "$A"
expect 0 "short option value as the next argument (-qn 1)" "$SHS_BIN" inspect -qn 1 "$A"
expect 2 "short option without its value" "$SHS_BIN" inspect "$A" -n
has "$WORK/err" "option '-n' needs a value" "-n without value named"
cp "$A" "$WORK/-dash.safetensors"
expect 0 "-- ends the options" "$SHS_BIN" inspect -- "$WORK/-dash.safetensors"
CHECKS=$((CHECKS + 1))
(cd "$WORK" && "$SHS_BIN" inspect -- -dash.safetensors >/dev/null 2>&1) && pass "-- then a name starting with -" ||
    fail "-- then a name starting with -"
expect 2 "a name starting with - without --" "$SHS_BIN" inspect -dash.safetensors
expect 2 "misspelt command" "$SHS_BIN" inpsect "$A"
has "$WORK/err" "unknown command 'inpsect' (did you mean 'inspect'?)" "did you mean a command"
expect 2 "no suggestion for an unrelated option" "$SHS_BIN" ls --keep 3 "$WORK"
lacks "$WORK/err" "did you mean" "no far-fetched suggestion"
expect 0 "--help documents diff's exit status" "$SHS_BIN" --help
has "$WORK/out" "diff, like cmp: 0 same, 1 different, 2 trouble" "diff exit status in --help"

# ---- every example program answers --help and -h ----
for prog in demo_write trainer trainer_mpi; do
    bin="$SHS_BUILD_DIR/$prog"
    if [ ! -x "$bin" ]; then
        [ "$prog" = trainer_mpi ] && { echo "note: $prog not built (SHS_WITH_MPI=OFF)"; continue; }
        fail "$prog not built"; continue
    fi
    # Open MPI leaks in MPI_Init (as in tests/mpi): not ours to find
    leaks=1
    [ "$prog" = trainer_mpi ] && leaks=0
    # in $WORK, so that a program taking --help for a path creates it there
    cd "$WORK"
    for h in --help -h; do
        expect 0 "$prog $h" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=$leaks" "$bin" "$h"
    done
    run env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=$leaks" "$bin" --help
    cd - >/dev/null
    has "$WORK/out" "usage: " "$prog --help text on stdout"
    has "$WORK/out" "$prog" "$prog --help names the program"
    CHECKS=$((CHECKS + 1))
    [ -e "$WORK/--help" ] || [ -e "$WORK/-h" ] && fail "$prog created a file named like the option" ||
        pass "$prog: --help is not a path"
done
expect 2 "demo_write without OUT" "$SHS_BUILD_DIR/demo_write"
expect 2 "demo_write with an unknown option" "$SHS_BUILD_DIR/demo_write" --frob

expect 2 "no command" "$SHS_BIN"
expect 2 "unknown command" "$SHS_BIN" frobnicate
has "$WORK/err" "unknown command 'frobnicate'" "unknown command named"
expect 2 "unknown global option" "$SHS_BIN" --frob
expect 2 "help for unknown command" "$SHS_BIN" help frob

expect 2 "inspect without PATH" "$SHS_BIN" inspect
has "$WORK/err" "missing PATH" "inspect: missing PATH message"
expect 2 "inspect with two PATHs" "$SHS_BIN" inspect "$A" "$A"
expect 2 "inspect --limit without value" "$SHS_BIN" inspect "$A" --limit
expect 2 "inspect --limit not a number" "$SHS_BIN" inspect "$A" --limit abc
expect 2 "inspect --limit negative" "$SHS_BIN" inspect "$A" --limit -1
expect 2 "inspect --json=value" "$SHS_BIN" inspect "$A" --json=yes
expect 0 "inspect --limit=1 form" "$SHS_BIN" inspect "$A" --limit=1
expect 0 "inspect -- PATH" "$SHS_BIN" inspect -- "$A"

expect 2 "verify without PATH" "$SHS_BIN" verify
expect 2 "verify --check-finite without PATH" "$SHS_BIN" verify --check-finite

expect 2 "convert without arguments" "$SHS_BIN" convert
expect 2 "convert without OUT" "$SHS_BIN" convert "$A" --dtype bf16
expect 2 "convert without --dtype" "$SHS_BIN" convert "$A" "$WORK/b.safetensors"
has "$WORK/err" "missing --dtype" "convert: missing --dtype message"
expect 2 "convert unknown dtype" "$SHS_BIN" convert "$A" "$WORK/b.safetensors" --dtype int8
has "$WORK/err" "unknown --dtype 'int8'" "convert: unknown dtype named"
expect 2 "convert --dtype without value" "$SHS_BIN" convert "$A" "$WORK/b.safetensors" --dtype
expect 2 "convert extra argument" "$SHS_BIN" convert "$A" "$WORK/b.safetensors" "$WORK/c" --dtype f16
expect 2 "convert --align not a power of two" "$SHS_BIN" convert "$A" "$WORK/b.safetensors" --dtype f16 --align 12
expect 2 "convert --align too small" "$SHS_BIN" convert "$A" "$WORK/b.safetensors" --dtype f16 --align 4
expect 2 "convert --align junk" "$SHS_BIN" convert "$A" "$WORK/b.safetensors" --dtype f16 --align 8k
CHECKS=$((CHECKS + 1))
if [ -e "$WORK/b.safetensors" ]; then fail "a usage error created OUT"; else pass "usage errors create no OUT"; fi

finish
