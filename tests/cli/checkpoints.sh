# checkpoints.sh -- `shardsafe ls`, `prune`, and `verify`/`inspect` of step
# directories and save paths, on real checkpoints written by the demo trainer.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }

SP="$WORK/save"
"$TRAINER" --steps 300 --save-path "$SP" --save-interval 50 --log-every 0 >"$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log" >&2; exit 1; }
# a fresh copy of the save path for each destructive check
fresh() {
    rm -rf "$2"
    cp -a "$SP" "$2"
}
LATEST=$(cat "$SP/latest_checkpointed_iteration.txt")
STEPS=$(cd "$SP" && ls -d iteration_* | sed 's/iteration_0*//' | sort -n | tr '\n' ' ')
echo "steps: $STEPS latest: $LATEST"
NSTEPS=$(echo $STEPS | wc -w)
[ "$NSTEPS" -ge 4 ] || { echo "trainer wrote only $NSTEPS steps" >&2; exit 1; }
S300="$SP/iteration_00000300"

# ---- ls ----
expect 0 "ls a save path" "$SHS_BIN" ls "$SP"
cp "$WORK/out" "$WORK/ls.txt"
py "ls lists every step sorted, committed, sizes > 0, latest on the tracker's step" <<EOF
import re
lines = open("$WORK/ls.txt").read().splitlines()
assert lines[0].split() == ["STEP", "STATUS", "SIZE", "FILES", "AGE", "DIRECTORY"], lines[0]
# columns: STEP STATUS SIZE(number unit) FILES AGE(n unit "ago") DIRECTORY [latest]
rows = [l.split() for l in lines[1:]]
steps = [int(r[0]) for r in rows]
assert steps == [int(s) for s in "$STEPS".split()], steps
assert steps == sorted(steps)
for r in rows:
    assert r[1] == "committed", r
    assert float(r[2]) > 0 and r[3] in ("B", "KiB", "MiB", "GiB"), r
    assert int(r[4]) >= 5, r
    assert r[7] == "ago" and r[6] in ("s", "min", "h", "days"), r
    assert r[8] == "iteration_%08d" % int(r[0]), r
# every column starts at the same offset in every line
starts = [l.index("iteration_") for l in lines[1:]]
assert len(set(starts)) == 1 and lines[0].index("DIRECTORY") == starts[0], lines
latest = [r for r in rows if r[-1] == "latest"]
assert len(latest) == 1 and int(latest[0][0]) == $LATEST, latest
EOF
lacks "$WORK/err" "warning" "ls of a healthy save path warns nothing"

expect 0 "ls --json" "$SHS_BIN" ls --json "$SP"
cp "$WORK/out" "$WORK/ls.json"
py "ls --json: steps, sizes equal to the files' sizes, latest, tracker" <<EOF
import json, os
d = json.load(open("$WORK/ls.json"))
assert d["schema"] == 2 and d["command"] == "ls" and d["path"] == "$SP" and d["ok"] is True
assert d["errors"] == [] and isinstance(d["now"], int)
assert d["tracker"] == {"state": "ok", "step": $LATEST, "complete": True}, d["tracker"]
assert [s["step"] for s in d["steps"]] == [int(s) for s in "$STEPS".split()]
for s in d["steps"]:
    p = os.path.join("$SP", s["name"])
    assert s["bytes"] == sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p)), s
    assert s["file_count"] == len(os.listdir(p)) and s["status"] == "committed"
    assert s["mtime"] == int(os.stat(p).st_mtime), s
    assert s["latest"] == (s["step"] == $LATEST)
assert d["leftovers"] == [] and d["warnings"] == []
EOF

# hard links, an incomplete directory and leftovers
L="$WORK/ls_extra"
fresh "$SP" "$L"
M100=$(ls "$L/iteration_00000100"/*-model-*.safetensors | head -1)
ln "$M100" "$L/iteration_00000100/linked.safetensors"
mkdir "$L/iteration_00000400" && echo x >"$L/iteration_00000400/part"
mkdir "$L/.tmp-iteration_00000350-abcdef" && echo y >"$L/.tmp-iteration_00000350-abcdef/f"
mkdir "$L/.trash-iteration_00000050-0123"
expect 0 "ls with links, incomplete dir and leftovers" "$SHS_BIN" ls "$L"
has "$WORK/out" "(2 shared)" "ls counts hard-linked files as shared"
has "$WORK/out" "incomplete" "ls marks a directory without metadata.json incomplete"
has "$WORK/out" "leftover (failed save): .tmp-iteration_00000350-abcdef" "ls lists .tmp- leftovers"
has "$WORK/out" "leftover (failed save): .trash-iteration_00000050-0123" "ls lists .trash- leftovers"

# tracker problems
T="$WORK/tracker"
fresh "$SP" "$T"
echo 999 >"$T/latest_checkpointed_iteration.txt"
expect 0 "ls with a tracker naming a missing step" "$SHS_BIN" ls "$T"
has "$WORK/err" "names step 999, but there is no complete directory" "ls warns: tracker names a missing step"
lacks "$WORK/out" "latest" "no step marked latest when the tracker's step is missing"
expect 1 "verify a save path whose tracker names a missing step fails" "$SHS_BIN" verify "$T"
has "$WORK/out" "FAIL $T/latest_checkpointed_iteration.txt: names step 999" "verify names the tracker problem"
has "$WORK/out" "OK $T/iteration_00000300" "verify still checks every step"
echo "garbage" >"$T/latest_checkpointed_iteration.txt"
expect 0 "ls with a malformed tracker" "$SHS_BIN" ls "$T"
has "$WORK/err" "malformed tracker" "ls warns: malformed tracker"
expect 1 "verify with a malformed tracker" "$SHS_BIN" verify "$T"
expect 1 "prune refuses with a malformed tracker" "$SHS_BIN" prune "$T" --keep 1
[ "$(ls -d "$T"/iteration_* | wc -l)" -eq "$NSTEPS" ] && pass "nothing pruned with a malformed tracker" ||
    fail "prune removed steps although the tracker is malformed"
rm "$T/latest_checkpointed_iteration.txt"
expect 0 "ls without a tracker" "$SHS_BIN" ls "$T"
has "$WORK/err" "no tracker" "ls warns: no tracker"
expect 0 "verify without a tracker passes (warning)" "$SHS_BIN" verify "$T"
has "$WORK/err" "no tracker" "verify warns: no tracker"
expect 1 "ls of a missing path" "$SHS_BIN" ls "$WORK/nope"
expect 2 "ls without SAVE_PATH" "$SHS_BIN" ls

# ---- verify ----
expect 0 "verify a save path" "$SHS_BIN" verify "$SP"
[ "$(grep -c '^OK ' "$WORK/out")" -eq "$NSTEPS" ] && pass "one OK per step" || { fail "expected $NSTEPS OK lines"; show_output; }
expect 0 "verify a step directory" "$SHS_BIN" verify "$S300"
has "$WORK/out" "OK $S300 (checkpoint step 300, 5 files, " "verify prints the checkpoint OK line"

V="$WORK/flip"
fresh "$SP" "$V"
"$PY" - "$V/iteration_00000300" <<'EOF'
import json, sys, os
d = sys.argv[1]
m = json.load(open(os.path.join(d, "metadata.json")))
t = m["tensors"]["model.hidden.weight"]["chunks"][0]
path = os.path.join(d, m["files"][t["file"]]["name"])
b0, b1 = t["byte_range"]
with open(path, "r+b") as f:
    f.seek(b0 + (b1 - b0) // 2)
    c = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([c[0] ^ 0x01]))
EOF
expect 1 "verify a step with a flipped tensor byte" "$SHS_BIN" verify "$V/iteration_00000300"
has "$WORK/out" "FAIL $V/iteration_00000300: " "FAIL line for the corrupted step"
has "$WORK/out" "checksum" "the reason mentions the checksum"
expect 1 "verify the save path holding it" "$SHS_BIN" verify "$V"
has "$WORK/out" "OK $V/iteration_00000250" "the other steps stay OK"
has "$WORK/out" "FAIL $V/iteration_00000300" "the corrupted step fails in the save path"

V="$WORK/missing"
fresh "$SP" "$V"
OPT=$(cd "$V/iteration_00000300" && ls *-opt-*.safetensors | head -1)
rm "$V/iteration_00000300/$OPT"
expect 1 "verify a step with a deleted file" "$SHS_BIN" verify "$V/iteration_00000300"
has "$WORK/out" "FAIL $V/iteration_00000300" "FAIL line for the missing file"
has "$WORK/out" "$OPT" "the reason names the missing file"

V="$WORK/evil"
fresh "$SP" "$V"
"$PY" - "$V/iteration_00000300/metadata.json" <<'EOF'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
m["files"][0]["name"] = "../evil.safetensors"
json.dump(m, open(p, "w"))
EOF
cp "$V/iteration_00000300/$(cd "$SP/iteration_00000300" && ls *-model-*)" "$V/evil.safetensors"
expect 1 "verify a metadata.json naming ../evil.safetensors" "$SHS_BIN" verify "$V/iteration_00000300"
has "$WORK/out" "FAIL $V/iteration_00000300" "FAIL line for the escaping file name"
has "$WORK/out" "evil.safetensors" "the reason names the bad file"
expect 1 "inspect refuses the same metadata.json" "$SHS_BIN" inspect "$V/iteration_00000300"
has "$WORK/err" "not a plain file name" "inspect says why"

# existing behaviour for a plain directory is kept
mkdir "$WORK/plain"
cp "$S300"/*-model-*.safetensors "$WORK/plain/"
expect 0 "verify a plain directory of safetensors files" "$SHS_BIN" verify "$WORK/plain"
has "$WORK/out" "tensors, " "plain directory: per-file OK lines"

# ---- inspect ----
expect 0 "inspect a step directory" "$SHS_BIN" inspect "$S300"
has "$WORK/out" "step:       300" "inspect shows the step"
has "$WORK/out" "world_size: 1" "inspect shows world_size"
has "$WORK/out" "model.hidden.weight" "inspect lists a model tensor"
has "$WORK/out" "optimizer.exp_avg.model.hidden.weight" "inspect lists an optimizer tensor"
has "$WORK/out" "global_step: 300" "inspect shows common.json"
expect 0 "inspect --json a step directory" "$SHS_BIN" inspect --json "$S300"
cp "$WORK/out" "$WORK/insp.json"
py "inspect --json: tensors match metadata.json" <<EOF
import json
d = json.load(open("$WORK/insp.json"))
m = json.load(open("$S300/metadata.json"))
assert d["kind"] == "checkpoint" and d["step"] == 300 and d["world_size"] == m["world_size"]
assert [f["name"] for f in d["files"]] == [f["name"] for f in m["files"]]
assert d["schema"] == 2 and d["command"] == "inspect" and d["ok"] is True
assert all(f["bytes"] > 0 for f in d["files"])
got = {t["name"]: t for t in d["tensors"]}
assert set(got) == set(m["tensors"]), set(got) ^ set(m["tensors"])
for n, t in m["tensors"].items():
    g = got[n]
    assert g["kind"] == t["kind"] and g["dtype"] == t["dtype"] and g["shape"] == t["shape"], n
    assert g["chunk_count"] == len(t["chunks"])
    assert g["bytes"] == sum(c["byte_range"][1] - c["byte_range"][0] for c in t["chunks"])
assert [b["name"] for b in d["blobs"]] == [b["name"] for b in m.get("blobs", [])]
assert d["common"]["global_step"] == 300
EOF
# hostile metadata.json: wrong types must not crash
H="$WORK/hostile"
mkdir -p "$H"
cp "$S300/common.json" "$H/"
for doc in '[]' '{"format":"shardsafe.checkpoint","step":"x","world_size":1}' \
    '{"format":"shardsafe.checkpoint","step":1,"world_size":1,"files":[{"name":"a","rank":0}],"tensors":{"t":{"kind":"model","dtype":"F32","shape":[-1],"chunks":[]}}}' \
    '{"format":"shardsafe.checkpoint","step":1,"world_size":1,"files":[],"tensors":{"t":{"kind":"model","dtype":"F32","shape":[2],"chunks":[{"file":5,"byte_range":[0,8]}]}}}' \
    '{"format":"shardsafe.checkpoint","step":1,"step":2}' '{"format":"shardsafe.checkpoint","step":1,"world_size":1,"files":[],"tensors":{},"blobs":[7]}'; do
    printf '%s' "$doc" >"$H/metadata.json"
    expect 1 "inspect hostile metadata.json $doc" "$SHS_BIN" inspect "$H"
    has "$WORK/err" "metadata.json" "the error names metadata.json"
done

# ---- prune ----
P="$WORK/prune"
fresh "$SP" "$P"
expect 2 "prune --keep 0 is a usage error" "$SHS_BIN" prune "$P" --keep 0
expect 2 "prune without --keep is a usage error" "$SHS_BIN" prune "$P"
expect 2 "prune --keep x is a usage error" "$SHS_BIN" prune "$P" --keep x
mkdir "$P/.tmp-iteration_00000350-abcdef" && echo y >"$P/.tmp-iteration_00000350-abcdef/f"
mkdir "$P/.trash-iteration_00000050-0123"
BEFORE=$(cd "$P" && find . | sort)
expect 0 "prune --dry-run" "$SHS_BIN" prune "$P" --keep 2 --dry-run
has "$WORK/out" "would remove iteration_00000100" "dry run says what it would remove"
has "$WORK/out" "would remove leftover .tmp-iteration_00000350-abcdef" "dry run lists leftovers"
[ "$(cd "$P" && find . | sort)" = "$BEFORE" ] && pass "dry run deleted nothing" || fail "dry run changed the save path"
expect 0 "prune --keep 2" "$SHS_BIN" prune "$P" --keep 2
has "$WORK/out" "removed iteration_00000100" "prune reports a removal"
REMAIN=$(cd "$P" && ls -A | grep -vx .shardsafe.lock | tr '\n' ' ')
[ "$REMAIN" = "iteration_00000250 iteration_00000300 latest_checkpointed_iteration.txt " ] &&
    pass "exactly the newest 2 steps remain, leftovers gone" || fail "after prune: $REMAIN"
expect 0 "the pruned save path verifies" "$SHS_BIN" verify "$P"

# the tracker names an older step: it survives
P="$WORK/prune_old"
fresh "$SP" "$P"
echo 150 >"$P/latest_checkpointed_iteration.txt"
expect 0 "prune --keep 2 with the tracker on step 150" "$SHS_BIN" prune "$P" --keep 2
has "$WORK/out" "kept iteration_00000150 (step 150): named by the tracker" "prune says why it kept 150"
REMAIN=$(cd "$P" && ls -d iteration_* | tr '\n' ' ')
[ "$REMAIN" = "iteration_00000150 iteration_00000250 iteration_00000300 " ] &&
    pass "newest 2 plus the tracker's step remain" || fail "after prune: $REMAIN"
expect 0 "prune --keep 1 again" "$SHS_BIN" prune "$P" --keep 1
REMAIN=$(cd "$P" && ls -d iteration_* | tr '\n' ' ')
[ "$REMAIN" = "iteration_00000150 iteration_00000300 " ] && pass "tracker's step never removed" ||
    fail "after prune --keep 1: $REMAIN"
expect 1 "prune a step directory is refused" "$SHS_BIN" prune "$P/iteration_00000300" --keep 1
expect 1 "prune a directory that is not a save path is refused" "$SHS_BIN" prune "$WORK/plain" --keep 1

# inspect: common.json through the library (exactly its seven keys)
expect 0 "inspect shows every common.json key" "$SHS_BIN" inspect "$S300"
has "$WORK/out" "step_num: 300" "inspect shows step_num"
has "$WORK/out" "ckpt_status: null" "inspect shows ckpt_status"
C="$WORK/common_extra"
fresh "$SP" "$C"
"$PY" - "$C/iteration_00000300/common.json" <<'EOF'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["extra"] = 1
json.dump(d, open(p, "w"))
EOF
# re-sealed: the common.json rule is what fails, not the checksum of an edit
"$PY" "$SHS_SOURCE_DIR/tests/cli/reseal.py" "$C/iteration_00000300"
# a failure (as verify and ls say), though the rest is still printed
expect 1 "inspect with an invalid common.json still prints the checkpoint, and fails" "$SHS_BIN" inspect "$C/iteration_00000300"
has "$WORK/out" "common.json: missing or invalid" "invalid common.json: section says so"
has "$WORK/err" "common.json" "invalid common.json: the error names it"
expect 1 "verify fails on the invalid common.json too" "$SHS_BIN" verify "$C/iteration_00000300"
has "$WORK/out" "common.json" "verify names common.json"
expect 0 "ls lists it" "$SHS_BIN" ls "$C"
has "$WORK/out" "damaged" "ls calls the step with an invalid common.json damaged"
has "$WORK/err" "unknown key" "invalid common.json: the warning gives the library's reason"

# prune: step-N and other names of a step, through shs_checkpoint_remove
P="$WORK/prune_names"
fresh "$SP" "$P"
mv "$P/iteration_00000100" "$P/step-100"
mv "$P/iteration_00000150" "$P/iteration_150"
cp -a "$P/iteration_00000200" "$P/step-50"
mkdir "$P/iteration_00000050"
expect 1 "prune with a step-N beside an incomplete iteration_ of that step" "$SHS_BIN" prune "$P" --keep 2
has "$WORK/out" "removed step-100 (step 100" "prune removes a step-N directory"
lacks "$WORK/out" "iteration_150" "prune leaves iteration_150 alone: of another width, no step directory (the loader would not find it)"
has "$WORK/err" "cannot remove $P/step-50" "prune refuses step-50 beside an incomplete iteration_00000050"
REMAIN=$(cd "$P" && ls -A | grep -vx .shardsafe.lock | tr '\n' ' ')
[ "$REMAIN" = "iteration_00000050 iteration_00000250 iteration_00000300 iteration_150 latest_checkpointed_iteration.txt step-50 " ] &&
    pass "prune removed exactly the removable old steps, no .trash- left" || fail "after prune: $REMAIN"

finish
