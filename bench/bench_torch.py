#!/usr/bin/python3
"""What users do today, measured in the same run as bench_io (see README.md).

    /usr/bin/python3 bench/bench_torch.py torch  DIR   torch.save / torch.load
    /usr/bin/python3 bench/bench_torch.py numpy  DIR   np.save / np.load, np.savez
    /usr/bin/python3 bench/bench_torch.py json   FILE  json.loads of a safetensors header

Run with Debian's /usr/bin/python3 (python3-torch, python3-numpy).  Each mode
is its own process so that its peak RSS (ru_maxrss) is its own.  The state is
the same 64 F32 tensors as bench_io.c (same names and shapes, ~1 GiB).
Results are printed as "@@ {json}" lines, like bench_io.
"""
import json
import os
import resource
import statistics
import sys
import time

N_TENSORS = 64
TOTAL_ROWS = 262144
REPS = 5
KIND = ["attn.qkv.weight", "mlp.up.weight", "mlp.down.weight", "norm.weight"]
MODE = ""


def result(key, value, unit, label):
    print("@@ " + json.dumps({"mode": MODE, "key": key, "value": value,
                              "unit": unit, "label": label}), flush=True)


def peak_rss():
    mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"peak RSS (ru_maxrss): {mib:.1f} MiB", flush=True)
    result("peak_rss", mib, "MiB", "peak RSS of the process")


def shapes():
    """Names and shapes of bench_io.c's make_state(), in the same order."""
    wsum = sum(1 + (i * 37) % 64 for i in range(N_TENSORS) if i % 4 != 3)
    rows_left = TOTAL_ROWS
    out = []
    for i in range(N_TENSORS):
        name = f"model.layers.{i // 4}.{KIND[i % 4]}"
        if i % 4 == 3:
            shape = (64 * (i + 1),)
        else:
            w = 1 + (i * 37) % 64
            rows = rows_left if i == N_TENSORS - 2 else TOTAL_ROWS * w // wsum
            rows_left -= rows
            shape = (rows, 1024)
        out.append((name, shape))
    return out


def remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fresh(path):
    """Every timed write starts from no file and no dirty page cache."""
    remove(path)
    os.sync()


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_raw(path, buffers, do_fsync):
    """In-process baseline: the same bytes with plain write(2) calls, one per
    buffer (like bench_io's write(2) baseline), from no file and clean cache."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for b in buffers:
            mv = memoryview(b).cast("B")
            while len(mv):
                mv = mv[os.write(fd, mv):]
        if do_fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def report(key, times, nbytes, label):
    best = min(times)
    gbs = nbytes / best / 1e9
    print(f"{MODE} {key:<22} best {best:.3f} s  {gbs:6.2f} GB/s "
          f"(median {statistics.median(times):.3f} s)  -- {label}", flush=True)
    result(key, gbs, "GB/s", label)
    result(key + "_median_s", statistics.median(times), "s", "median time")


def mode_torch(d):
    import torch
    torch.manual_seed(0)
    sd = {}
    for name, shape in shapes():
        sd[name] = torch.rand(shape, dtype=torch.float32).add_(1.0)  # non-zero
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    result("bytes", nbytes, "B", "tensor payload bytes")
    print(f"torch {torch.__version__}: {len(sd)} tensors, {nbytes} bytes", flush=True)
    p = os.path.join(d, "bench_torch.pt")
    pb = os.path.join(d, "bench_torch_baseline.bin")
    bufs = [t.numpy() for t in sd.values()]
    times = {k: [] for k in ("torch_save", "torch_save_fsync", "torch_load", "base_write",
                             "base_write_fsync", "base_clone")}

    def save():
        torch.save(sd, p)

    def save_fsync():
        torch.save(sd, p)
        fsync_path(p)

    for _ in range(REPS):
        fresh(p)
        fresh(pb)
        times["base_write"].append(timed(lambda: write_raw(pb, bufs, False)))
        fresh(pb)
        times["torch_save"].append(timed(save))
        fresh(p)
        times["base_write_fsync"].append(timed(lambda: write_raw(pb, bufs, True)))
        fresh(pb)
        times["torch_save_fsync"].append(timed(save_fsync))
    remove(pb)
    # file is in the page cache now (warm), as for bench_io read
    loaded = torch.load(p)
    assert all(torch.equal(loaded[k], sd[k]) for k in sd)
    del loaded
    for _ in range(REPS):
        t0 = time.perf_counter()
        loaded = torch.load(p)
        times["torch_load"].append(time.perf_counter() - t0)
        del loaded
        t0 = time.perf_counter()
        loaded = [t.clone() for t in sd.values()]
        times["base_clone"].append(time.perf_counter() - t0)
        del loaded
    os.unlink(p)
    report("torch_save", times["torch_save"], nbytes, "torch.save(dict, path)")
    report("torch_save_fsync", times["torch_save_fsync"], nbytes,
           "torch.save(dict, path) + fsync")
    report("torch_load", times["torch_load"], nbytes,
           "torch.load(path), warm page cache (allocates new tensors)")
    report("base_write", times["base_write"], nbytes, "baseline: os.write of the tensors")
    report("base_write_fsync", times["base_write_fsync"], nbytes, "baseline: same + fsync")
    report("base_clone", times["base_clone"], nbytes,
           "baseline: tensor.clone() of each (torch allocator + memcpy)")
    peak_rss()


def mode_numpy(d):
    import numpy as np
    rng = np.random.default_rng(0)
    arrs = []
    for name, shape in shapes():
        a = rng.random(shape, dtype=np.float32)
        a += 1.0  # non-zero
        arrs.append((name, a))
    nbytes = sum(a.nbytes for _, a in arrs)
    result("bytes", nbytes, "B", "tensor payload bytes")
    print(f"numpy {np.__version__}: {len(arrs)} arrays, {nbytes} bytes", flush=True)
    p = os.path.join(d, "bench_numpy.npy")
    pz = os.path.join(d, "bench_numpy.npz")
    pb = os.path.join(d, "bench_numpy_baseline.bin")
    bufs = [a for _, a in arrs]
    times = {k: [] for k in ("np_save", "np_save_fsync", "np_load", "np_savez",
                             "np_load_npz", "base_write", "base_write_fsync", "base_copy")}

    def save(do_fsync):
        # every array after the other in one file (np.save appends a .npy
        # record per call); np.load reads them back in order
        with open(p, "wb") as f:
            for _, a in arrs:
                np.save(f, a)
            if do_fsync:
                f.flush()
                os.fsync(f.fileno())

    def load():
        out = []
        with open(p, "rb") as f:
            for _ in arrs:
                out.append(np.load(f))
        return out

    def savez():
        np.savez(pz, **{n: a for n, a in arrs})

    def loadz():
        with np.load(pz) as z:
            return [z[n] for n, _ in arrs]

    for _ in range(REPS):
        fresh(p)
        fresh(pb)
        times["base_write"].append(timed(lambda: write_raw(pb, bufs, False)))
        fresh(pb)
        times["np_save"].append(timed(lambda: save(False)))
        fresh(p)
        times["base_write_fsync"].append(timed(lambda: write_raw(pb, bufs, True)))
        fresh(pb)
        times["np_save_fsync"].append(timed(lambda: save(True)))
        fresh(pz)
        times["np_savez"].append(timed(savez))
    remove(pb)
    got = load()
    assert all(np.array_equal(g, a) for g, (_, a) in zip(got, arrs))
    del got
    got = loadz()
    assert all(np.array_equal(g, a) for g, (_, a) in zip(got, arrs))
    del got
    for _ in range(REPS):
        t0 = time.perf_counter()
        got = load()
        times["np_load"].append(time.perf_counter() - t0)
        del got
        t0 = time.perf_counter()
        got = loadz()
        times["np_load_npz"].append(time.perf_counter() - t0)
        del got
        t0 = time.perf_counter()
        got = [a.copy() for a in bufs]
        times["base_copy"].append(time.perf_counter() - t0)
        del got
    os.unlink(p)
    os.unlink(pz)
    report("np_save", times["np_save"], nbytes, "np.save of each array into one file")
    report("np_save_fsync", times["np_save_fsync"], nbytes, "same + fsync")
    report("np_load", times["np_load"], nbytes, "np.load of each array from that file, warm")
    report("np_savez", times["np_savez"], nbytes, "np.savez (uncompressed zip)")
    report("np_load_npz", times["np_load_npz"], nbytes, "np.load(npz)[name] for all, warm")
    report("base_write", times["base_write"], nbytes, "baseline: os.write of the arrays")
    report("base_write_fsync", times["base_write_fsync"], nbytes, "baseline: same + fsync")
    report("base_copy", times["base_copy"], nbytes,
           "baseline: ndarray.copy() of each (numpy allocator, huge pages, + memcpy)")
    peak_rss()


def mode_json(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = f.read(n)
    obj = json.loads(hdr)
    ntensors = sum(1 for k in obj if k != "__metadata__")
    times, cpu = [], []
    for _ in range(10):
        c0 = time.process_time()
        t0 = time.perf_counter()
        json.loads(hdr)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    best, med = min(times), statistics.median(times)
    print(f"json.loads of a {n}-byte header ({ntensors} tensors): best {best * 1e3:.2f} ms, "
          f"median {med * 1e3:.2f} ms", flush=True)
    result("json_loads_ms", best * 1e3, "ms", "Python json.loads of the header bytes")
    result("json_loads_median_ms", med * 1e3, "ms", "median of 10")
    result("json_loads_cpu_median_ms", statistics.median(cpu) * 1e3, "ms",
           "CPU time, median of 10")
    result("json_tensors", ntensors, "", "tensors")
    peak_rss()


def main():
    global MODE
    if len(sys.argv) < 2 or sys.argv[1] not in ("torch", "numpy", "json"):
        sys.exit(__doc__)
    MODE = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("TMPDIR") or "/tmp"
    {"torch": mode_torch, "numpy": mode_numpy, "json": mode_json}[MODE](arg)


if __name__ == "__main__":
    main()
