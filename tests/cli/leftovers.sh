# leftovers.sh -- what a killed `shardsafe merge` / `reshard` leaves: a
# merge killed with SIGKILL mid-way leaves its full temporary output
# "DST.tmp-*" (and its lock file); `ls DST` lists it as a leftover with its
# size (DST itself need not exist); a temporary still held by a live
# process is "in use" and no run removes it; the next merge of DST removes
# the leftover and says so, then succeeds.  The same for a reshard's
# ".tmp-<name>-*" beside its destination.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }

# make_src MIB: a plain folder of 8 F32 tensors, MIB MiB in all
make_src() {
    rm -rf "$WORK/src"
    mkdir -p "$WORK/src"
    MIB=$1 "$PY" - <<'EOF'
import os, numpy as np, mkst
W, mib = os.environ["WORK"], int(os.environ["MIB"])
n = mib * (1 << 20) // 4 // 8
rng = np.random.default_rng(3)
for f in range(2):
    ents = [mkst.entry(f"layers.{4 * f + i}.w", rng.standard_normal(n, dtype=np.float32))
            for i in range(4)]
    mkst.write(f"{W}/src/part{f}.safetensors", ents)
EOF
}

# kill_mid CMD...: start CMD, wait until its temporary output holds a
# non-empty file, SIGKILL it.  Status 0 when it was killed mid-way (the
# run had not finished), 1 when it finished first.
kill_mid() {
    "$@" >/dev/null 2>&1 &
    local pid=$! i=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ -n "$(find "$WORK" -maxdepth 1 -name 'dst.tmp-*' -type d \
            -exec find {} -type f -size +0 \; 2>/dev/null | head -1)" ]; then
            kill -9 "$pid" 2>/dev/null || true
            break
        fi
        i=$((i + 1))
        sleep 0.005
    done
    set +e
    wait "$pid"
    local st=$?
    set -e
    [ "$st" -eq 137 ]
}

# ---- a merge killed mid-way ----
killed=0
for mib in 256 1024; do
    make_src "$mib"
    if kill_mid "$SHS_BIN" merge --jobs 1 "$WORK/src" "$WORK/dst"; then
        killed=1
        break
    fi
    rm -rf "$WORK/dst" "$WORK"/dst.tmp-*
done
CHECKS=$((CHECKS + 1))
if [ "$killed" -eq 1 ]; then
    pass "merge killed mid-way (SIGKILL)"
else
    fail "merge finished before it could be killed, even with 1 GiB"
fi
TMP=$(ls -d "$WORK"/dst.tmp-* 2>/dev/null | grep -v '\.lock$' | head -1 || true)
CHECKS=$((CHECKS + 1))
if [ -n "$TMP" ] && [ -d "$TMP" ] && [ -f "$TMP.lock" ] && [ ! -e "$WORK/dst" ]; then
    pass "the killed merge left $(basename "$TMP") and its lock file, no output"
else
    fail "expected a temporary output and its lock file: $(ls -a "$WORK")"
fi
BYTES=$(find "$TMP" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')

# ls of the (absent) destination lists it, with its size
expect 0 "ls of a destination that does not exist, beside a leftover" "$SHS_BIN" ls "$WORK/dst"
has "$WORK/out" "leftover (killed merge): $TMP (" "ls: the leftover, its tool and path"
expect 0 "ls --json" "$SHS_BIN" ls --json "$WORK/dst"
BYTES="$BYTES" TMP="$TMP" py "ls --json: status leftover, its exact size" <<'EOF'
import json, os
d = json.load(open(os.environ["WORK"] + "/out"))
[l] = d["tool_leftovers"]
assert l["path"] == os.environ["TMP"], l
assert l["tool"] == "merge" and l["status"] == "leftover", l
assert l["bytes"] == int(os.environ["BYTES"]) and l["bytes"] > 0, l
assert l["pid"] > 0, l
EOF

# a temporary held by a live process: "in use", never removed
make_src 1
LIVE="$WORK/dst.tmp-0123456789abcdef"
mkdir "$LIVE"
echo x >"$LIVE/model.safetensors"
printf 'pid %d\nhost h\ntool merge\n' $$ >"$LIVE.lock"
"$PY" - "$LIVE.lock" "$WORK/held" <<'EOF' &
import fcntl, os, sys, time
f = open(sys.argv[1], "r+")
fcntl.lockf(f, fcntl.LOCK_EX)  # conflicts with the library's OFD lock
open(sys.argv[2], "w").close()
time.sleep(600)
EOF
HOLDER=$!
for _ in $(seq 1000); do [ -e "$WORK/held" ] && break; sleep 0.01; done
expect 0 "ls beside a held temporary" "$SHS_BIN" ls "$WORK/dst"
has "$WORK/out" "in use (merge running, pid $$): $LIVE" "ls: the held temporary is in use"
has "$WORK/out" "leftover (killed merge): $TMP" "ls: and the killed one a leftover"

# the next merge: removes the killed run's leftover and says so, leaves
# the held one, succeeds
expect 0 "the next merge of the destination" "$SHS_BIN" merge "$WORK/src" "$WORK/dst"
has "$WORK/err" "removed $TMP (" "merge says it removed the leftover"
has "$WORK/err" "the temporary output of a killed merge" "merge says what it was"
has "$WORK/err" "$LIVE (" "merge names the held temporary"
has "$WORK/err" "still running (pid $$): left alone" "merge leaves the held temporary alone"
CHECKS=$((CHECKS + 1))
if [ ! -e "$TMP" ] && [ ! -e "$TMP.lock" ] && [ -d "$LIVE" ] && [ -f "$LIVE.lock" ] &&
    [ -f "$WORK/dst/model.safetensors" ]; then
    pass "leftover and its lock file gone, held temporary kept, output in place"
else
    fail "after the merge: $(ls -a "$WORK")"
fi

# the holder dies: now a leftover, removed by the next run
kill "$HOLDER"
wait "$HOLDER" 2>/dev/null || true
expect 0 "ls after the holder died" "$SHS_BIN" ls "$WORK/dst"
has "$WORK/out" "leftover (killed merge): $LIVE (" "ls: the released temporary is a leftover"
expect 0 "a forced merge after it" "$SHS_BIN" merge --force "$WORK/src" "$WORK/dst"
has "$WORK/err" "removed $LIVE (" "merge removed it"
CHECKS=$((CHECKS + 1))
if [ -z "$(ls -d "$WORK"/dst.* 2>/dev/null)" ]; then
    pass "nothing beside the output"
else
    fail "left beside the output: $(ls -d "$WORK"/dst.*)"
fi
expect 0 "ls: a clean destination" "$SHS_BIN" ls --json "$WORK/dst"
py "ls --json: no tool leftovers" <<'EOF'
import json, os
assert json.load(open(os.environ["WORK"] + "/out"))["tool_leftovers"] == []
EOF

# a lock file whose directory is gone (a run killed after its rename):
# removed too; a name that only looks alike is not ours
touch "$WORK/dst.tmp-fedcba9876543210.lock" "$WORK/dst.tmp-notours"
expect 0 "merge beside a stale lock file" "$SHS_BIN" merge --force "$WORK/src" "$WORK/dst"
has "$WORK/err" "removed $WORK/dst.tmp-fedcba9876543210.lock, the lock file of a killed merge" \
    "merge says it removed the stale lock file"
CHECKS=$((CHECKS + 1))
if [ ! -e "$WORK/dst.tmp-fedcba9876543210.lock" ] && [ -e "$WORK/dst.tmp-notours" ]; then
    pass "stale lock file removed, a foreign name kept"
else
    fail "after the merge: $(ls -a "$WORK")"
fi
rm -f "$WORK/dst.tmp-notours"

# ---- reshard: ".tmp-<name>-*" beside the destination ----
expect 0 "trainer saves step 20" "$TRAINER" --steps 20 --save-path "$WORK/ck" --save-interval 20 \
    --log-every 0
RTMP="$WORK/.tmp-rs-0011223344556677"
mkdir "$RTMP"
head -c 4096 /dev/zero >"$RTMP/checkpoint-model-0000000-0000002.safetensors"
printf 'pid 999999999\nhost h\ntool reshard\n' >"$RTMP.lock"
expect 0 "ls beside a killed reshard's temporary" "$SHS_BIN" ls "$WORK/rs"
has "$WORK/out" "leftover (killed reshard): $RTMP (4.0 KiB, 1 files)" "ls: the reshard leftover"
expect 0 "reshard into the destination" "$SHS_BIN" reshard "$WORK/ck" "$WORK/rs" --world-size 2
has "$WORK/err" "removed $RTMP (4.0 KiB, 1 files), the temporary output of a killed reshard" \
    "reshard says it removed the leftover"
CHECKS=$((CHECKS + 1))
if [ ! -e "$RTMP" ] && [ ! -e "$RTMP.lock" ] && [ -z "$(ls -a "$WORK" | grep '^\.tmp-')" ]; then
    pass "reshard leftover gone, nothing of its own left"
else
    fail "after the reshard: $(ls -a "$WORK")"
fi
expect 0 "verify the reshard's output" "$SHS_BIN" verify "$WORK/rs"

finish
