# strategy.sh -- MindSpore strategy files (the protobuf ParallelStrategyMap,
# written here byte by byte by tests/cli/mkstrategy.py): `reshard
# --strategy` writes chunks that are exactly the boxes an independent model
# of MindSpore's rules gives each rank (dp x tp, optimizer shard, nested
# tensor_map, merged pipeline stages, --rank-list), `--print-layout` shows
# the layout; `merge --src-strategy` assembles MindSpore rank_N folders
# (seed 004's unified_safetensors), with and without redundancy removed,
# pipeline stages, hyper-parameters; every hostile strategy file or folder
# is a clear error that leaves nothing behind.
. "$(dirname "$0")/lib.bash"

nothing_left() {  # DST DESCRIPTION
    CHECKS=$((CHECKS + 1))
    local left
    left=$(ls -d "$1" "$(dirname "$1")"/.tmp-* "$1".* 2>/dev/null || true)
    if [ -n "$left" ]; then fail "$2: left behind: $left"; else pass "$2: nothing left behind"; fi
}

# ---- the model, the strategies ----
"$PY" - <<'EOF'
import os, json, numpy as np, mkst, mkstrategy as ms
W = os.environ["WORK"]
rng = np.random.default_rng(5)
full = {
    "w": rng.standard_normal((8, 6)).astype(np.float32),          # tp rows
    "adam_m.w": rng.standard_normal((8, 6)).astype(np.float32),   # tp rows + optimizer shard
    "emb": rng.standard_normal((12, 4)).astype(np.float32),       # nested: dp and tp
    "b": rng.standard_normal(6).astype(np.float32),               # replicated
    "ids": np.arange(12, dtype=np.int32).reshape(3, 4),            # tp columns
}
os.makedirs(f"{W}/src")
mkst.write(f"{W}/src/model.safetensors", [mkst.entry(k, v) for k, v in full.items()])
np.savez(f"{W}/full.npz", **full)
dptp = [
    dict(name="w", dev=[2, 2], tmap=[0, -1]),
    dict(name="adam_m.w", dev=[2, 2], tmap=[0, -1], opt_step=2, opt_size=2),
    dict(name="emb", dev=[2, 2], tmap=[[1, 0], -1]),
    dict(name="b", dev=[2, 2], tmap=[-1]),
    dict(name="ids", dev=[2, 2], tmap=[-1, 0]),
    dict(name="gone", dev=[2, 2], tmap=[0]),          # not in the checkpoint: ignored
]
ms.write(f"{W}/dptp.ckpt", dptp)
# two pipeline stages of 2 devices, merged ("<stage>-<name>")
pipe = [
    dict(name="0-w", dev=[2], tmap=[0, -1]),
    dict(name="0-adam_m.w", dev=[2], tmap=[-1, 0]),
    dict(name="1-emb", dev=[2], tmap=[0, -1]),
    dict(name="0-b", dev=[2], tmap=[-1]),
    dict(name="1-b", dev=[2], tmap=[-1]),
    dict(name="1-ids", dev=[2], tmap=[-1, 0]),
]
ms.write(f"{W}/pipe.ckpt", pipe)
json.dump({"dptp": dptp, "pipe": pipe}, open(f"{W}/params.json", "w"))
EOF

# check_chunks DIR STRATEGY [RANK-MAP]: every tensor's chunks are, per rank,
# the boxes mkstrategy's model gives it (tensors the file does not name:
# the whole tensor on every rank).
cat >"$WORK/chunks.py" <<'EOF'
import json, sys, os, numpy as np, mkstrategy as ms
W = os.environ["WORK"]
out, which = sys.argv[1], sys.argv[2]
rmap = [int(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else None
params = json.load(open(f"{W}/params.json"))[which]
full = dict(np.load(f"{W}/full.npz"))
meta = json.load(open(f"{out}/metadata.json"))
rank_of = [f["rank"] for f in meta["files"]]
by_name = {}
for p in params:
    st, _, name = p["name"].partition("-") if which == "pipe" else ("0", "", p["name"])
    by_name.setdefault(name, (p, []))[1].append(int(st))
world = 4
for name, a in full.items():
    got = sorted((rank_of[c["file"]], c["offset"], c["shape"]) for c in meta["tensors"][name]["chunks"])
    if name in by_name:
        p, stages = by_name[name]
        sl = ms.slices(p, list(a.shape), stage_devices=2 if which == "pipe" else None, stages=stages)
    else:
        sl = {r: ([0] * a.ndim, list(a.shape)) for r in range(world)}
    want = sorted(((rmap[d] if rmap else d), off, size) for d, (off, size) in sl.items())
    assert got == want, (name, got, want)
print("chunks ok")
EOF

expect 0 "reshard to a dp 2 x tp 2 strategy" "$SHS_BIN" reshard "$WORK/src" "$WORK/o_dptp" --strategy "$WORK/dptp.ckpt" --no-fsync --json
py "--json names the strategy file; 4 ranks" <<EOF
import json
d = json.load(open("$WORK/out"))
assert d["layout"] == "$WORK/dptp.ckpt" and d["world_size"] == 4 and d["tensor_count"] == 5, d
EOF
py "dp x tp: each rank's chunks are its boxes (optimizer shard, nested map, replicas)" <<EOF
import subprocess, sys
subprocess.run([sys.executable, "$WORK/chunks.py", "$WORK/o_dptp", "dptp"], check=True)
EOF
expect 0 "the output verifies" "$SHS_BIN" verify "$WORK/o_dptp"
expect 0 "the output holds the source's values" "$SHS_BIN" diff "$WORK/src" "$WORK/o_dptp"

expect 0 "reshard to merged pipeline stages with a rank list" "$SHS_BIN" reshard "$WORK/src" "$WORK/o_pipe" --strategy "$WORK/pipe.ckpt" --rank-list 3,1,2,0 --no-fsync
py "pipeline: stage s holds devices 2s, 2s+1, mapped through the rank list" <<EOF
import subprocess, sys
subprocess.run([sys.executable, "$WORK/chunks.py", "$WORK/o_pipe", "pipe", "3,1,2,0"], check=True)
EOF
expect 0 "the pipeline output equals the source" "$SHS_BIN" diff "$WORK/src" "$WORK/o_pipe"

expect 0 "--print-layout of a strategy file" "$SHS_BIN" reshard --strategy "$WORK/dptp.ckpt" --print-layout --json
py "the layout document" <<EOF
import json
L = json.load(open("$WORK/out"))["layout"]
assert L["world_size"] == 4, L
t = L["tensors"]
assert t["adam_m.w"] == {"device_matrix": [2, 2], "tensor_map": [[0, 1], -1]}, t
assert t["emb"] == {"device_matrix": [2, 2], "tensor_map": [[1, 0], -1]}, t
assert t["b"] == {"device_matrix": [2, 2], "tensor_map": [-1]}, t
assert "gone" in t
EOF
expect 0 "--print-layout of a merged pipeline file" "$SHS_BIN" reshard --strategy "$WORK/pipe.ckpt" --print-layout
has "$WORK/out" '"b": {"device_matrix": [2, 2], "tensor_map": [-1], "rank_list": [0, 1, 2, 3]}' "a parameter of both stages: replicated over them"
has "$WORK/out" '"w": {"device_matrix": [2], "tensor_map": [0, -1], "rank_list": [0, 1]}' "stage 0's parameter on ranks 0, 1"

# ---- usage errors ----
expect 2 "--layout and --strategy" "$SHS_BIN" reshard "$WORK/src" "$WORK/bad" --strategy "$WORK/dptp.ckpt" --layout x.json
expect 2 "--rank-list without --strategy" "$SHS_BIN" reshard "$WORK/src" "$WORK/bad" --rank-list 0,1
expect 2 "--rank-list that is not a list" "$SHS_BIN" reshard "$WORK/src" "$WORK/bad" --strategy "$WORK/dptp.ckpt" --rank-list 0,,1
expect 1 "--rank-list that is not a permutation" "$SHS_BIN" reshard "$WORK/src" "$WORK/bad" --strategy "$WORK/dptp.ckpt" --rank-list 0,1,1,3
has "$WORK/err" "must hold each of the ranks 0 to 3 once" "the rank list problem is named"
nothing_left "$WORK/bad" "bad rank list"

# ---- hostile strategy files: a clear error, nothing written ----
"$PY" - <<'EOF'
import os, mkstrategy as ms
W = os.environ["WORK"]
good = ms.strategy_bytes([dict(name="w", dev=[2, 2], tmap=[0, -1])])
bad = {
    "truncated": good[:-3],
    "wiretype": ms.f_bytes(1, b"\x01"),                       # current_stage as bytes
    "hugecount": ms.f_varint(1, 1) + ms.key(3, 2) + ms.varint(1 << 40) + b"x",
    "norequired": ms.f_bytes(3, ms.f_bytes(1, b"w")),           # a layout item without layouts
    "outofrange": ms.strategy_bytes([dict(name="w", dev=[2, 2], tmap=[2, -1])]),
    "twice": ms.strategy_bytes([dict(name="w", dev=[2, 2], tmap=[1, 1])]),
    "zerodev": ms.strategy_bytes([dict(name="w", dev=[2, 0], tmap=[0, -1])]),
    "bigdev": ms.strategy_bytes([dict(name="w", dev=[65536, 65536], tmap=[0, -1])]),
    "empty": b"",
    "noparams": ms.f_varint(1, 1),
    "field": ms.strategy_bytes([dict(name="w", dev=[2, 2], tmap=[0, -1], field=2)]),
    "opt": ms.strategy_bytes([dict(name="w", dev=[2, 2], tmap=[0, -1], opt_step=2, opt_size=4)]),
    "stages": ms.strategy_bytes([dict(name="0-w", dev=[2], tmap=[0, -1]),
                                 dict(name="2-b", dev=[2], tmap=[-1])]),
}
for k, v in bad.items():
    open(f"{W}/{k}.ckpt", "wb").write(v)
EOF
hostile() {  # NAME STATUS MESSAGE
    expect "$2" "hostile strategy file: $1" "$SHS_BIN" reshard "$WORK/src" "$WORK/bad" --strategy "$WORK/$1.ckpt" --no-fsync
    has "$WORK/err" "$3" "$1: the problem is named"
    has "$WORK/err" "$1.ckpt" "$1: the file is named"
    nothing_left "$WORK/bad" "$1"
}
hostile truncated 1 "not a valid ParallelStrategyMap"
hostile wiretype 1 "not a valid ParallelStrategyMap"
hostile hugecount 1 "not a valid ParallelStrategyMap"
hostile norequired 1 "not a valid ParallelStrategyMap"
hostile outofrange 1 "tensor_map value 2 is out of range for a device matrix of 2 axes"
hostile twice 1 "uses mesh axis value 1 twice"
hostile zerodev 1 "dev_matrix must hold positive sizes"
hostile bigdev 1 "product is at most"
hostile empty 1 "empty: not a strategy file"
hostile noparams 1 "describes no parameter"
hostile field 1 "a field split (field 2) is not supported"
hostile opt 1 "opt_weight_shard_size 4"
hostile stages 1 "pipeline stage 1 of 0..2 has no parameter"
"$PY" - <<'EOF'
import os, mkstrategy as ms
ms.write(os.environ["WORK"] + "/othernames.ckpt", [dict(name="model.layers.0.w", dev=[2], tmap=[0, -1])])
EOF
expect 1 "a strategy file naming none of the checkpoint's tensors" "$SHS_BIN" reshard "$WORK/src" "$WORK/bad" --strategy "$WORK/othernames.ckpt"
has "$WORK/err" "none of its 1 parameters is a tensor of the checkpoint" "different names are not silently replicated"
nothing_left "$WORK/bad" "names that differ"
expect 1 "a strategy file that does not exist" "$SHS_BIN" reshard "$WORK/src" "$WORK/bad" --strategy "$WORK/nosuch.ckpt"
has "$WORK/err" "nosuch.ckpt" "the missing file is named"
nothing_left "$WORK/bad" "missing strategy file"

# ---- merge: MindSpore rank_N folders laid out by a strategy file ----
# mkranks DIR WHICH [dedup]: rank_r/checkpoint_r.safetensors with each
# rank's slices (mkstrategy's model), plus global_step (a hyper-parameter
# the strategy does not name) in every rank; dedup: only the first holder of
# each slice keeps it (remove_redundancy).
cat >"$WORK/mkranks.py" <<'EOF'
import json, sys, os, numpy as np, mkst, mkstrategy as ms
W = os.environ["WORK"]
out, which = sys.argv[1], sys.argv[2]
dedup = len(sys.argv) > 3
params = json.load(open(f"{W}/params.json"))[which]
full = dict(np.load(f"{W}/full.npz"))
per_rank = {r: [] for r in range(4)}
seen = set()
names = {}
for p in params:
    st, _, name = p["name"].partition("-") if which == "pipe" else ("0", "", p["name"])
    names.setdefault(name, (p, []))[1].append(int(st))
for name, (p, stages) in names.items():
    if name not in full:
        continue
    sl = ms.slices(p, list(full[name].shape), stage_devices=2 if which == "pipe" else None, stages=stages)
    for r, (off, size) in sorted(sl.items()):
        key = (name, tuple(off))
        if dedup and key in seen:
            continue
        seen.add(key)
        per_rank[r].append(mkst.entry(name, np.ascontiguousarray(ms.cut(full[name], off, size))))
for r, entries in per_rank.items():
    entries.append(mkst.entry("global_step", np.array([7], dtype=np.int32)))
    os.makedirs(f"{out}/rank_{r}")
    mkst.write(f"{out}/rank_{r}/checkpoint_{r}-1_1.safetensors", entries, metadata={"format": "ms"})
EOF
cat >"$WORK/merged.py" <<'EOF'
import sys, os, numpy as np, mkst
W = os.environ["WORK"]
dst, want = sys.argv[1], sys.argv[2].split(",")
full = dict(np.load(f"{W}/full.npz"))
full["global_step"] = np.array([7], dtype=np.int32)
n, hdr, out, meta = mkst.read(f"{dst}/model.safetensors")
assert sorted(out) == sorted(want), (sorted(out), want)
for k in want:
    dt, shape, data = out[k]
    assert list(shape) == list(full[k].shape), k
    assert data == full[k].tobytes(), k
print("merged ok")
EOF
run_ranks() { "$PY" "$WORK/mkranks.py" "$@"; }

run_ranks "$WORK/r_dptp" dptp
expect 0 "merge rank folders laid out by a dp x tp strategy" "$SHS_BIN" merge "$WORK/r_dptp" "$WORK/m_dptp" --src-strategy "$WORK/dptp.ckpt"
has "$WORK/out" "4 tensors in 1 file" "model tensors only: adam_m.* and hyper-parameters are optimizer state"
py "the complete model tensors" <<EOF
import subprocess, sys
subprocess.run([sys.executable, "$WORK/merged.py", "$WORK/m_dptp", "w,emb,b,ids"], check=True)
EOF
rm -rf "$WORK/m_dptp"
expect 0 "merge with the optimizer state" "$SHS_BIN" merge "$WORK/r_dptp" "$WORK/m_dptp" --src-strategy "$WORK/dptp.ckpt" --with-optimizer
py "every tensor complete: the optimizer shard's slices assembled" <<EOF
import subprocess, sys
subprocess.run([sys.executable, "$WORK/merged.py", "$WORK/m_dptp", "w,adam_m.w,emb,b,ids,global_step"], check=True)
EOF

run_ranks "$WORK/r_dedup" dptp dedup
expect 0 "merge rank folders with redundancy removed" "$SHS_BIN" merge "$WORK/r_dedup" "$WORK/m_dedup" --src-strategy "$WORK/dptp.ckpt" --with-optimizer -j 2
py "each slice from the one rank that kept it" <<EOF
import subprocess, sys
subprocess.run([sys.executable, "$WORK/merged.py", "$WORK/m_dedup", "w,adam_m.w,emb,b,ids,global_step"], check=True)
EOF

run_ranks "$WORK/r_pipe" pipe
expect 0 "merge rank folders of two pipeline stages" "$SHS_BIN" merge "$WORK/r_pipe" "$WORK/m_pipe" --src-strategy "$WORK/pipe.ckpt" --with-optimizer
py "pipeline stages assembled" <<EOF
import subprocess, sys
subprocess.run([sys.executable, "$WORK/merged.py", "$WORK/m_pipe", "w,adam_m.w,emb,b,ids,global_step"], check=True)
EOF

# ---- merge: bad rank folders ----
cp -r "$WORK/r_dedup" "$WORK/r_missing"
"$PY" - <<'EOF'
import os, mkst
W = os.environ["WORK"]
# rank_1 kept w's rows 4..8 alone: drop them
p = f"{W}/r_missing/rank_1/checkpoint_1-1_1.safetensors"
n, hdr, out, meta = mkst.read(p)
mkst.write(p, [(k, dt, s, d) for k, (dt, s, d) in out.items() if k != "w"], metadata=meta)
EOF
expect 1 "a slice in no rank's file" "$SHS_BIN" merge "$WORK/r_missing" "$WORK/bad" --src-strategy "$WORK/dptp.ckpt"
has "$WORK/err" "tensor 'w': the slice at [4, 0]" "the missing slice is named"
has "$WORK/err" "is in no rank's file" "why"
nothing_left "$WORK/bad" "missing slice"

cp -r "$WORK/r_dptp" "$WORK/r_shape"
"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
p = f"{W}/r_shape/rank_2/checkpoint_2-1_1.safetensors"
n, hdr, out, meta = mkst.read(p)
ents = [(k, dt, s, d) for k, (dt, s, d) in out.items() if k != "ids"]
ents.append(mkst.entry("ids", np.zeros((3, 3), np.int32)))
mkst.write(p, ents, metadata=meta)
EOF
expect 1 "a slice of the wrong shape" "$SHS_BIN" merge "$WORK/r_shape" "$WORK/bad" --src-strategy "$WORK/dptp.ckpt"
has "$WORK/err" "tensor 'ids' is [3, 3]; the strategy says it should be [3, 2]" "the shape problem is named"
nothing_left "$WORK/bad" "wrong slice shape"

cp -r "$WORK/r_dptp" "$WORK/r_beyond" && mkdir "$WORK/r_beyond/rank_9"
expect 1 "a rank folder beyond the strategy's devices" "$SHS_BIN" merge "$WORK/r_beyond" "$WORK/bad" --src-strategy "$WORK/dptp.ckpt"
has "$WORK/err" "rank_9: the strategy file describes ranks 0 to 3 only" "the folder is named"

cp -r "$WORK/r_dptp" "$WORK/r_two" && cp "$WORK/r_two/rank_0/checkpoint_0-1_1.safetensors" "$WORK/r_two/rank_0/checkpoint_0-2_1.safetensors"
expect 1 "two files in a rank folder" "$SHS_BIN" merge "$WORK/r_two" "$WORK/bad" --src-strategy "$WORK/dptp.ckpt"
has "$WORK/err" "holds several .safetensors files" "the choice is refused, not guessed"

mkdir -p "$WORK/r_none"
expect 1 "no rank folders" "$SHS_BIN" merge "$WORK/r_none" "$WORK/bad" --src-strategy "$WORK/dptp.ckpt"
has "$WORK/err" "no rank_0, rank_1, ... folders" "an empty source is named"
expect 1 "a hostile strategy file for merge" "$SHS_BIN" merge "$WORK/r_dptp" "$WORK/bad" --src-strategy "$WORK/truncated.ckpt"
has "$WORK/err" "truncated.ckpt: not a strategy file" "the file and the problem"
expect 1 "--src-strategy with a file as SRC" "$SHS_BIN" merge "$WORK/src/model.safetensors" "$WORK/bad" --src-strategy "$WORK/dptp.ckpt"
has "$WORK/err" "a folder of rank_N folders" "what SRC must be"
nothing_left "$WORK/bad" "bad merge sources"

finish
