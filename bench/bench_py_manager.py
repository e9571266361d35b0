#!/usr/bin/python3
"""The Python checkpoint manager against dd, a sync save and the C manager.

    /usr/bin/python3 bench/bench_py_manager.py [--size-mib N] [--reps N] [--cman PATH] [DIR]

Needs the binding on PYTHONPATH (PYTHONPATH=build/python after
scripts/build.sh build) and Debian's torch; --cman is the C driver
bench_py_cman (default build/bench_py_cman next to the binding).
The state: a torch model of Linear(2048, 2048) layers whose
`state_dict()` plus AdamW's state (`exp_avg`, `exp_avg_sq` in F32 and
`step`, after one optimizer step) is about --size-mib MiB, with a
warmup+cosine LR scheduler, saved through shardsafe.TorchCheckpointer (a
CheckpointManager: fsync=1, save_max=0; every save from an empty save path
after `sync`, not timed).  Each row runs in its own process (peak RSS =
VmHWM); times are best of --reps (and median), the compared cases
interleaved rep after rep.  Rows:

  save      TorchCheckpointer.save (sync) vs `dd if=/dev/zero bs=16M
            conv=fsync` of the same number of bytes (target >= 0.85x);
            also write(2) + fsync of the same tensors in-process, and
            CheckpointManager.save (the flattened state, no state_dict walk)
  async     async_save=1: time save() blocks the caller (the staging copy,
            SHS_ASYNC_SNAPSHOT=copy) vs a sync save of the same state
            (target <= 10%, 2nd+ saves); the first save, after training
            steps (target <= 2x a later one); the deferred snapshot
            (TorchCheckpointer(defer_snapshot=True): save() + fence() after
            a forward + backward of a batch, which reads the weights and
            writes only gradients; target <= 2%); the copy-free snapshot
            where the kernel permits it (blocked, and the pages copied
            while a step writes every weight)
  overhead  the same state saved by TorchCheckpointer in Python and by the
            C manager (bench_py_cman: shs_manager_save of the same tensors,
            names, dtypes, shapes, blob sizes and config), alternating
            processes (target: Python time <= 1.05x C time); plus, inside
            the Python run, the Python wall time minus the library's own
            total_seconds of the same save

Result lines "@@ {json}", then a markdown table.
"""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def peak_rss_mib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def emit(**kw):
    kw["peak_rss_mib"] = peak_rss_mib()
    kw["loadavg"] = os.getloadavg()[0]
    print("@@ " + json.dumps(kw), flush=True)


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_training(size_mib):
    """model + AdamW (after one step, so every parameter has state) +
    warmup+cosine scheduler; about size_mib MiB of tensors in all."""
    import torch
    torch.manual_seed(0)
    per_layer = (2048 * 2048 + 2048) * 4 * 3  # weight + bias, and two F32 moments
    n = max(1, round(size_mib * 2**20 / per_layer))
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(n)])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e-3)
    opt.step()
    sched.step()
    for p in model.parameters():
        p.grad = None
    return model, opt, sched


def state_bytes(model, opt):
    n = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    for st in opt.state.values():
        n += sum(v.numel() * v.element_size() for v in st.values() if hasattr(v, "numel"))
    return n


def config(sp, **kw):
    c = {"save_path": sp, "save_max": 0, "fsync": True, "async_save": False,
         "save_interleaved_steps": 1000000}
    c.update(kw)
    return c


def progress(step):
    return {"global_step": step, "step_num": step, "loss_scale": 1.0,
            "global_batch_size": 32, "consumed_samples": step * 32}


def fresh_dir(sp):
    shutil.rmtree(sp, ignore_errors=True)
    os.mkdir(sp)
    os.sync()


def med(xs):
    return statistics.median(xs)


def run_reps(reps, cases):
    """cases: {key: (setup, fn)}; fn returns an optional dict of extras.
    Interleaved rep after rep, after one untimed warm-up rep of every case
    (the first writes of a process into memory and page cache the VM has
    not backed yet are several times slower).  {key: ([times], [cpu],
    [extras])}"""
    for setup, fn in cases.values():
        setup()
        fn()
    out = {k: ([], [], []) for k in cases}
    for _ in range(reps):
        for k, (setup, fn) in cases.items():
            setup()
            c0, t0 = cpu(), time.perf_counter()
            extra = fn()
            out[k][0].append(time.perf_counter() - t0)
            out[k][1].append(cpu() - c0)
            out[k][2].append(extra)
    return out


def op_save(args, d):
    from shardsafe.training import TorchCheckpointer
    model, opt, sched = make_training(args.size)
    nbytes = state_bytes(model, opt)
    sp, p_raw, p_dd = (os.path.join(d, n) for n in ("ckpt", "raw.bin", "dd.bin"))
    os.makedirs(sp, exist_ok=True)
    ck = TorchCheckpointer(model, opt, sched, config=config(sp))
    ck.save(progress(1))  # creates the manager (not timed, as in bench_ckpt)
    tensors = list(model.state_dict().values()) + [
        v for st in opt.state.values() for v in st.values() if hasattr(v, "numel")]
    step = [1]

    def rm(p):
        def f():
            if os.path.exists(p):
                os.unlink(p)
            os.sync()
        return f

    def dd():
        subprocess.run(["dd", "if=/dev/zero", f"of={p_dd}", "bs=16M", f"count={nbytes}",
                        "iflag=count_bytes", "conv=fsync", "status=none"], check=True)

    def raw():
        with open(p_raw, "wb") as fh:
            for t in tensors:
                fh.write(memoryview(t.reshape(-1).view(__import__("torch").uint8).numpy()))
            fh.flush()
            os.fsync(fh.fileno())

    def save_ck():
        step[0] += 1
        ck.save(progress(step[0]))
        return ck._m.last_save()

    def save_m():
        step[0] += 1
        ck._m.save(progress(step[0]))
        return ck._m.last_save()

    r = run_reps(args.reps, {"dd": (rm(p_dd), dd), "raw": (rm(p_raw), raw),
                             "ck": (lambda: fresh_dir(sp), save_ck),
                             "m": (lambda: fresh_dir(sp), save_m)})
    for p in (p_raw, p_dd):
        os.unlink(p)
    ck.close()
    shutil.rmtree(sp, ignore_errors=True)
    emit(op="save", nbytes=nbytes, bytes_written=r["ck"][2][-1]["bytes_written"],
         **{f"t_{k}": v[0] for k, v in r.items()}, **{f"cpu_{k}": v[1] for k, v in r.items()},
         lib_ck=[e["total_seconds"] for e in r["ck"][2]],
         lib_m=[e["total_seconds"] for e in r["m"][2]])


def op_async(args, d):
    import torch
    from shardsafe.training import TorchCheckpointer
    model, opt, sched = make_training(args.size)
    nbytes = state_bytes(model, opt)
    sp_s, sp_a, sp_d = (os.path.join(d, n) for n in ("sync", "async", "defer"))
    for p in (sp_s, sp_a, sp_d):
        os.makedirs(p, exist_ok=True)
    sp_f = os.path.join(d, "copyfree")
    os.makedirs(sp_f, exist_ok=True)
    cs = TorchCheckpointer(model, opt, sched, config=config(sp_s))
    # the staging copy for these two, whatever the kernel permits (read at
    # manager create); cf: the copy-free snapshot where it is permitted
    os.environ["SHS_ASYNC_SNAPSHOT"] = "copy"
    ca = TorchCheckpointer(model, opt, sched, config=config(sp_a, async_save=True))
    cd = TorchCheckpointer(model, opt, sched, config=config(sp_d, async_save=True),
                           defer_snapshot=True)
    cs.save(progress(1))  # manager creation, not timed
    ca.step(progress(1))  # not due: creates the manager, as a training loop's 1st step does
    cd.step(progress(1))
    del os.environ["SHS_ASYNC_SNAPSHOT"]
    cf = TorchCheckpointer(model, opt, sched, config=config(sp_f, async_save=True))
    cf.step(progress(1))
    step = [1]

    def nxt():
        step[0] += 1
        return progress(step[0])

    sink = [0.0]
    x = torch.randn(32, 2048)

    def compute():  # forward + backward of a batch: reads the weights, writes only .grad
        loss = model(x).square().mean()
        loss.backward()
        sink[0] += float(loss)

    # training steps before the first save (the managers fault their
    # staging memory in meanwhile), then the first saves
    for _ in range(3):
        compute()
    fresh_dir(sp_a)
    t0 = time.perf_counter()
    ca.save(nxt())
    first = time.perf_counter() - t0
    ca.wait()
    fresh_dir(sp_d)
    t0 = time.perf_counter()
    cd.save(nxt())
    first_d = time.perf_counter() - t0
    compute()  # as the 2nd+ deferred saves: forward + backward, then the fence
    t0 = time.perf_counter()
    cd.fence()
    first_d += time.perf_counter() - t0
    cd.wait()
    fresh_dir(sp_f)
    t0 = time.perf_counter()
    cf.save(nxt())
    first_f = time.perf_counter() - t0
    cf.wait()
    mode_f = cf.last_save()["snapshot_mode"]

    def sync_save():
        cs.save(nxt())

    commits, computes = [], []

    def async_save():
        t0 = time.perf_counter()
        ca.save(nxt())
        t = time.perf_counter() - t0
        t1 = time.perf_counter()
        ca._m.wait()
        commits.append(time.perf_counter() - t1)
        return t

    deferred = []

    def defer_save():  # TorchCheckpointer(defer_snapshot=True)
        t0 = time.perf_counter()
        cd.save(nxt())
        t_save = time.perf_counter() - t0
        t1 = time.perf_counter()
        compute()
        computes.append(time.perf_counter() - t1)
        t2 = time.perf_counter()
        cd.fence()
        t_fence = time.perf_counter() - t2
        with torch.no_grad():  # the optimizer update, after the fence
            for p in model.parameters():
                p.mul_(1.0)
        cd.wait()
        deferred.append((t_save, t_fence))

    copyfree = []

    def copyfree_save():  # blocked = save(); then a step writes the weights
        t0 = time.perf_counter()
        cf.save(nxt())
        t = time.perf_counter() - t0
        compute()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.0)
        cf.wait()
        st = cf.last_save()
        copyfree.append((t, st["snapshot_copied_bytes"], st["snapshot_extra_bytes"]))
        return t

    r = run_reps(args.reps, {"sync": (lambda: fresh_dir(sp_s), sync_save),
                             "async": (lambda: fresh_dir(sp_a), async_save),
                             "defer": (lambda: fresh_dir(sp_d), defer_save),
                             "copyfree": (lambda: fresh_dir(sp_f), copyfree_save)})
    blocked = [e for e in r["async"][2]]
    for c in (cs, ca, cd, cf):
        c.close()
    emit(op="async", nbytes=nbytes, first=first, first_defer=first_d, t_sync=r["sync"][0],
         blocked=blocked, commit=commits, defer_save=[x[0] for x in deferred],
         defer_fence=[x[1] for x in deferred], compute=computes, first_copyfree=first_f,
         copyfree_mode=mode_f, copyfree=[x[0] for x in copyfree],
         copyfree_copied=[x[1] for x in copyfree], copyfree_extra=[x[2] for x in copyfree])


def op_pyman(args, d):
    """The Python side of the overhead row; writes the C driver's spec."""
    from shardsafe.training import TorchCheckpointer
    model, opt, sched = make_training(args.size)
    nbytes = state_bytes(model, opt)
    sp = os.path.join(d, "pyman")
    os.makedirs(sp, exist_ok=True)
    cfg = config(sp)
    ck = TorchCheckpointer(model, opt, sched, config=cfg)
    ck._prepare(None)  # manager creation, not timed (bench_py_cman: same)
    spec = os.path.join(d, "cman.spec")
    if not os.path.exists(spec):
        from shardsafe.manager import _config_text
        mdl, optim, layout = ck._flatten()
        blobs = ck._blobs(layout, None)
        fw = __import__("shardsafe._frameworks", fromlist=["framework"]).framework("pt")
        with open(spec, "w") as fh:
            for k, v in cfg.items():
                fh.write(f"c {k} {_config_text(k, v)}\n")
            for kind, group in ((0, mdl), (1, optim)):
                for name, t in group.items():
                    dname = fw.dtype_name(t.dtype, name)
                    dims = " ".join(str(x) for x in t.shape)
                    fh.write(f"t {kind} {dname} {t.dim()} {dims}{' ' if dims else ''}{name}\n")
            for name, data in blobs.items():
                fh.write(f"b {len(data)} {name}\n")
    times, cpus, lib = [], [], []
    for r in range(args.reps + 1):  # the first is a warm-up, dropped by main()
        fresh_dir(sp)
        c0, t0 = cpu(), time.perf_counter()
        ck.save(progress(100 * (r + 1)))
        times.append(time.perf_counter() - t0)
        cpus.append(cpu() - c0)
        lib.append(ck._m.last_save()["total_seconds"])
    ck.close()
    shutil.rmtree(sp, ignore_errors=True)
    emit(op="pyman", nbytes=nbytes, t=times, cpu=cpus, total_seconds=lib)


def op_warm(args, d):
    """Touch and free 4x the state once, in a process of its own, before
    each row (as bench_py.py does): on a VM, the first touch of guest
    memory the host has not backed yet is many times slower than a later
    one."""
    import numpy as np
    x = np.ones(4 * args.size * 2**20, np.uint8)
    del x
    emit(op="warm")


def child(cmd, what):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_py_manager: {what} failed:\n{out.stderr}{out.stdout}")
    for line in out.stdout.splitlines():
        if line.startswith("@@ "):
            r = json.loads(line[3:])
            print("  " + line[3:], file=sys.stderr, flush=True)
            return r
    sys.exit(f"bench_py_manager: {what}: no result")


def py_child(op, args, d):
    return child([sys.executable, os.path.abspath(__file__), "--op", op, "--size-mib",
                  str(args.size), "--reps", str(args.reps), d], op)


def table(r, args):
    s, a, py, c = r["save"], r["async"], r["pyman"], r["cman"]
    n = s["nbytes"]
    gbs = lambda t: f"{n / t / 1e9:.2f} GB/s"  # noqa: E731
    rows = ["| row | shardsafe (best; median) | baseline (same run; best; median) | ratio | target | status | peak RSS (MiB) | load avg |",
            "|---|---|---|---|---|---|---|---|"]
    dd, ck, m, raw = (min(s["t_" + k]) for k in ("dd", "ck", "m", "raw"))
    ratio = dd / ck
    rows.append(f"| 1. TorchCheckpointer.save (sync, fsync=1) vs dd conv=fsync | {gbs(ck)}; {gbs(med(s['t_ck']))} | "
                f"dd: {gbs(dd)}; {gbs(med(s['t_dd']))} | {ratio:.2f} (median {med(s['t_dd']) / med(s['t_ck']):.2f}) | >= 0.85 | "
                f"{'PASS' if ratio >= 0.85 else '**MISS**'} | {s['peak_rss_mib']:.0f} | {s['loadavg']:.2f} |")
    rows.append(f"| 1. CheckpointManager.save (same state, flattened) vs dd | {gbs(m)}; {gbs(med(s['t_m']))} | "
                f"dd: {gbs(dd)} | {dd / m:.2f} | - | - | - | - |")
    rows.append(f"| 1. diagnostic: write(2) + fsync of the same tensors, in-process | - | {gbs(raw)}; {gbs(med(s['t_raw']))} | "
                f"{raw / ck:.2f} (write / TorchCheckpointer) | - | - | - | - |")
    steady_b, sync_med = a["blocked"], med(a["t_sync"])
    frac = med(steady_b) / sync_med
    rows.append(f"| 2. async save: caller blocked in save(), 2nd+ saves | median {med(steady_b) * 1e3:.0f} ms (best {min(steady_b) * 1e3:.0f} ms) | "
                f"sync save: median {sync_med:.3f} s (best {min(a['t_sync']):.3f} s) | {frac * 100:.1f}% | <= 10% | "
                f"{'PASS' if frac <= 0.10 else '**MISS**'} | {a['peak_rss_mib']:.0f} | {a['loadavg']:.2f} |")
    dblk = [x + y for x, y in zip(a["defer_save"], a["defer_fence"])]
    rows.append(f"| 2. async, deferred snapshot: save() + fence() after a forward+backward ({med(a['compute']):.2f} s) | "
                f"median {med(dblk) * 1e3:.0f} ms (save {med(a['defer_save']) * 1e3:.0f} + fence {med(a['defer_fence']) * 1e3:.0f}) | "
                f"same | {med(dblk) / sync_med * 100:.1f}% | - | - | - | - |")
    rows.append(f"| 2. async: 1st save (staging faulted in at manager create, during training) / deferred 1st | {a['first']:.3f} s / {a['first_defer']:.3f} s | "
                f"2nd+ median: {med(steady_b):.3f} s / {med(dblk):.3f} s | {a['first'] / med(steady_b):.2f}x / {a['first_defer'] / max(med(dblk), 1e-9):.2f}x steady | <= 2x | "
                f"{'PASS' if a['first'] <= 2 * med(steady_b) else '**MISS**'} | - | - |")
    dfrac = med(dblk) / sync_med
    rows.append(f"| 2. TorchCheckpointer(defer_snapshot=True): blocked (save + fence) / sync save | {dfrac * 100:.2f}% | "
                f"sync median {sync_med:.3f} s | {dfrac:.4f} | <= 2% | {'PASS' if dfrac <= 0.02 else '**MISS**'} | - | - |")
    if "copyfree" in a:
        cfb = med(a["copyfree"])
        cff = cfb / sync_med
        rows.append(f"| 2. copy-free snapshot (mode {a['copyfree_mode']}): blocked in save(), 2nd+ (1st {a['first_copyfree'] * 1e3:.0f} ms) | "
                    f"median {cfb * 1e3:.1f} ms | sync median {sync_med:.3f} s | {cff * 100:.2f}% | <= 2% | "
                    f"{'PASS' if cff <= 0.02 else '**MISS**'} | - | - |")
        rows.append(f"| 2. copy-free: pages copied / extra memory (a step writes every weight during the save) | "
                    f"{med(a['copyfree_copied']) / 2**20:.1f} MiB / {med(a['copyfree_extra']) / 2**20:.1f} MiB | state {n / 2**20:.0f} MiB | "
                    f"{med(a['copyfree_extra']) / n:.3f} | - | - | - | - |")
    rows.append(f"| 2. async: background commit after save() returned (median) | {med(a['commit']):.3f} s | same | "
                f"{med(a['commit']) / sync_med:.2f} | - | - | - | - |")
    pt, ct = min(py["t"]), min(c["t"])
    over = pt / ct - 1
    rows.append(f"| 3. Python (TorchCheckpointer.save) vs the C manager (bench_py_cman), same state | "
                f"{pt:.3f} s; {med(py['t']):.3f} s | C: {ct:.3f} s; {med(c['t']):.3f} s | {over * 100:+.1f}% (median {(med(py['t']) / med(c['t']) - 1) * 100:+.1f}%) | <= +5% | "
                f"{'PASS' if over <= 0.05 else '**MISS**'} | py {py['peak_rss_mib']:.0f} / C {c['peak_rss_mib']:.0f} | {py['loadavg']:.2f} |")
    inside = [t - l for t, l in zip(py["t"], py["total_seconds"])]
    rows.append(f"| 3. diagnostic: Python wall time minus the library's total_seconds, same save | "
                f"median {med(inside) * 1e3:.1f} ms ({med(inside) / med(py['t']) * 100:.1f}% of the save) | - | - | - | - | - | - |")
    rows.append(f"| 3. diagnostic: CPU time Python / C | {med(py['cpu']):.3f} s | {med(c['cpu']):.3f} s | "
                f"{med(py['cpu']) / med(c['cpu']):.2f} | - | - | - | - |")
    return "\n".join(rows)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--size-mib", dest="size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cman", default=None)
    ap.add_argument("--rounds", type=int, default=2,
                    help="overhead row: Python and C processes alternate this many times")
    ap.add_argument("--op")
    ap.add_argument("--only", default="save,async,overhead")
    args = ap.parse_args()
    if args.op:
        {"save": op_save, "async": op_async, "pyman": op_pyman,
         "warm": op_warm}[args.op](args, args.dir)
        return
    cman = args.cman
    if cman is None:
        import shardsafe
        cman = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(shardsafe.__file__)))), "bench_py_cman")
    import tempfile
    import shardsafe
    import torch
    load0 = os.getloadavg()
    r = {}
    only = args.only.split(",")
    with tempfile.TemporaryDirectory(prefix="shardsafe-bench-pyman.", dir=args.dir) as d:
        for op in ("save", "async"):
            if op in only:
                print(f"bench_py_manager: {op} ...", file=sys.stderr, flush=True)
                py_child("warm", args, d)
                r[op] = py_child(op, args, d)
        if "overhead" in only:
            print("bench_py_manager: overhead ...", file=sys.stderr, flush=True)
            pys, cs = [], []
            py_child("warm", args, d)
            for _ in range(args.rounds):
                pys.append(py_child("pyman", args, d))
                cs.append(child([cman, os.path.join(d, "cman.spec"), os.path.join(d, "cman"),
                                 str(args.reps + 1)], "bench_py_cman"))
            for x in pys + cs:  # the first save of each process is a warm-up
                for k in ("t", "cpu", "total_seconds"):
                    x[k] = x[k][1:]
            r["pyman"] = dict(pys[0], t=sum((x["t"] for x in pys), []),
                              cpu=sum((x["cpu"] for x in pys), []),
                              total_seconds=sum((x["total_seconds"] for x in pys), []),
                              peak_rss_mib=max(x["peak_rss_mib"] for x in pys))
            r["cman"] = dict(cs[0], t=sum((x["t"] for x in cs), []),
                             cpu=sum((x["cpu"] for x in cs), []),
                             total_seconds=sum((x["total_seconds"] for x in cs), []),
                             peak_rss_mib=max(x["peak_rss_mib"] for x in cs))
    print("@@ " + json.dumps({"op": "all", **r}))
    if not all(k in r for k in ("save", "async", "pyman")):
        return
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    md = (f"\n### Python checkpoint manager (bench/bench_py_manager.py)\n\n"
          f"Reproduce: `scripts/build.sh build && PYTHONPATH=build/python /usr/bin/python3 "
          f"bench/bench_py_manager.py --size-mib {args.size} --reps {args.reps} --rounds {args.rounds}` "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
          f"shardsafe {shardsafe.__version__}, torch {torch.__version__}, load average "
          f"{' '.join(f'{x:.2f}' for x in load0)} at start, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at end, nproc {os.cpu_count()}). "
          f"State: Linear(2048, 2048) layers' state_dict + AdamW exp_avg/exp_avg_sq (F32) + step, "
          f"{r['save']['nbytes'] / 2**20:.0f} MiB ({r['save']['nbytes']:,} bytes; "
          f"{r['save']['bytes_written']:,} written with metadata and blobs); best of {args.reps} "
          f"(overhead row: {args.rounds} x {args.reps}), interleaved; each save from an empty "
          f"save path after sync; fsync=1.\n\n" + table(r, args) + "\n")
    print(md)


if __name__ == "__main__":
    main()
