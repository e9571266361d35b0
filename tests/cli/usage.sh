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
