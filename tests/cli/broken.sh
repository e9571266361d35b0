# broken.sh -- `inspect`, `verify` and `ls` agree on every broken
# checkpoint: each case is built from a good saved step and the three
# commands must name the same file and the same reason.  inspect and ls
# never read tensor data, so a bad checksum is verify's alone (checked).
# Also: verify notes a version-1 metadata.json (weaker checksum coverage).
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }

SP="$WORK/save"
"$TRAINER" --steps 20 --save-path "$SP" --save-interval 10 --log-every 0 >"$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log" >&2; exit 1; }
STEP=iteration_00000020
DATA=$(cd "$SP/$STEP" && ls *.safetensors | head -1)
[ -n "$DATA" ] || { echo "no data file in $SP/$STEP" >&2; exit 1; }

expect 0 "the good step verifies" "$SHS_BIN" verify "$SP/$STEP"
expect 0 "the good step inspects" "$SHS_BIN" inspect "$SP/$STEP"

# agree NAME KEYWORD...: inspect and verify of the step fail, ls marks it
# not committed, and every output names each KEYWORD.
agree() {
    local case=$1 dir="$WORK/$1/$STEP"
    shift
    expect 1 "$case: inspect fails" "$SHS_BIN" inspect "$dir"
    cp "$WORK/err" "$WORK/$case.inspect"
    expect 1 "$case: verify fails" "$SHS_BIN" verify "$dir"
    cat "$WORK/out" "$WORK/err" >"$WORK/$case.verify"
    expect 1 "$case: verify of the save path fails" "$SHS_BIN" verify "$WORK/$case"
    cat "$WORK/out" "$WORK/err" >"$WORK/$case.verify_sp"
    expect 0 "$case: ls lists the save path" "$SHS_BIN" ls "$WORK/$case"
    cat "$WORK/out" "$WORK/err" >"$WORK/$case.ls"
    CHECKS=$((CHECKS + 1))
    if grep -E "^ *20  (damaged|incomplete) " "$WORK/$case.ls" >/dev/null; then
        pass "$case: ls does not call step 20 committed"
    else
        fail "$case: ls status of step 20"
        sed 's/^/  | /' "$WORK/$case.ls" >&2
    fi
    for kw in "$@"; do
        for cmd in inspect verify verify_sp ls; do
            has "$WORK/$case.$cmd" "$kw" "$case: $cmd names '$kw'"
        done
    done
}

fresh() {
    cp -a "$SP" "$WORK/$1"
}

# a data file metadata.json names is missing
fresh nofile
rm "$WORK/nofile/$STEP/$DATA"
agree nofile "$DATA" "missing file"

# no metadata.json: a damaged step directory, never walked as plain files
fresh nometa
rm "$WORK/nometa/$STEP/metadata.json"
agree nometa "without metadata.json" "damaged"
lacks "$WORK/nometa.verify" "OK $WORK/nometa/$STEP/" "verify does not pass the files of a step without metadata.json"

# metadata.json that is a directory (an error other than ENOENT; root
# reads through chmod, so this stands in for an unreadable file)
fresh metadir
rm "$WORK/metadir/$STEP/metadata.json"
mkdir "$WORK/metadir/$STEP/metadata.json"
agree metadir "metadata.json" "not a regular file"

# --json of inspect and ls carry the same problem
expect 1 "nofile: inspect --json fails" "$SHS_BIN" inspect --json "$WORK/nofile/$STEP"
has "$WORK/out" "missing file" "inspect --json lists the problem in errors"
expect 0 "nofile: ls --json" "$SHS_BIN" ls --json "$WORK/nofile"
py "ls --json: step 20 damaged with the problem" <<PYEOF
import json
d = json.load(open("$WORK/out"))
s = [x for x in d["steps"] if x["step"] == 20][0]
assert s["status"] == "damaged", s
assert "missing file '$DATA'" in s["problem"], s
s = [x for x in d["steps"] if x["step"] == 10][0]
assert s["status"] == "committed" and s["problem"] is None, s
PYEOF

# a flipped payload byte: only verify reads data (inspect and ls do not)
fresh flip
"$PY" - "$WORK/flip/$STEP/$DATA" <<'PYEOF'
import sys
p = sys.argv[1]
d = bytearray(open(p, "rb").read())
d[-5] ^= 0xFF
open(p, "wb").write(d)
PYEOF
expect 1 "flip: verify fails" "$SHS_BIN" verify "$WORK/flip/$STEP"
has "$WORK/out" "$DATA" "flip: verify names the file"
has "$WORK/out" "checksum" "flip: verify names the checksum"
expect 1 "flip: verify of the save path fails" "$SHS_BIN" verify "$WORK/flip"
has "$WORK/out" "checksum" "flip: verify of the save path names the checksum"

# ---- metadata.json version 1: verify passes it and says what it covers less ----
NOTE="note: metadata.json version 1: common.json, headers and metadata.json itself are not covered by checksums"
expect 0 "a version-2 step verifies" "$SHS_BIN" verify "$SP/$STEP"
lacks "$WORK/out" "note:" "no version note for version 2"
fresh v1
# converted to version 1: the version-2 keys and the seal removed (the
# format of tests/cli/reseal.py, docs/checkpoint.md)
"$PY" - "$WORK/v1/$STEP/metadata.json" <<'PYEOF'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
assert m["version"] == 2 and "metadata_xxh3" in m and "common_xxh3" in m, sorted(m)
m["version"] = 1
del m["metadata_xxh3"], m["common_xxh3"]
for f in m["files"]:
    del f["size"], f["header_xxh3"]
json.dump(m, open(p, "w"))
PYEOF
expect 0 "a version-1 step verifies" "$SHS_BIN" verify "$WORK/v1/$STEP"
has "$WORK/out" "OK $WORK/v1/$STEP (checkpoint step 20" "version 1: the OK line"
has "$WORK/out" "$NOTE" "version 1: verify notes the weaker coverage"
expect 0 "a version-1 step verifies quietly" "$SHS_BIN" verify -q "$WORK/v1/$STEP"
lacks "$WORK/out" "note:" "-q prints no note"
expect 0 "verify --json of a save path with a version-1 step" "$SHS_BIN" verify --json "$WORK/v1"
py "--json: format_version 1 for the converted step, 2 for the other" <<PYEOF
import json
d = json.load(open("$WORK/out"))
v = {r["path"].rsplit("/", 1)[1]: r["format_version"] for r in d["results"] if r["kind"] == "checkpoint"}
assert v == {"iteration_00000010": 2, "$STEP": 1}, v
PYEOF
expect 0 "verify of the version-1 save path (text)" "$SHS_BIN" verify "$WORK/v1"
has "$WORK/out" "$NOTE" "version 1 note in a save path's verify"
[ "$(grep -c "^note:" "$WORK/out")" -eq 1 ] && pass "one note, for the version-1 step only" ||
    fail "expected exactly one note: $(cat "$WORK/out")"

finish
