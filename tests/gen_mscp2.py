#!/usr/bin/python3
"""gen_mscp2.py -- write a MindSpore Transformers "Checkpoint 2.0" save path
for tests, from the documented format (/work/shared/formats/mindspore-cp2.md,
docs/format.md); no MindSpore code.

    gen_mscp2.py OUT --ranks N [--step S] [--variant V] [--ref FILE]

OUT gets latest_checkpointed_iteration.txt ("S", no newline) and
iteration_%08d/ with common.json, metadata.json (N > 1 only: MindSpore
writes none for a single card) and per rank r
checkpoint-model-%07d(r)-%07d(N).safetensors and checkpoint-opt-....
N is 1 or 4 (device_matrix [2, 2]: dp x tp; --ranks 2 uses [1, 2]).
--ref FILE writes every global tensor whole into one plain safetensors
file: what a reader of OUT must find.

Each rank's slice of a parameter follows MindSpore's rules as the format
notes state them: the slice id of a rank is row-major over the mesh
coordinates of the flattened tensor_map (value m names mesh axis
len(device_matrix) - 1 - m, -1 none), and its box is, per dimension, the
row-major index over that dimension's mesh axes times dim // split.

--check-merged checks instead that OUT is what `shardsafe merge` of such a
directory must write (--with-optimizer: optimizer tensors included;
--bf16: merged with --dtype bf16).

--variant V breaks the result the way a hostile or damaged checkpoint
would (see VARIANTS); the default "good" does not.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

DTYPES = {  # MindSpore name -> (safetensors name, numpy storage type)
    "Float32": ("F32", np.float32),
    "BFloat16": ("BF16", np.uint16),
    "Int32": ("I32", np.int32),
}

# name, MindSpore dtype, global shape, tensor_map (None: no layout), file type
PARAMS = [
    ("decoder.layers.0.self_attention.linear_qkv.weight", "Float32", [8, 6], [0, -1], "model"),
    ("decoder.layers.0.mlp.linear_fc2.weight", "Float32", [4, 6], [-1, 0], "model"),
    ("decoder.layers.0.mlp.linear_fc1.weight", "Float32", [6, 4], [1, 0], "model"),
    ("embedding.word_embeddings.weight", "BFloat16", [8, 4], [[1, 0], -1], "model"),
    ("decoder.final_layernorm.weight", "Float32", [6], [-1], "model"),
    # a quote in the name: repr() writes the shard key with double quotes
    ("output_layer's.bias", "Float32", [4], [0], "model"),
    ("adam_m.decoder.layers.0.self_attention.linear_qkv.weight", "Float32", [8, 6], [0, -1], "opt"),
    ("adam_v.decoder.layers.0.mlp.linear_fc2.weight", "Float32", [4, 6], [-1, 0], "opt"),
    ("global_step", "Int32", [1], None, "opt"),
]

VARIANTS = [
    "good",
    "wrong_shape",      # global_shape of linear_qkv says 10 rows
    "local_shape",      # a chunk's local_shape is not its slice's
    "slice_outside",    # a chunk names slice 7 of a tensor of 2
    "missing_file",     # a data file is deleted
    "not_covering",     # slice 1 of linear_qkv and its storage are gone
    "slice_twice",      # a chunk is listed twice
    "key_twice",        # storage_data spells one shard twice
    "bad_key",          # a storage_data key that is no shard id
    "wrong_dtype",      # properties say Float16 where the files hold F32
    "fragments",        # axis_fragmentations disagree with the layout
    "interleaved",      # interleaved_parallel: true
    "file_lacks",       # storage names a file that lacks the tensor
    "file_shape",       # a file holds another shape than its slice
    "two_slices",       # one file named for two slices of a tensor
    "unused_key",       # a storage_data key no chunk uses
    "mixed_kind",       # a model tensor's replica named in an optimizer file
    "uneven",           # global_shape 7 rows cut in 2
    "no_storage",       # a chunk without its storage_data entry
]


def value(name, shape, ms_dtype):
    """The global tensor: k * 0.5 + base, exact in BF16."""
    n = int(np.prod(shape))
    base = float(sum(map(ord, name)) % 17) - 8.0
    v = base + 0.5 * (np.arange(n) % 200)
    if ms_dtype == "Int32":
        return np.full(shape, 2000, dtype=np.int32)
    f = v.astype(np.float32).reshape(shape)
    if ms_dtype == "BFloat16":
        return (f.view(np.uint32) >> 16).astype(np.uint16)
    return f


def save_safetensors(path, tensors, meta):
    """tensors: list of (name, st_dtype, array), written in that order."""
    header = {}
    if meta is not None:
        header["__metadata__"] = meta
    off = 0
    blobs = []
    for name, dt, arr in tensors:
        b = arr.tobytes() if isinstance(arr, _Shaped) else np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.rename(tmp, path)


def flat_map(tm):
    out = []
    for e in tm:
        out.extend(e if isinstance(e, list) else [e])
    return out


def coords(k, dm):
    """Mesh coordinates of rank position k, row-major (last axis fastest)."""
    c = [0] * len(dm)
    for a in reversed(range(len(dm))):
        c[a] = k % dm[a]
        k //= dm[a]
    return c


def slice_id(k, dm, tm):
    """_get_global_offset_and_replica_id_from_layout, as documented."""
    fm = flat_map(tm)
    c = coords(k, dm)
    sid = 0
    for p, m in enumerate(fm):
        if m == -1:
            continue
        right = 1
        for q in fm[p + 1:]:
            if q != -1:
                right *= dm[len(dm) - 1 - q]
        sid += c[len(dm) - 1 - m] * right
    return sid


def box(k, dm, tm, shape):
    """infer_slice_area_by_rank: per dimension, row-major over its axes."""
    c = coords(k, dm)
    start, size = [], []
    for d, e in enumerate(tm):
        axes = [m for m in (e if isinstance(e, list) else [e]) if m != -1]
        split, idx = 1, 0
        for m in axes:
            n = dm[len(dm) - 1 - m]
            idx = idx * n + c[len(dm) - 1 - m]
            split *= n
        part = shape[d] // split
        start.append(idx * part)
        size.append(part)
    return start, size


def fname(kind, r, n):
    return "checkpoint-%s-%07d-%07d.safetensors" % (kind, r, n)


def generate(out, ranks, step, variant, rr=False, ckpt_status=None, six_keys=False):
    d = os.path.join(out, "iteration_%08d" % step)
    os.makedirs(d, exist_ok=True)
    dm = {1: [1, 1], 2: [1, 2], 4: [2, 2]}[ranks]
    files = {}  # file name -> list of (name, st dtype, local array)
    owner = {}  # (file type, rank) -> list of (name, st dtype, local, slice)
    placed, names = {}, {}  # (name, slice) -> ranks saving it; (type, rank) -> file
    sdm, storage = {}, {}
    for name, msd, shape, tm, kind in PARAMS:
        g = value(name, shape, msd)
        st = DTYPES[msd][0]
        if ranks == 1:
            files.setdefault(fname(kind, 0, 1), []).append((name, st, g))
            continue
        layout = None
        if tm is not None:
            layout = {"device_matrix": dm, "tensor_map": tm, "interleaved_parallel": False,
                      "alias_name": ["dp", "tp"], "rank_list": list(range(ranks))}
        sids, chunks, holders = [], [], {}
        for r in range(ranks):
            if tm is None:
                sid, (start, size) = 0, ([0] * len(shape), list(shape))
            else:
                sid, (start, size) = slice_id(r, dm, tm), box(r, dm, tm, shape)
            sids.append(sid)
            if sid not in holders:
                holders[sid] = []
                chunks.append({"global_offset": [sid], "local_shape": size})
            holders[sid].append(r)
            local = g[tuple(slice(s, s + z) for s, z in zip(start, size))]
            owner.setdefault((kind, r), []).append((name, st, local, sid))
        frag = [1] * len(shape)
        if tm is not None:
            for dd, e in enumerate(tm):
                for m in (e if isinstance(e, list) else [e]):
                    if m != -1:
                        frag[dd] *= dm[len(dm) - 1 - m]
        replica = [sids[:i].count(sids[i]) for i in range(ranks)]
        sdm[name] = {
            "properties": {"dtype": msd, "replica_id": replica if layout else 0,
                           "allow_shape_mismatch": False, "allow_to_save": True},
            "global_shape": shape, "axis_fragmentations": frag, "layout": layout,
            "chunk": chunks}
        for sid, rs in holders.items():
            # remove_redundancy: each shard saved once, by its last holder
            keep = [rs[-1]] if rr else rs
            placed[(name, sid)] = keep
            storage[str((name, (sid,)))] = [
                {"file_name": (kind, r), "storage_rank": r, "rank_group": rs} for r in keep]
    # file names: normal save, idx = rank of N; remove_redundancy, idx =
    # position among the ranks given a shard, of as many
    for kind in ("model", "opt"):
        rs = sorted({r for (k, r), ts in owner.items() if k == kind and any(
            r in placed[(t[0], t[3])] for t in ts)})
        for i, r in enumerate(rs):
            names[(kind, r)] = fname(kind, i, len(rs)) if rr else fname(kind, r, ranks)
            files[names[(kind, r)]] = [t[:3] for t in owner[(kind, r)] if r in placed[(t[0], t[3])]]
    for lst in storage.values():
        for e in lst:
            e["file_name"] = names[e["file_name"]]
    for fn, ts in files.items():
        ts.sort(key=lambda t: t[0])
        save_safetensors(os.path.join(d, fn), ts, {"format": "ms"})
    common = {"epoch_num": 1, "step_num": 3000, "global_step": step, "loss_scale": 1.0,
              "global_batch_size": 64, "consumed_samples": step * 64, "ckpt_status": ckpt_status}
    if six_keys:  # the form of MindSpore's documentation
        del common["consumed_samples"]
        common["loss_scale"] = "1.0"
    with open(os.path.join(d, "common.json"), "w") as f:
        f.write(json.dumps(common, indent=4))
    meta = {"state_dict_metadata": sdm, "storage_data": storage}
    if ranks > 1:
        break_it(d, meta, variant, ranks)
        with open(os.path.join(d, "metadata.json"), "w") as f:
            f.write(json.dumps(meta, indent=4, ensure_ascii=False))
    elif variant != "good":
        sys.exit("variant %s needs --ranks > 1" % variant)
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(step))


QKV = "decoder.layers.0.self_attention.linear_qkv.weight"
FC1 = "decoder.layers.0.mlp.linear_fc1.weight"


def key(name, sid):
    return str((name, (sid,)))


def break_it(d, meta, variant, ranks):
    sdm, st = meta["state_dict_metadata"], meta["storage_data"]
    if variant == "wrong_shape":
        sdm[QKV]["global_shape"] = [10, 6]
    elif variant == "local_shape":
        sdm[QKV]["chunk"][1]["local_shape"] = [3, 6]
    elif variant == "slice_outside":
        sdm[QKV]["chunk"][1]["global_offset"] = [7]
        st[key(QKV, 7)] = st.pop(key(QKV, 1))
    elif variant == "missing_file":
        os.unlink(os.path.join(d, fname("model", ranks - 1, ranks)))
    elif variant == "not_covering":
        del sdm[QKV]["chunk"][1]
        del st[key(QKV, 1)]
    elif variant == "slice_twice":
        sdm[QKV]["chunk"].append(dict(sdm[QKV]["chunk"][0]))
    elif variant == "key_twice":
        st["('%s', (0, ))" % QKV] = st[key(QKV, 0)]
    elif variant == "bad_key":
        st["%s(0,)" % QKV] = st.pop(key(QKV, 0))
    elif variant == "wrong_dtype":
        sdm[QKV]["properties"]["dtype"] = "Float16"
    elif variant == "fragments":
        sdm[QKV]["axis_fragmentations"] = [1, 2]
        sdm[QKV]["chunk"] = [{"global_offset": [0], "local_shape": [8, 3]},
                             {"global_offset": [1], "local_shape": [8, 3]}]
    elif variant == "interleaved":
        sdm[QKV]["layout"]["interleaved_parallel"] = True
    elif variant == "file_lacks":
        # rank 0's model file, still named for slice 0, without the tensor
        rewrite(os.path.join(d, fname("model", 0, ranks)), drop=QKV)
    elif variant == "file_shape":
        rewrite(os.path.join(d, fname("model", 0, ranks)), reshape=(QKV, (6, 4)))
    elif variant == "two_slices":
        st[key(QKV, 1)][0]["file_name"] = fname("model", 0, ranks)
        st[key(QKV, 1)][0]["storage_rank"] = 0
    elif variant == "unused_key":
        st[key(FC1, 9)] = st[key(FC1, 0)]
    elif variant == "mixed_kind":
        st[key(QKV, 1)][1]["file_name"] = fname("opt", 3, ranks)
    elif variant == "uneven":
        sdm[QKV]["global_shape"] = [7, 6]
    elif variant == "no_storage":
        del st[key(QKV, 1)]
    elif variant != "good":
        sys.exit("unknown variant " + variant)


def rewrite(path, drop=None, reshape=None):
    """Rewrite one of our files without tensor `drop`, or with a tensor
    given another shape of the same size."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = h.pop("__metadata__", None)
    ts = []
    for name, e in h.items():
        b0, b1 = e["data_offsets"]
        arr = np.frombuffer(data[b0:b1], dtype=np.uint8)
        shape = e["shape"]
        if name == drop:
            continue
        if reshape and name == reshape[0]:
            shape = list(reshape[1])
        ts.append((name, e["dtype"], arr, shape))
    os.unlink(path)
    out = [(name, dt, _Shaped(arr, shape)) for name, dt, arr, shape in ts]
    save_safetensors(path, out, meta)


class _Shaped:
    """Raw bytes that report a given shape to save_safetensors."""

    def __init__(self, arr, shape):
        self.arr, self.shape = arr, tuple(shape)

    def tobytes(self):
        return self.arr.tobytes()


def save_ref(path):
    ts = []
    for name, msd, shape, tm, kind in sorted(PARAMS):
        ts.append((name, DTYPES[msd][0], value(name, shape, msd)))
    save_safetensors(path, ts, {"format": "pt"})


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes), __metadata__; checks the layout."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    meta = h.pop("__metadata__", None)
    data, out, end = raw[8 + n:], {}, 0
    for name, e in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"]):
        b0, b1 = e["data_offsets"]
        if b0 != end:
            sys.exit("%s: '%s' starts at %d, not %d" % (path, name, b0, end))
        end = b1
        out[name] = (e["dtype"], list(e["shape"]), data[b0:b1])
    if end != len(data):
        sys.exit("%s: %d data bytes, tensors end at %d" % (path, len(data), end))
    return out, meta


def check_merged(path, with_optimizer, bf16=False):
    """A merge of a generated directory (any rank count) into the Hugging
    Face layout at `path`: exactly the model tensors (all with
    --with-optimizer), each equal to the generator's value, in
    model.safetensors or in the files model.safetensors.index.json maps
    them to (sorted keys, total_size the tensor bytes).  bf16: merged
    with --dtype bf16 (the values are exact in BF16)."""
    want = {}
    for name, msd, shape, tm, kind in PARAMS:
        if with_optimizer or kind == "model":
            v = value(name, shape, msd)
            if bf16 and msd == "Float32":
                msd, v = "BFloat16", (v.view(np.uint32) >> 16).astype(np.uint16)
            want[name] = (DTYPES[msd][0], shape, v.tobytes())
    idx = os.path.join(path, "model.safetensors.index.json")
    got, files = {}, {}
    if os.path.exists(idx):
        with open(idx) as f:
            text = f.read()
        index = json.loads(text)
        wm = index["weight_map"]
        if list(wm) != sorted(wm) or text != json.dumps(index, indent=2, sort_keys=True) + "\n":
            sys.exit("%s: not written as transformers writes it" % idx)
        for name, fn in wm.items():
            files.setdefault(fn, set()).add(name)
    else:
        files["model.safetensors"] = None
    for fn, names in files.items():
        ts, meta = read_safetensors(os.path.join(path, fn))
        if meta != {"format": "pt"}:
            sys.exit("%s: __metadata__ %r" % (fn, meta))
        if names is not None and set(ts) != names:
            sys.exit("%s holds %s, the index maps %s to it" % (fn, sorted(ts), sorted(names)))
        got.update(ts)
    if set(got) != set(want):
        sys.exit("merged tensors %s, expected %s" % (sorted(got), sorted(want)))
    for name, (dt, shape, b) in want.items():
        if got[name] != (dt, shape, b):
            sys.exit("tensor '%s': %s %s differs from the generated %s %s"
                     % (name, got[name][0], got[name][1], dt, shape))
    total = sum(len(b) for _, _, b in got.values())
    if os.path.exists(idx) and index["metadata"]["total_size"] != total:
        sys.exit("%s: total_size %s, tensors %d" % (idx, index["metadata"]["total_size"], total))
    print("merged: %d tensors in %d file(s), %d bytes, equal to the generated ones"
          % (len(got), len(files), total))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=4, choices=[1, 2, 4])
    ap.add_argument("--step", type=int, default=2000)
    ap.add_argument("--variant", default="good", choices=VARIANTS)
    ap.add_argument("--ref")
    ap.add_argument("--remove-redundancy", action="store_true",
                    help="each shard saved by one rank; files numbered among those ranks")
    ap.add_argument("--ckpt-status", type=int, help="graph mode's health status (0, 1)")
    ap.add_argument("--six-keys", action="store_true",
                    help="common.json without consumed_samples, loss_scale a string")
    ap.add_argument("--check-merged", action="store_true",
                    help="OUT is a merge of a generated directory: check it (no output)")
    ap.add_argument("--with-optimizer", action="store_true",
                    help="with --check-merged: the merge holds optimizer tensors too")
    ap.add_argument("--bf16", action="store_true",
                    help="with --check-merged: merged with --dtype bf16")
    a = ap.parse_args()
    if a.check_merged:
        check_merged(a.out, a.with_optimizer, a.bf16)
        return
    generate(a.out, a.ranks, a.step, a.variant, a.remove_redundancy, a.ckpt_status, a.six_keys)
    if a.ref:
        save_ref(a.ref)


if __name__ == "__main__":
    main()
