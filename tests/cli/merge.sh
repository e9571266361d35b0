# merge.sh -- `shardsafe merge`: output files byte-identical to an
# independent Python writer (mkst.py) for the same tensors and metadata,
# the index byte-identical to Python's json.dumps(indent=2, sort_keys=True)
# as transformers writes it, shard packing, --dtype, globs, renames,
# --with-optimizer, --jobs, --part/--finish-parts, --json; trainer and
# (with MPI) 4-rank checkpoints with and without remove_redundancy; every
# bad input gives a clear error and leaves no output and no temporary.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }

# no DST, no DST.* sibling (temporaries, parts)
nothing_left() {  # DST DESCRIPTION
    CHECKS=$((CHECKS + 1))
    local left
    left=$(ls -d "$1" "$1".* 2>/dev/null || true)
    if [ -n "$left" ]; then
        fail "$2: left behind: $left"
    else
        pass "$2: nothing left behind"
    fi
}

# ---- a plain folder of many dtypes: the source and the expected bytes ----
mkdir -p "$WORK/src"
"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
rng = np.random.default_rng(7)
a = {
    "layers.0.w": rng.standard_normal((6, 5)).astype(np.float32),
    "layers.0.b": rng.standard_normal(5).astype(np.float64),
    "layers.1.w": rng.standard_normal((3, 4, 2)).astype(np.float16),
    "ids": np.arange(-4, 8, dtype=np.int64).reshape(3, 4),
    "mask": np.array([True, False, True]),
    "bytes": np.arange(9, dtype=np.uint8),
    "caf\u00e9.\u20ac": np.arange(4, dtype=np.int32),   # non-ASCII name
    "q\"uote": np.ones(2, np.float32),
}
mkst.write(f"{W}/src/a.safetensors", [mkst.entry(k, v) for k, v in list(a.items())[:4]])
mkst.write(f"{W}/src/b.safetensors", [mkst.entry(k, v) for k, v in list(a.items())[4:]])
np.save(f"{W}/ref.npy", np.array([0]))  # marker
import pickle
pickle.dump({k: (v.dtype.str, v.shape, v.tobytes()) for k, v in a.items()}, open(f"{W}/ref.pkl", "wb"))
EOF

# check.py DST [dtype-of-floats] [prefix-map]: every output file equals
# mkst's bytes for its tensors with __metadata__ {"format": "pt"}; the index
# (when several files) equals json.dumps(indent=2, sort_keys=True) + "\n";
# values equal the reference.
# The grouping into files and the index text are checked against hfgroup.py
# (an independent model of huggingface_hub's and older transformers'
# algorithms): CHECK_MAX is the shard size, CHECK_GROUPING current (the
# default) or legacy, CHECK_NOT_PARAMS a name prefix that total_parameters
# does not count (optimizer state).
cat >"$WORK/check.py" <<'EOF'
import json, os, pickle, sys, numpy as np, mkst, hfgroup
W = os.environ["WORK"]
dst = sys.argv[1]
MAX = int(os.environ.get("CHECK_MAX", "5000000000"))
GROUPING = os.environ.get("CHECK_GROUPING", "current")
NOT_PARAMS = os.environ.get("CHECK_NOT_PARAMS", "")
names = sorted(os.listdir(dst))
files = [n for n in names if n.endswith(".safetensors")]
tensors = {}
for f in files:
    raw = open(os.path.join(dst, f), "rb").read()
    n, hdr, out, meta = mkst.read(os.path.join(dst, f))
    assert meta == {"format": "pt"}, (f, meta)
    entries = [(k, dt, shape, data) for k, (dt, shape, data) in out.items()]
    h = mkst.header_bytes(mkst.ref_order(entries), {"format": "pt"})
    body = b"".join(e[3] for e in mkst.ref_order(entries))
    want = len(h).to_bytes(8, "little") + h + body
    assert raw == want, f"{f}: not the reference writer's bytes"
    for k, v in out.items():
        assert k not in tensors, k
        tensors[k] = (f, v)
if len(files) == 1:
    assert files == ["model.safetensors"] and names == files, names
else:
    n = len(files)
    assert files == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)], files
    assert names == files + ["model.safetensors.index.json"], names
    raw = open(os.path.join(dst, "model.safetensors.index.json"), "rb").read()
    ix = json.loads(raw)
    assert raw == (json.dumps(ix, indent=2, sort_keys=True) + "\n").encode(), "index text"
    keys = ["total_parameters", "total_size"] if GROUPING == "current" else ["total_size"]
    assert list(ix) == ["metadata", "weight_map"] and list(ix["metadata"]) == keys, ix["metadata"]
    assert ix["weight_map"] == {k: f for k, (f, _) in tensors.items()}, "weight_map"
    assert ix["metadata"]["total_size"] == sum(len(v[2]) for _, v in tensors.values())
# the files and the index as the independent model groups them
sizes = {k: len(v[2]) for k, (_, v) in tensors.items()}
want = hfgroup.plan(list(sizes.items()), MAX, GROUPING)
got = {f: sorted(k for k, (ff, _) in tensors.items() if ff == f) for f in files}
assert got == {f: sorted(v) for f, v in want.items()}, (GROUPING, got, want)
if len(files) > 1:
    params = sum(int(np.prod(v[1], dtype=np.uint64)) for k, (_, v) in tensors.items()
                 if not (NOT_PARAMS and k.startswith(NOT_PARAMS)))
    assert raw == hfgroup.index_text(want, sizes, GROUPING, params).encode(), "index != model's"

if len(sys.argv) > 2 and sys.argv[2] == "plainsrc":
    ref = pickle.load(open(f"{W}/ref.pkl", "rb"))
    to = sys.argv[3] if len(sys.argv) > 3 else ""
    ren = dict(x.split("=", 1) for x in sys.argv[4:])
    want = {}
    for k, (dt, shape, data) in ref.items():
        for a, b in ren.items():
            k = k.replace(a, b)
        want[k] = (dt, shape, data)
    assert set(tensors) == set(want), (sorted(tensors), sorted(want))
    for k, (f, (dt, shape, data)) in tensors.items():
        rdt, rshape, rdata = want[k]
        assert list(shape) == list(rshape), k
        a = np.frombuffer(rdata, np.dtype(rdt))
        if to == "BF16" and a.dtype.kind == "f":
            assert dt == "BF16", (k, dt)
            assert data == mkst.bf16_rne(a.astype(np.float32)).tobytes(), k
        else:
            assert data == rdata, k
print("ok", len(files), "files", len(tensors), "tensors")
EOF

expect 0 "--help" "$SHS_BIN" merge --help
has "$WORK/out" "Usage: shardsafe merge SRC DST" "help text"
CHECKS=$((CHECKS + 1))
[ ! -s "$WORK/err" ] && pass "--help: nothing on stderr" || { fail "--help wrote to stderr"; show_output; }
expect 0 "help merge" "$SHS_BIN" help merge
expect 2 "no SRC and DST" "$SHS_BIN" merge
has "$WORK/err" "needs SRC and DST" "missing operands"

expect 0 "merge a plain folder into one file" "$SHS_BIN" merge "$WORK/src" "$WORK/o1"
has "$WORK/out" "8 tensors in 1 file" "summary"
py "one file: reference bytes, values" <<EOF
import subprocess, sys
subprocess.run([sys.executable, "$WORK/check.py", "$WORK/o1", "plainsrc"], check=True)
EOF

expect 0 "merge into 100-byte shards with 2 jobs" "$SHS_BIN" merge "$WORK/src" "$WORK/o2" --max-shard-size 100 -j 2
py "shards: reference bytes, index text as transformers" <<EOF
import subprocess, sys, os
os.environ["CHECK_MAX"] = "100"
subprocess.run([sys.executable, "$WORK/check.py", "$WORK/o2", "plainsrc"], check=True)
assert len([f for f in os.listdir("$WORK/o2") if f.endswith(".safetensors")]) >= 4
EOF
py "current grouping: a tensor larger than the shard size does not close the open file" <<EOF
import json
ix = json.load(open("$WORK/o2/model.safetensors.index.json"))
wm = ix["weight_map"]
assert wm["layers.0.w"] == "model-00003-of-00004.safetensors", wm
assert wm["layers.0.b"] == wm["layers.1.w"] == wm["mask"] == "model-00004-of-00004.safetensors", wm
assert ix["metadata"]["total_parameters"] == 30 + 5 + 24 + 12 + 3 + 9 + 4 + 2, ix["metadata"]
EOF
expect 0 "--grouping legacy" "$SHS_BIN" merge "$WORK/src" "$WORK/o2legacy" --max-shard-size 100 --grouping legacy
py "legacy grouping: files and index as transformers < 4.42" <<EOF
import subprocess, sys, os, json
os.environ.update(CHECK_MAX="100", CHECK_GROUPING="legacy")
subprocess.run([sys.executable, "$WORK/check.py", "$WORK/o2legacy", "plainsrc"], check=True)
wm = json.load(open("$WORK/o2legacy/model.safetensors.index.json"))["weight_map"]
assert wm["layers.0.w"] == "model-00004-of-00005.safetensors" != wm["layers.0.b"], wm
EOF
expect 2 "--grouping of an unknown kind" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --grouping newest
has "$WORK/err" "--grouping needs 'current' or 'legacy', not 'newest'" "grouping error"
expect 0 "the same shards with 1 job" "$SHS_BIN" merge "$WORK/src" "$WORK/o2j1" --max-shard-size 100
CHECKS=$((CHECKS + 1))
if diff -r "$WORK/o2" "$WORK/o2j1" >/dev/null; then pass "--jobs 2 and 1: identical output"; else fail "--jobs 2 and 1 differ"; fi
expect 0 "the sharded output reads back (verify)" "$SHS_BIN" verify "$WORK/o2"
expect 0 "the sharded output equals the source (diff)" "$SHS_BIN" diff "$WORK/src" "$WORK/o2"

expect 0 "--dtype bf16 and renames" "$SHS_BIN" merge "$WORK/src" "$WORK/o3" --dtype bfloat16 --rename layers.=model.layers. --rename .w=.weight
py "--dtype bf16: floats rounded to nearest even, the rest copied; renamed" <<EOF
import subprocess, sys
subprocess.run([sys.executable, "$WORK/check.py", "$WORK/o3", "plainsrc", "BF16", "layers.=model.layers.", ".w=.weight"], check=True)
EOF

expect 0 "--include and --exclude" "$SHS_BIN" merge "$WORK/src" "$WORK/o4" --include 'layers.*' --include ids --exclude '*.b' --json
py "--json: schema 2 and the counts" <<EOF
import json
d = json.load(open("$WORK/out"))
assert d["schema"] == 2 and d["command"] == "merge" and d["ok"] is True, d
assert d["tensor_count"] == 3 and d["file_count"] == 1 and d["files_written"] == 1, d
assert d["source"] == "$WORK/src" and d["destination"] == "$WORK/o4", d
assert d["part"] is None and d["total_size"] == d["bytes_written"] == 6*5*4 + 3*4*2*2 + 12*8, d
EOF

# ---- split across "machines" ----
for i in 0 1 2; do
    expect 0 "part $i of 3" "$SHS_BIN" merge "$WORK/src" "$WORK/o5" --max-shard-size 100 --part "$i/3"
done
has "$WORK/out" "run --finish-parts" "a part says what comes next"
[ ! -e "$WORK/o5" ] && pass "no DST before the final step" || fail "DST exists before the final step"
expect 0 "--finish-parts 3" "$SHS_BIN" merge "$WORK/src" "$WORK/o5" --max-shard-size 100 --finish-parts 3
CHECKS=$((CHECKS + 1))
if diff -r "$WORK/o2" "$WORK/o5" >/dev/null; then pass "parts: the same files as one merge"; else fail "parts differ from one merge"; fi
CHECKS=$((CHECKS + 1))
if ls -d "$WORK"/o5.* >/dev/null 2>&1; then fail "part directories left"; else pass "part directories removed"; fi
expect 1 "--finish-parts without the parts" "$SHS_BIN" merge "$WORK/src" "$WORK/o6" --finish-parts 2
has "$WORK/err" "part 0 of 2 is missing" "missing part named"
nothing_left "$WORK/o6" "missing parts"

# ---- bad input ----
expect 1 "an include glob that selects nothing" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --include 'decoder.*'
has "$WORK/err" "include glob 'decoder.*' matches no" "glob named"
nothing_left "$WORK/bad" "glob selecting nothing"
expect 1 "globs that exclude everything" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --exclude '*'
has "$WORK/err" "nothing to merge" "empty selection"
expect 1 "rename rules that collide" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --rename .0.=. --rename .1.=.
has "$WORK/err" "tensors 'layers.0.w' and 'layers.1.w' would both be named 'layers.w'" "collision names both tensors"
nothing_left "$WORK/bad" "collision"
expect 2 "a shard size that is not a size" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --max-shard-size 5XB
has "$WORK/err" "unknown unit 'XB'" "size error"
expect 2 "a zero shard size" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --max-shard-size 0
expect 2 "--part out of range" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --part 3/3
has "$WORK/err" "--part needs I/N with 0 <= I < N" "part error"
expect 2 "--part not I/N" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --part 1
expect 2 "--rename without =" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --rename abc
expect 2 "an unknown --dtype" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --dtype int8
expect 2 "--part with --finish-parts" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --part 0/2 --finish-parts 2
expect 2 "--jobs 0" "$SHS_BIN" merge "$WORK/src" "$WORK/bad" --jobs 0
nothing_left "$WORK/bad" "usage errors"
expect 1 "an existing destination" "$SHS_BIN" merge "$WORK/src" "$WORK/o1"
has "$WORK/err" "exists" "existing DST named"
expect 0 "--force replaces an earlier merge" "$SHS_BIN" merge "$WORK/src" "$WORK/o1" --force --max-shard-size 100
py "--force: the new sharded output" <<EOF
import subprocess, sys, os
os.environ["CHECK_MAX"] = "100"
subprocess.run([sys.executable, "$WORK/check.py", "$WORK/o1", "plainsrc"], check=True)
EOF
mkdir -p "$WORK/mine" && echo keep >"$WORK/mine/notes.txt"
expect 1 "--force refuses a directory with other files" "$SHS_BIN" merge "$WORK/src" "$WORK/mine" --force
has "$WORK/err" "'notes.txt' is not a file that a merge writes" "foreign file named"
[ "$(cat "$WORK/mine/notes.txt")" = keep ] && pass "foreign directory untouched" || fail "foreign directory changed"
expect 1 "a source that does not exist" "$SHS_BIN" merge "$WORK/nosuch" "$WORK/bad"
nothing_left "$WORK/bad" "missing source"
# root writes anywhere: then the merge runs as nobody (setpriv), the tree
# readable to it
mkdir -p "$WORK/ro" && chmod 555 "$WORK/ro"
AS=()
if [ "$(id -u)" = 0 ]; then
    chmod -R a+rX "$WORK/src" && chmod a+x "$WORK"
    AS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
if [ ${#AS[@]} -eq 0 ] || "${AS[@]}" test -x "$SHS_BIN" -a -r "$WORK/src" 2>/dev/null; then
    expect 1 "a read-only destination directory" "${AS[@]}" "$SHS_BIN" merge "$WORK/src" "$WORK/ro/out"
    has "$WORK/err" "Permission denied" "read-only: the error says why"
    [ -z "$(ls -A "$WORK/ro")" ] && pass "read-only: nothing created" || fail "read-only: something created"
else
    skip "root, and user nobody cannot run $SHS_BIN or read the source: the read-only destination check"
fi
chmod 755 "$WORK/ro"

# ---- sub-byte tensors: whole-byte rows merge, others are refused by name ----
mkdir -p "$WORK/sub"
"$PY" - <<'EOF2'
import os, mkst
W = os.environ["WORK"]
mkst.write(f"{W}/sub/a.safetensors", [("odd", "F4", [2, 3], bytes([0x12, 0x34, 0x56])),
                                      ("even", "F6_E2M3", [3, 4], bytes(range(9)))])
EOF2
expect 1 "an F4 tensor with half-byte rows" "$SHS_BIN" merge "$WORK/sub" "$WORK/bad"
has "$WORK/err" "odd: a box of F4 elements must cover whole bytes" "the tensor is named"
nothing_left "$WORK/bad" "sub-byte tensor"
expect 0 "an F6 tensor with whole-byte rows" "$SHS_BIN" merge "$WORK/sub" "$WORK/sub.hf" --exclude odd
py "F6: bytes copied" <<EOF
import subprocess, sys, mkst
subprocess.run([sys.executable, "$WORK/check.py", "$WORK/sub.hf"], check=True)
n, hdr, out, meta = mkst.read("$WORK/sub.hf/model.safetensors")
assert out == {"even": ("F6_E2M3", [3, 4], bytes(range(9)))}, out
EOF

# ---- a trainer checkpoint, and a damaged copy ----
"$TRAINER" --steps 20 --save-path "$WORK/sp" --save-interval 10 --log-every 0 >"$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log" >&2; fail "trainer"; }
expect 0 "merge a trainer save path (model only)" "$SHS_BIN" merge "$WORK/sp" "$WORK/t1"
expect 0 "model weights equal the checkpoint" "$SHS_BIN" diff --kind model "$WORK/sp" "$WORK/t1"
expect 0 "merge step 10 with the optimizer" "$SHS_BIN" merge "$WORK/sp" "$WORK/t2" --step 10 --with-optimizer --max-shard-size 20KB
expect 0 "step 10, every tensor, equals the checkpoint" "$SHS_BIN" diff --kind all "$WORK/sp/iteration_00000010" "$WORK/t2"
py "trainer output: reference bytes and index" <<EOF
import subprocess, sys, os
os.environ.update(CHECK_MAX="20000", CHECK_NOT_PARAMS="optimizer.")
subprocess.run([sys.executable, "$WORK/check.py", "$WORK/t2"], check=True)
EOF
cp -r "$WORK/sp/iteration_00000020" "$WORK/damaged"
F=$(ls "$WORK/damaged"/*model*.safetensors | head -n 1)
"$PY" - "$F" <<'EOF'
import sys, struct
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n + 5] ^= 0x40     # a data byte of the first tensor
open(p, "wb").write(b)
EOF
expect 1 "a damaged chunk" "$SHS_BIN" merge "$WORK/damaged" "$WORK/bad" -j 2 --max-shard-size 1KB
has "$WORK/err" "$(basename "$F")" "the damaged file is named"
nothing_left "$WORK/bad" "damaged chunk"

cp -r "$WORK/sp/iteration_00000020" "$WORK/missing"
rm "$F" 2>/dev/null; F2=$(ls "$WORK/missing"/*model*.safetensors | head -n 1)
rm "$F2"
expect 1 "a data file missing" "$SHS_BIN" merge "$WORK/missing" "$WORK/bad"
has "$WORK/err" "$(basename "$F2")" "the missing file is named"
nothing_left "$WORK/bad" "missing data file"

# ---- a signal: either the merge finished (complete DST) or nothing is left.
# SIGTERM: a background job of a non-interactive shell ignores SIGINT, and
# merge leaves ignored signals ignored. ----
"$PY" - <<'EOF2'
import os, numpy as np, mkst
W = os.environ["WORK"]
os.makedirs(f"{W}/big", exist_ok=True)
rng = np.random.default_rng(3)
mkst.write(f"{W}/big/a.safetensors", [mkst.entry(f"t{i:02d}", rng.standard_normal((256, 1024)).astype(np.float32)) for i in range(24)])
EOF2
set +e
"$SHS_BIN" merge "$WORK/big" "$WORK/intr" --max-shard-size 3MB >"$WORK/out" 2>"$WORK/err" &
pid=$!
sleep 0.01
kill -TERM "$pid" 2>/dev/null || true
wait "$pid"
RC=$?
set -e
CHECKS=$((CHECKS + 1))
if [ "$RC" -eq 143 ]; then
    if ls -d "$WORK/intr" "$WORK"/intr.* >/dev/null 2>&1; then fail "SIGTERM: output left behind"; else pass "SIGTERM: killed by it, nothing left"; fi
elif [ "$RC" -eq 0 ]; then
    if "$SHS_BIN" diff -q "$WORK/big" "$WORK/intr"; then pass "SIGTERM came late: a complete output"; else fail "SIGTERM: exit 0 but the output differs"; fi
else
    fail "SIGTERM: exit status $RC"; show_output
fi

# ---- MPI: 4 ranks, with and without remove_redundancy ----
MPI_CKPT="$SHS_BUILD_DIR/mpi_ckpt"
if [ -x "$MPI_CKPT" ] && command -v mpirun >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for v in "grid" "replicated --remove-redundancy" "rows --remove-redundancy" "cols"; do
        set -- $v
        d="$WORK/m_$1${2:+_rr}"
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 300 mpirun --oversubscribe -np 4 "$MPI_CKPT" save "$d" 7 "$@" >"$WORK/mpi.log" 2>&1 ||
            { cat "$WORK/mpi.log" >&2; fail "mpi_ckpt save $v"; }
        expect 0 "4 ranks ($v): merge with the optimizer" "$SHS_BIN" merge "$d" "$d.hf" --with-optimizer --step 7
        py "4 ranks ($v): w = 100 i + j + 7, b = 1000 i + 7, the moment -(100 i + j)" <<EOF
import numpy as np, mkst
n, hdr, out, meta = mkst.read("$d.hf/model.safetensors")
i, j = np.meshgrid(np.arange(10), np.arange(6), indexing="ij")
assert out["w"][0] == "F32" and out["w"][1] == [10, 6]
assert np.array_equal(np.frombuffer(out["w"][2], np.float32).reshape(10, 6), (100 * i + j + 7).astype(np.float32))
assert np.array_equal(np.frombuffer(out["b"][2], np.int64), 1000 * np.arange(7) + 7)
assert np.array_equal(np.frombuffer(out["optimizer.exp_avg.w"][2], np.float32).reshape(10, 6), -(100 * i + j).astype(np.float32))
EOF
    done
else
    skip "no $MPI_CKPT or no mpirun: the MPI checks"
fi

finish
