"""compare_ckpt.py STEP_DIR_A STEP_DIR_B [KIND...] -- do two checkpoints hold
the same global tensors?  Every tensor is assembled from its chunks
(replicas must agree, every element covered) and compared bytewise.  KIND
limits the comparison to "model" or "opt" tensors.  Independent of the
library: reads metadata.json and the files with json + numpy."""
import json, sys
import numpy as np

DT = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}

def load(step_dir):
    meta = json.load(open(f"{step_dir}/metadata.json"))
    files = [f"{step_dir}/{f['name']}" for f in meta["files"]]
    out = {}
    for name, t in meta["tensors"].items():
        dt = np.dtype(DT[t["dtype"]])
        shape = tuple(t["shape"])
        arr = np.zeros(shape, dt)
        seen = np.zeros(shape, bool)
        for c in t["chunks"]:
            b0, b1 = c["byte_range"]
            with open(files[c["file"]], "rb") as f:
                f.seek(b0)
                raw = f.read(b1 - b0)
            chunk = np.frombuffer(raw, dt).reshape(c["shape"])
            box = tuple(slice(o, o + n) for o, n in zip(c["offset"], c["shape"]))
            prev = arr[box]
            both = seen[box]
            if np.any(both) and not np.array_equal(
                    prev[both].view(np.uint8), chunk[both].view(np.uint8)):
                sys.exit(f"{step_dir}: {name}: replicas differ")
            arr[box] = chunk
            seen[box] = True
        if not seen.all():
            sys.exit(f"{step_dir}: {name}: not every element is covered")
        out[name] = (t["kind"], t["dtype"], arr)
    return meta, out

kinds = sys.argv[3:] or ["model", "opt"]
ma, a = load(sys.argv[1])
mb, b = load(sys.argv[2])
a = {k: v for k, v in a.items() if v[0] in kinds}
b = {k: v for k, v in b.items() if v[0] in kinds}
if sorted(a) != sorted(b):
    sys.exit(f"tensor sets differ: {sorted(set(a) ^ set(b))}")
for name in sorted(a):
    ka, da, xa = a[name]
    kb, db, xb = b[name]
    if (ka, da, xa.shape) != (kb, db, xb.shape):
        sys.exit(f"{name}: kind/dtype/shape differ")
    if xa.tobytes() != xb.tobytes():
        sys.exit(f"{name}: values differ")
print(f"equal: {len(a)} tensors, world {ma['world_size']} -> {mb['world_size']}")
