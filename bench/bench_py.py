#!/usr/bin/python3
"""The Python binding against what PyTorch users do today.

    /usr/bin/python3 bench/bench_py.py [--size-mib N] [--reps N] [--append] [DIR]

Needs the binding on PYTHONPATH (PYTHONPATH=build/python after
scripts/build.sh build, or an installed package) and Debian's torch.
Each operation runs in its own child process, so that its peak RSS
(ru_maxrss) is its own; the times are the best of --reps runs, each
write from no file and a clean page cache (sync), each read from a warm
page cache.  Rows:

  save   shardsafe.torch.save_file(fsync=True) vs torch.save + fsync
         (target >= 1.5x); baseline: write(2) of the same bytes + fsync
  load   shardsafe.torch.load_file vs torch.load (>= 1.0x); baseline:
         fresh memory + memcpy of the same bytes
  view   safe_open(..., "pt") + get_tensor of every tensor, zero-copy, vs
         torch.load (>= 5x); diagnostic: the same + touching every byte
  many   open a 100,000-tensor file and read one tensor (< 100 ms,
         median); baseline: json.loads of the same header

--append adds the markdown table to bench/results.md.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time

N_TENSORS = 64
MANY = 100_000


def peak_rss_mib():
    """VmHWM: the peak RSS of this process's own address space.  Not
    ru_maxrss, which Linux carries over from the parent through fork and
    exec (the forked copy's peak is the parent's)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def emit(**kw):
    kw["peak_rss_mib"] = peak_rss_mib()
    print("@@ " + json.dumps(kw), flush=True)


def make_state(size_mib):
    """N_TENSORS F32 tensors, ~size_mib MiB in all, deterministic."""
    import torch
    g = torch.Generator().manual_seed(1)
    rows = size_mib * 1024 * 1024 // 4 // 1024 // N_TENSORS
    return {f"model.layers.{i // 4}.w{i % 4}": torch.randn(rows, 1024, generator=g)
            for i in range(N_TENSORS)}


def fresh(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.sync()


def fsync_file(fh):
    fh.flush()
    os.fsync(fh.fileno())


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def paired(reps, cases):
    """cases: {key: (setup, fn)}.  The cases run interleaved, rep after
    rep, so that the machine's drift hits them alike.  Returns {key: (best
    wall time, CPU time of that run)}."""
    out = {k: (float("inf"), 0.0) for k in cases}
    for _ in range(reps):
        for k, (setup, fn) in cases.items():
            setup()
            c0, t0 = cpu(), time.perf_counter()
            fn()
            t, c = time.perf_counter() - t0, cpu() - c0
            if t < out[k][0]:
                out[k] = (t, c)
    return out


def nothing():
    pass


def warm(path):
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def op_save(args, d):
    import torch
    import shardsafe.torch as st
    state = make_state(args.size)
    nbytes = sum(t.numel() * 4 for t in state.values())
    p_shs, p_pt, p_raw = (os.path.join(d, n) for n in ("s.safetensors", "s.pt", "s.raw"))

    def raw():
        with open(p_raw, "wb") as fh:
            for t in state.values():
                fh.write(memoryview(t.numpy()).cast("B"))
            fsync_file(fh)

    def pt():
        with open(p_pt, "wb") as fh:
            torch.save(state, fh)
            fsync_file(fh)

    r = paired(args.reps, {
        "base": (lambda: fresh(p_raw), raw),
        "shs": (lambda: fresh(p_shs), lambda: st.save_file(state, p_shs, fsync=True)),
        "torch": (lambda: fresh(p_pt), pt)})
    os.unlink(p_raw)
    emit(op="save", nbytes=nbytes, **{f"t_{k}": v[0] for k, v in r.items()},
         **{f"cpu_{k}": v[1] for k, v in r.items()})


def op_warm(args, d):
    """Touch and free 3x the state once, in a process of its own before
    the load and view processes: on a VM, the first touch of guest memory
    the host has not backed yet is many times slower than a later one
    (seen here: 0.1 GB/s), which would time the hypervisor, not the
    readers."""
    import numpy as np
    x = np.ones(3 * args.size * 2**20, np.uint8)
    del x
    emit(op="warm")


def op_load(args, d):
    import numpy as np
    import torch
    import shardsafe.torch as st
    p_shs, p_pt = os.path.join(d, "s.safetensors"), os.path.join(d, "s.pt")
    warm(p_shs)
    warm(p_pt)
    src = st.load_file(p_shs)  # baseline: fresh memory + memcpy of the same bytes
    nbytes = sum(t.numel() * 4 for t in src.values())

    def memcpy():  # every output kept until the end, as load does
        outs = []
        for t in src.values():
            outs.append(np.empty(t.numel(), np.float32))
            np.copyto(outs[-1], t.numpy().reshape(-1))

    r = paired(args.reps, {"base": (nothing, memcpy),
                           "shs": (nothing, lambda: st.load_file(p_shs)),
                           "torch": (nothing, lambda: torch.load(p_pt))})
    emit(op="load", nbytes=nbytes, **{f"t_{k}": v[0] for k, v in r.items()},
         **{f"cpu_{k}": v[1] for k, v in r.items()})


def op_view(args, d):
    import torch
    import shardsafe
    p_shs, p_pt = os.path.join(d, "s.safetensors"), os.path.join(d, "s.pt")
    warm(p_shs)
    warm(p_pt)

    def view(touch):
        with shardsafe.safe_open(p_shs, "pt") as f:
            ts = {k: f.get_tensor(k) for k in f.keys()}
        if touch:
            for t in ts.values():
                t.sum()
        return ts

    def load(touch):
        ts = torch.load(p_pt)
        if touch:
            for t in ts.values():
                t.sum()

    r = paired(args.reps, {"shs": (nothing, lambda: view(False)),
                           "torch": (nothing, lambda: load(False)),
                           "shs_touch": (nothing, lambda: view(True)),
                           "torch_touch": (nothing, lambda: load(True))})
    emit(op="view", **{f"t_{k}": v[0] for k, v in r.items()},
         **{f"cpu_{k}": v[1] for k, v in r.items()})


def op_many(args, d):
    import numpy as np
    import shardsafe
    import shardsafe.numpy as snp
    p = os.path.join(d, "many.safetensors")
    snp.save_file({f"model.layers.{i // 100}.block.{i % 100}.weight":
                   np.full((2, 2), i, np.float32) for i in range(MANY)}, p)
    name = f"model.layers.{(MANY - 1) // 100}.block.{(MANY - 1) % 100}.weight"
    warm(p)

    def one():
        with shardsafe.safe_open(p, "np") as f:
            x = f.get_tensor(name)
        assert x[0, 0] == MANY - 1

    with open(p, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = fh.read(n)
    def lib_only():  # shs_file_open + shs_file_free, through the module
        shardsafe._C.File(p).close()

    runs, base, lib = [], [], []
    for _ in range(2):  # blocks of runs, alternated
        for fn, acc in ((one, runs), (lambda: json.loads(header), base), (lib_only, lib)):
            for _ in range(max(args.reps, 7)):
                t0 = time.perf_counter()
                fn()
                acc.append(time.perf_counter() - t0)
    emit(op="many", n=MANY, header_bytes=n, median=statistics.median(runs), best=min(runs),
         base_median=statistics.median(base), lib_median=statistics.median(lib))


def child(op, args, d):
    env = dict(os.environ)
    cmd = [sys.executable, os.path.abspath(__file__), "--op", op, "--size-mib", str(args.size),
           "--reps", str(args.reps), d]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_py: {op} failed:\n{out.stderr}")
    for line in out.stdout.splitlines():
        if line.startswith("@@ "):
            return json.loads(line[3:])
    sys.exit(f"bench_py: {op}: no result")


def gbs(nbytes, t):
    return f"{nbytes / t / 1e9:.2f} GB/s"


def table(r, args):
    s, lo, v, m = r["save"], r["load"], r["view"], r["many"]
    rows = [
        "| | shardsafe | torch | ratio (torch time / shardsafe time) | ratio by CPU time | target | status | baseline (same run) | baseline time / shardsafe time | peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def row(what, d, sfx, target, base, rss, fmt):
        t_shs, t_pt = d["t_shs" + sfx], d["t_torch" + sfx]
        ratio = t_pt / t_shs
        c_shs, c_pt = d["cpu_shs" + sfx], d["cpu_torch" + sfx]
        cratio = f"{c_pt / c_shs:.2f}" if c_shs > 0 else "-"
        status = ("PASS" if ratio >= target else "**MISS**") if target else "-"
        t_base = d.get("t_base") if base != "-" else None
        rows.append(f"| {what} | {fmt(t_shs)} | {fmt(t_pt)} | {ratio:.2f} | {cratio} | "
                    f"{'>= ' + str(target) if target else '-'} | {status} | "
                    f"{base}: {fmt(t_base) if t_base else '-'} | "
                    f"{(t_base / t_shs if t_base else 0):.2f} | {rss:.0f} |")

    n = s["nbytes"]
    row("save_file(fsync=True) vs torch.save + fsync", s, "", 1.5, "write(2) + fsync",
        s["peak_rss_mib"], lambda t: gbs(n, t))
    row("load_file vs torch.load", lo, "", 1.0, "fresh memory + memcpy", lo["peak_rss_mib"],
        lambda t: gbs(n, t))
    ms = lambda t: f"{t * 1e3:.1f} ms"  # noqa: E731
    row("safe_open + get_tensor of all (zero-copy, pt) vs torch.load", v, "", 5.0, "-",
        v["peak_rss_mib"], ms)
    row("diagnostic: the same, then every byte read (t.sum())", v, "_touch", 0, "-",
        v["peak_rss_mib"], ms)
    status = "PASS" if m["median"] < 0.1 else "**MISS**"
    rows.append(f"| open a {m['n']:,}-tensor file ({m['header_bytes'] / 1e6:.1f} MB header) "
                f"+ get_tensor of one | median {m['median'] * 1e3:.1f} ms (best "
                f"{m['best'] * 1e3:.1f} ms) | - | - | - | < 100 ms | {status} | json.loads of the "
                f"header: median {m['base_median'] * 1e3:.1f} ms | {m['base_median'] / m['median']:.2f} "
                f"| {m['peak_rss_mib']:.0f} |")
    rows.append(f"| diagnostic: the library alone (`_C.File` = shs_file_open + close) on the same "
                f"file | median {m['lib_median'] * 1e3:.1f} ms | - | - | - | - | - | - | - | - |")
    return "\n".join(rows)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--size-mib", dest="size", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--op")
    args = ap.parse_args()
    if args.op:
        {"save": op_save, "load": op_load, "view": op_view, "many": op_many,
         "warm": op_warm}[args.op](args, args.dir)
        return
    import tempfile
    import shardsafe
    import torch
    with tempfile.TemporaryDirectory(prefix="shardsafe-bench-py.", dir=args.dir) as d:
        r = {}
        for op in ("save", "load", "view", "many"):
            print(f"bench_py: {op} ...", file=sys.stderr, flush=True)
            if op in ("load", "view"):
                child("warm", args, d)
            r[op] = child(op, args, d)
            print("  " + json.dumps(r[op]), file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse",
                             "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    md = (f"\n## Python binding (bench/bench_py.py)\n\n"
          f"Reproduce: `scripts/build.sh build && PYTHONPATH=build/python /usr/bin/python3 "
          f"bench/bench_py.py --size-mib {args.size} --reps {args.reps} --append` "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
          f"shardsafe {shardsafe.__version__}, torch {torch.__version__}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, nproc {os.cpu_count()}). "
          f"{N_TENSORS} F32 tensors, {r['save']['nbytes'] / 2**20:.0f} MiB; best of "
          f"{args.reps}, the compared cases interleaved rep after rep; writes from no file after `sync`, reads from a warm page cache; each "
          f"row in its own process (peak RSS = the process's VmHWM, with torch imported; it "
          f"includes the state itself where the row builds it: save holds the state, load "
          f"holds one copy being loaded); before the load and "
          f"view processes, a process touches and frees 3x the state's memory once (see "
          f"op_warm).\n\n" + table(r, args)
          + "\n")
    print(md)
    if args.append:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.md")
        with open(path, "a") as fh:
            fh.write(md)


if __name__ == "__main__":
    main()
