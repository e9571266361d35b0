#!/usr/bin/python3
"""Collect machine facts and turn bench result lines into bench/results.md.

    report.py machine TARGET_DIR [start|end]   print "@@" lines with machine facts
    report.py render RAW_LOG [COMMAND]         print the markdown results table
    report.py powerloss LOG EXIT [BINARY]      "@@" lines of a test_powerloss log

RAW_LOG holds the output of bench_io, bench_torch.py and run.sh's dd runs:
machine-readable lines start with "@@ " followed by one JSON object
{"mode", "key", "value", "unit", "label"}; other lines are human-readable.
Standard library only.
"""
import json
import os
import platform
import subprocess
import sys
import time


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return ""


def emit(key, value, label=""):
    print("@@ " + json.dumps({"mode": "machine", "key": key, "value": value,
                              "unit": "", "label": label}))


def machine(target, when):
    if when == "start":
        emit("date", time.strftime("%Y-%m-%d %H:%M:%S %Z"))
        emit("nproc", os.cpu_count())
        cpu = ""
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        emit("cpu", cpu)
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    emit("mem_gib", round(int(line.split()[1]) / 1024 / 1024, 1))
        emit("kernel", platform.release())
        emit("os", sh("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"))
        fst = sh("df", "--output=fstype", target).splitlines()
        emit("fs", fst[-1].strip() if fst else sh("stat", "-f", "-c", "%T", target))
        src = sh("df", "--output=source", target).splitlines()
        emit("fs_device", src[-1].strip() if src else "")
        emit("target_dir", os.path.dirname(os.path.abspath(target)))
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
                emit("thp", f.read().strip())
        except OSError:
            pass
        emit("cc", sh("cc", "--version").splitlines()[0] if sh("cc", "--version") else "")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        head = sh("git", "-C", root, "rev-parse", "--short", "HEAD")
        # the library and the benchmarks themselves (other trees may be dirty)
        dirty = sh("git", "-C", root, "status", "--porcelain", "--", "src", "include",
                   "bench", "CMakeLists.txt")
        emit("commit", head + (" + uncommitted changes" if dirty else ""))
    with open("/proc/loadavg") as f:
        emit("loadavg_" + when, " ".join(f.read().split()[:3]))


# ---------------------------------------------------------------------------

def load(path):
    res, human = {}, []
    with open(path) as f:
        for line in f:
            if line.startswith("@@ "):
                r = json.loads(line[3:])
                res[(r["mode"], r["key"])] = r
            elif line.strip():
                human.append(line.rstrip("\n"))
    return res, human


class R:
    def __init__(self, res):
        self.res = res

    def __call__(self, mode, key, default=None):
        r = self.res.get((mode, key))
        return r["value"] if r else default

    def has(self, mode, key):
        return (mode, key) in self.res


def gbs(v):
    return "n/a" if v is None else f"{v:.2f} GB/s"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fr(x):
    return "n/a" if x is None else f"{x:.2f}"


def status(x, target, higher_is_better=True):
    if x is None:
        return "not measured"
    ok = x >= target if higher_is_better else x < target
    return "PASS" if ok else "**MISS**"


def render(raw, command):
    res, human = load(raw)
    g = R(res)
    out = []
    w = out.append
    m = lambda k: g("machine", k, "?")
    w("# shardsafe benchmark results")
    w("")
    w(f"Reproduce: `{command}` (builds Release in `build-bench/`, runs every "
      "benchmark, writes this file). See `bench/README.md` for what each row measures.")
    w("")
    w("| machine | |")
    w("|---|---|")
    w(f"| date | {m('date')} |")
    w(f"| commit | {m('commit')} |")
    w(f"| CPU | {m('cpu')}, nproc = {m('nproc')} |")
    w(f"| memory | {m('mem_gib')} GiB |")
    w(f"| kernel / OS | {m('kernel')} / {m('os')} |")
    w(f"| target dir filesystem | {m('fs')} on {m('fs_device')} ({m('target_dir')}) |")
    w(f"| transparent hugepages | {m('thp')} |")
    w(f"| compiler | {m('cc')} |")
    w(f"| benchmark priority | nice {g('machine', 'nice', 0)} |")
    w(f"| load average at start / end | {m('loadavg_start')} / {m('loadavg_end')} |")
    w("")
    if g("machine", "note"):
        w(f"**Note:** {g('machine', 'note')}")
        w("")
    try:
        busy = float(str(m("loadavg_start")).split()[0]) > 0.5 * float(m("nproc"))
    except ValueError:
        busy = False
    if busy:
        w("**The machine was busy during this run (1-minute load average above half the "
          "cores): other processes compete for CPU and memory bandwidth, so absolute "
          "numbers are low and noisy; ratios against baselines measured right next to "
          "them (same process, interleaved runs) are the most reliable. Comparisons "
          "across processes (section 2) suffer most.**")
        w("")
    w("All speeds are tensor payload bytes / best wall time of 5 runs (GB = 10^9 bytes); "
      "every ratio divides by a baseline measured in the same run. "
      "Read benchmarks read from a warm page cache. \"Ratio by CPU time\" uses the "
      "process CPU time (user + system) of the same runs instead of wall time: it does "
      "not count time spent waiting for a CPU, so it is the steadier number on a shared "
      "machine (it also leaves out waiting for the disk, so for fsync rows it says "
      "nothing about the device).")
    w("")

    # ---- 1. physical limits ----
    w("## 1. shardsafe vs the physical limit")
    w("")
    w("| | what | shardsafe | baseline (same run) | ratio | ratio by CPU time | target "
      "| status |")
    w("|---|---|---|---|---|---|---|---|")

    def row(tag, what, shs, base, r, target, st, cpu=None):
        w(f"| {tag} | {what} | {shs} | {base} | {r} | {fr(cpu) if cpu else ''} | {target} "
          f"| {st} |")

    for fs, name in ((0, "no fsync"), (1, "+ fsync")):
        tag = "fsync" if fs else "nofsync"
        s, b = g("write", "shs_" + tag), g("write", "base_" + tag)
        r = ratio(s, b)
        row("a", f"write ~1 GiB, {name}", f"`shs_save_file`{' fsync=1' if fs else ''}: "
            f"{gbs(s)}", f"write(2) same bytes{' + fsync' if fs else ''}: {gbs(b)}",
            fr(r), "≥ 0.90", status(r, 0.9), g("write", "cpu_ratio_" + tag))
        fa = g("write", "base_falloc_" + tag)
        row("a", f"write, {name}: diagnostic baseline write(2) after "
            "`fallocate(FALLOC_FL_KEEP_SIZE)` of the whole file (what numpy's `tofile` does)",
            gbs(s), f"fallocate + write(2): {gbs(fa)}", fr(ratio(s, fa)), "—",
            "(headroom, see notes)")
        d = g("dd", "dd_" + tag)
        row("a", f"write, {name}: reference `dd if=/dev/zero bs=8M count=128"
            f"{' conv=fsync' if fs else ''}`", gbs(s), f"dd: {gbs(d)}", fr(ratio(s, d)),
            "(reference)", "")
    mc = g("read", "memcpy")
    for key, what, target in (
            ("shs_mmap", "read all tensors into pre-faulted buffers, default (mmap) path: "
             "open + `shs_file_read` x64 + close", True),
            ("shs_pread", "same with `SHS_OPEN_NO_MMAP` (pread path)", True),
            ("raw_pread", "diagnostic: raw open + pread per tensor, no library", False),
            ("shs_mmap_hot", "diagnostic: `shs_file_read` 2nd pass on an already-faulted "
             "mapping", False),
            ("raw_mmap", "diagnostic: raw mmap + memcpy + munmap, no library", False),
            ("raw_mmap_populate", "diagnostic: raw mmap(MAP_POPULATE) + memcpy + munmap",
             False)):
        s = g("read", key)
        r = ratio(s, mc)
        st = status(r, 0.9) if target else ""
        raw = ratio(g("read", "raw_pread"), mc)
        if key == "shs_pread" and r is not None and r < 0.9 and raw is not None:
            st += (f" (raw pread without the library: {raw:.2f}; the limit is the kernel's "
                   "copy, see below)" if raw < 0.9 and r >= 0.95 * raw else "")
        row("b", what, gbs(s), f"memcpy between pre-faulted buffers: {gbs(mc)}", fr(r),
            "≥ 0.90" if target else "—", st,
            ratio(g("read", key + "_cpu"), g("read", "memcpy_cpu")))
    mca = g("read", "memcpy_alloc")
    for key, what in (("shs_mmap_alloc", "read into fresh memory allocated inside the "
                       "timing (like `torch.load`), mmap path"),
                      ("shs_pread_alloc", "same, pread path")):
        s = g("read", key)
        row("b", what, gbs(s), f"fresh memory + memcpy: {gbs(mca)}", fr(ratio(s, mca)), "—",
            "",
            ratio(g("read", key + "_cpu"), g("read", "memcpy_alloc_cpu")))
    sp, rp = g("read", "shs_pread"), g("read", "raw_pread")
    row("b", "pread path: library overhead over raw pread", gbs(sp), f"raw pread: {gbs(rp)}",
        fr(ratio(sp, rp)), "—", "", ratio(g("read", "shs_pread_cpu"),
                                           g("read", "raw_pread_cpu")))
    ob, ot = g("read", "open_big_median_us"), g("read", "open_tiny_median_us")
    r = ratio(ob, ot)
    st = "n/a"
    if r is not None:
        st = "PASS (O(header))" if r < 2.0 and ob < 1000 else "**MISS**"
    row("c", f"`shs_file_open` + close of the {g('read', 'open_file_bytes', 0) / 2**30:.2f} "
        "GiB file (median of 50; time ratio, lower is better)",
        f"{fr(ob)} µs", f"same names, tiny data ({g('read', 'open_tiny_bytes', 0):.0f} B "
        f"file): {fr(ot)} µs", fr(r), "≈ 1, µs", st)
    ho, hm = g("header", "hdr_open_ms"), g("header", "hdr_open_median_ms")
    js, jm = g("json", "json_loads_ms"), g("json", "json_loads_median_ms")
    nt, hb = g("header", "hdr_tensors", 0), g("header", "hdr_bytes", 0)
    hc, jc = g("header", "hdr_open_cpu_median_ms"), g("json", "json_loads_cpu_median_ms")
    hst = status(hm, 70.0, higher_is_better=False)
    if hm is not None and hc is not None and hm >= 70.0 and hc < 70.0:
        hst = (f"**MISS** on wall time; PASS on CPU time ({hc:.1f} ms): the wall time "
               "includes waiting for a CPU on this busy machine")
    row("d", f"open + close of a {nt:.0f}-tensor file ({hb / 1e6:.1f} MB header); time "
        "ratio, lower is better", f"best {fr(ho)} ms, median {fr(hm)} ms (CPU median "
        f"{fr(hc)} ms)", f"Python `json.loads` of the same header: best {fr(js)} ms, "
        f"median {fr(jm)} ms (CPU median {fr(jc)} ms)",
        fr(ratio(hm, jm)), "< 70 ms (median)", hst, ratio(hc, jc))
    for key, what in (("hdr_open_memory", "diagnostic: `shs_file_open_memory` (no I/O)"),
                      ("hdr_pread", "diagnostic: pread of the header bytes"),
                      ("hdr_utf8", "diagnostic: UTF-8 check of the header")):
        v, vm = g("header", key + "_ms"), g("header", key + "_median_ms")
        row("d", what, f"best {fr(v)} ms, median {fr(vm)} ms", "share of the full open",
            fr(ratio(vm, hm)), "—", "", ratio(g("header", key + "_cpu_median_ms"), hc))
    w("")
    w("Reference implementation (Rust `safetensors`) on this machine for the 100k-tensor "
      "header: about 140 ms (not measured in this run: it is not installed).")
    w("")
    fa0, b0 = g("write", "base_falloc_nofsync"), g("write", "base_nofsync")
    if fa0 and b0:
        w(f"Write path: reserving the file's extents before writing (`fallocate`) makes "
          f"the same write(2) calls {fa0 / b0:.2f}x faster here (ext4 skips its per-page "
          "delayed allocation); the writer knows the file size when it seals the header and "
          "could do the same (and would then fail with ENOSPC before writing any data).")
        w("")
    slower = g("read", "mmap_slower_than_pread")
    if slower is not None:
        sm, spp = g("read", "shs_mmap"), g("read", "shs_pread")
        if slower:
            w(f"**Note for the read path: the mmap path ({gbs(sm)}) is SLOWER than the "
              f"pread path ({gbs(spp)}) for whole-tensor reads into caller memory.**")
        else:
            w(f"Read path: the mmap path ({gbs(sm)}) is not slower than the pread path "
              f"({gbs(spp)}) for whole-tensor reads in this run (fresh mapping each pass, "
              "page faults and munmap included). The pread path is bound by the kernel's "
              "copy to user memory (`_copy_to_iter`: ~97% of its samples in a `perf` profile, see bench/README.md), which "
              "is slower than glibc's memcpy; the mmap path's page faults are a few percent "
              "of its time on this kernel (large page-cache folios). Older kernels fault "
              "in smaller pieces: re-check there before switching large copies to pread.")
        w("")

    # ---- 2. vs torch / numpy ----
    w("## 2. shardsafe vs PyTorch and NumPy (what users do today)")
    w("")
    w("shardsafe numbers come from `bench_io` (C), the others from `bench_torch.py` "
      "(`/usr/bin/python3`), in the same run, on the same 64 tensors. Each side also "
      "measures the same physical baseline in its own process (write(2) of the same "
      "buffers; allocate + memcpy for loads). **direct** = shardsafe speed / other speed; "
      "**normalised** = (shardsafe / its baseline) / (other / its baseline), which cancels "
      "the drift between the two processes. > 1: shardsafe is faster.")
    w("")
    w("| operation | shardsafe | C baseline | torch or numpy | Python baseline | direct "
      "| normalised |")
    w("|---|---|---|---|---|---|---|")
    W = lambda k: g("write", k)
    Rd = lambda k: g("read", k)

    def cmp(op, sname, skey, bname, bval, oname, oval, pname, pval):
        sval = skey
        norm = None
        if None not in (sval, bval, oval, pval):
            norm = (sval / bval) / (oval / pval)
        w(f"| {op} | {sname} {gbs(sval)} | {bname} {gbs(bval)} | {oname} {gbs(oval)} | "
          f"{pname} {gbs(pval)} | {fr(ratio(sval, oval))} | {fr(norm)} |")

    t = lambda k: g("torch", k)
    n = lambda k: g("numpy", k)
    cmp("save, no fsync", "`shs_save_file`", W("shs_nofsync"), "write(2)", W("base_nofsync"),
        "`torch.save`", t("torch_save"), "os.write", t("base_write"))
    cmp("save + fsync", "`shs_save_file` fsync=1", W("shs_fsync"), "write(2)+fsync",
        W("base_fsync"), "`torch.save` + fsync", t("torch_save_fsync"), "os.write+fsync",
        t("base_write_fsync"))
    cmp("load into new memory (warm cache)", "open + `shs_file_read` into fresh memory",
        Rd("shs_mmap_alloc"), "fresh memory + memcpy", Rd("memcpy_alloc"), "`torch.load`",
        t("torch_load"), "`tensor.clone()`", t("base_clone"))
    cmp("save, no fsync", "`shs_save_file`", W("shs_nofsync"), "write(2)", W("base_nofsync"),
        "`np.save` x64, one file", n("np_save"), "os.write", n("base_write"))
    cmp("save, no fsync", "`shs_save_file`", W("shs_nofsync"), "write(2)", W("base_nofsync"),
        "`np.savez`", n("np_savez"), "os.write", n("base_write"))
    cmp("save + fsync", "`shs_save_file` fsync=1", W("shs_fsync"), "write(2)+fsync",
        W("base_fsync"), "`np.save` + fsync", n("np_save_fsync"), "os.write+fsync",
        n("base_write_fsync"))
    cmp("load into new memory (warm cache)", "open + `shs_file_read` into fresh memory",
        Rd("shs_mmap_alloc"), "fresh memory + memcpy", Rd("memcpy_alloc"), "`np.load` x64",
        n("np_load"), "`ndarray.copy()`", n("base_copy"))
    cmp("load into new memory (warm cache)", "same", Rd("shs_mmap_alloc"),
        "fresh memory + memcpy", Rd("memcpy_alloc"), "`np.load(npz)`", n("np_load_npz"),
        "`ndarray.copy()`", n("base_copy"))
    w(f"| load into pre-faulted buffers (no Python equivalent) | `shs_file_read` "
      f"{gbs(Rd('shs_mmap'))} | memcpy {gbs(Rd('memcpy'))} | `torch.load` "
      f"{gbs(t('torch_load'))} / `np.load` {gbs(n('np_load'))} | | "
      f"{fr(ratio(Rd('shs_mmap'), t('torch_load')))} / "
      f"{fr(ratio(Rd('shs_mmap'), n('np_load')))} | |")
    w("")
    w("`np.save` reserves the file's extents with `fallocate` before writing "
      "(numpy's `tofile`), which is why it beats plain write(2) here; see the fallocate "
      "row of section 1 for what the same would give shardsafe.")
    w("")
    w("Loads into new memory: the time goes mostly to first-touch page faults of the "
      "destination (the kernel zeroing pages), which depends on the allocator and, on "
      "this VM, on the hypervisor backing guest memory: the shardsafe side allocates "
      "fresh anonymous memory for every run; Python's allocators recycle memory between "
      "runs (glibc) and numpy asks for huge pages. Compare those rows by the "
      "**normalised** ratio, which sets each load against a copy into the same kind of "
      "memory in the same process. Reading into reused buffers avoids the cost entirely "
      "(last row).")
    w("")

    # ---- 3. checkpoints (manager) ----
    if any(k[0].startswith("ckpt_") for k in res):
        checkpoints(g, w)

    # ---- 4. peak RSS ----
    w("## 4. Peak RSS (ru_maxrss, one process per mode)")
    w("")
    w("Baseline: the tensor payload the process must hold (its in-memory state).")
    w("")
    w("| process | peak RSS | baseline | ratio | what it holds |")
    w("|---|---|---|---|---|")
    pay = g("write", "bytes", 0) / 2**20
    w(f"| `bench_io write` | {fr(g('write', 'peak_rss'))} MiB | state {pay:.0f} MiB | "
      f"{fr(ratio(g('write', 'peak_rss'), pay))} | state; writer adds its 1 MiB buffer |")
    w(f"| `bench_io read` | {fr(g('read', 'peak_rss'))} MiB | state + destination "
      f"{2 * pay:.0f} MiB | {fr(ratio(g('read', 'peak_rss'), 2 * pay))} | state, "
      "destination buffers and, during an mmap-path pass, the mapped file pages |")
    rb, rpp, rmm = (g("read", k) for k in ("rss_before_read_mib", "rss_pread_pass_mib",
                                           "rss_mmap_pass_mib"))
    w(f"| ↳ one pread-path pass (VmHWM) | {fr(rpp)} MiB | before the pass {fr(rb)} MiB | "
      f"{fr(ratio(rpp, rb))} | |")
    w(f"| ↳ one mmap-path pass (VmHWM) | {fr(rmm)} MiB | before the pass {fr(rb)} MiB | "
      f"{fr(ratio(rmm, rb))} | mapped page-cache pages count in RSS (shared, reclaimable) |")
    hbm = g("header", "hdr_bytes", 0) / 2**20
    w(f"| `bench_io header` | {fr(g('header', 'peak_rss'))} MiB | header {hbm:.1f} MiB | "
      f"{fr(ratio(g('header', 'peak_rss'), hbm))} | 100k views + file image + header copy "
      "+ parsed tables |")
    w(f"| `bench_torch.py json` | {fr(g('json', 'peak_rss'))} MiB | header {hbm:.1f} MiB | "
      f"{fr(ratio(g('json', 'peak_rss'), hbm))} | Python + parsed dict |")
    w(f"| `bench_torch.py torch` | {fr(g('torch', 'peak_rss'))} MiB | state {pay:.0f} MiB | "
      f"{fr(ratio(g('torch', 'peak_rss'), pay))} | state + one `torch.load` result + "
      "libtorch |")
    w(f"| `bench_torch.py numpy` | {fr(g('numpy', 'peak_rss'))} MiB | state {pay:.0f} MiB | "
      f"{fr(ratio(g('numpy', 'peak_rss'), pay))} | state + one `np.load` result |")
    st = g("ckpt_save", "state_bytes")
    if st:
        smib = st / 2**20
        for mode, what, base, mult in (
                ("ckpt_save", "state; the sync save streams from it", "state", 1),
                ("ckpt_async", "state + 1 async manager's pre-faulted staging copy at a time "
                 "(the first is freed before the second is created)", "state + staging", 2),
                ("ckpt_async_cf", "state + the copy-free snapshot's pages (no staging)",
                 "state", 1),
                ("ckpt_incr", "state (saves stream from it)", "state", 1),
                ("ckpt_resume", "state + the memcpy baseline's source copy + the mapped "
                 "checkpoint files' page-cache pages (shared, reclaimable)", "state + copy", 2)):
            v = g(mode, "peak_rss")
            if v is not None:
                w(f"| `bench_ckpt {mode[5:].replace('incr', 'incremental').replace('_cf', '-cf')}` | {fr(v)} MiB | "
                  f"{base} {mult * smib:.0f} MiB | {fr(ratio(v, mult * smib))} | {what} |")
        v = g("torch_ckpt", "peak_rss")
        if v is not None:
            w(f"| `bench_torch_ckpt.py` | {fr(v)} MiB | state {smib:.0f} MiB | "
              f"{fr(ratio(v, smib))} | state + torch.save's buffers + libtorch |")
    w("")
    # ---- 5. distributed (MPI) ----
    if any(k[0].startswith("dist_") for k in res):
        distributed(g, w)
    # ---- 6. planner (pure, simulated ranks) ----
    if any(k[0] in ("plan_save", "plan_load") for k in res):
        plan(g, w)
    # ---- 7. read API and diff; 8. metadata open; 9. power-loss sweep ----
    if any(k[0] in ("read", "diff") for k in res):
        read_api(g, w)
    if any(k[0].startswith("meta_") for k in res):
        meta(g, w, res)
    if any(k[0] == "powerloss" for k in res):
        powerloss(g, w, res)
    # ---- 10. encryption at rest ----
    if any(k[0] == "ckpt_encrypt" for k in res):
        encryption(g, w)
    w("<details><summary>Raw output of this run</summary>")
    w("")
    w("```")
    out.extend(human)
    w("```")
    w("")
    w("</details>")
    print("\n".join(out))


def checkpoints(g, w):
    """Section 3: bench_ckpt (shs_manager_*) and bench_torch_ckpt.py."""
    S = lambda k: g("ckpt_save", k)
    A = lambda k: g("ckpt_async", k)
    I = lambda k: g("ckpt_incr", k)
    L = lambda k: g("ckpt_resume", k)
    T = lambda k: g("torch_ckpt", k)
    st = S("state_bytes") or A("state_bytes") or I("state_bytes") or L("state_bytes") or 0
    w("## 3. Checkpoints (manager)")
    w("")
    w(f"`bench_ckpt` (one process per mode): a {st / 2**30:.2f} GiB training state "
      "registered with `shs_state_add_tensor` (model: 48 F32 matrices + 16 F32 vectors, "
      "512 MiB; optimizer: Adam `exp_avg` / `exp_avg_sq` of each in BF16, 512 MiB; blobs "
      "`lr_scheduler`, `dataloader`, `rng`), saved and loaded through the checkpoint "
      "manager. Every save starts from a clean page cache (`sync`, not timed) into a "
      "fresh step directory (the previous one removed, not timed). Baselines are "
      "measured in the same process, interleaved.")
    w("")
    w("| | what | shardsafe | baseline (same run) | ratio | target | status |")
    w("|---|---|---|---|---|---|---|")
    r = ratio(S("shs_sync"), S("base_fsync"))
    w(f"| a | sync save, fsync=1: `shs_manager_save` (best of 3) | {gbs(S('shs_sync'))} "
      f"({fr(S('shs_sync_s'))} s) | write(2) of the same buffers to one file + fsync: "
      f"{gbs(S('base_fsync'))} | {fr(r)} (CPU time: {fr(S('cpu_ratio'))}) | ≥ 0.85 | "
      f"{status(r, 0.85)} |")
    dd = g("dd", "dd_fsync")
    if dd is not None:
        w(f"| a | reference: `dd if=/dev/zero bs=8M count=128 conv=fsync` (run.sh, best "
          f"of 3) | {gbs(S('shs_sync'))} | dd: {gbs(dd)} | {fr(ratio(S('shs_sync'), dd))} "
          "| (reference) | |")
    rt = ratio(S("shs_sync"), T("torch_save_fsync"))
    norm = None
    if None not in (S("shs_sync"), S("base_fsync"), T("torch_save_fsync"), T("base_fsync")):
        norm = (S("shs_sync") / S("base_fsync")) / (T("torch_save_fsync") / T("base_fsync"))
    w(f"| a | vs `torch.save` of the same tensors (model + optimizer dicts + small "
      f"entries) + `os.fsync`, `bench_torch_ckpt.py` (other process, best of 3) | "
      f"{gbs(S('shs_sync'))} | torch: {gbs(T('torch_save_fsync'))} (its os.write+fsync "
      f"baseline {gbs(T('base_fsync'))}) | {fr(rt)} (normalised {fr(norm)}) | ≥ 2 | "
      f"{status(rt, 2.0)} |")
    w(f"| a | diagnostic: XXH3-64 checksum of the whole state (the save hashes every "
      f"tensor) | {fr(S('xxh3_s'))} s | sync save {fr(S('shs_sync_s'))} s | "
      f"{fr(ratio(S('xxh3_s'), S('shs_sync_s')))} | — | |")
    sm = A("sync_median_s")
    for key, what, tgt in (
            ("a_first_s", "async save, **1st** save: time in `shs_manager_save` (allocates "
             "and pre-faults the staging buffers, then copies)", None),
            ("a_steady_s", "async save, 2nd+ saves (median of 3): time in "
             "`shs_manager_save` (staging copy)", 0.10),
            ("b_first_s", "`SHS_SAVE_DEFER_SNAPSHOT`, **1st** save: time in save() + in "
             "fence()", None),
            ("b_steady_s", "`SHS_SAVE_DEFER_SNAPSHOT`, 2nd+ saves (median of 3): time in "
             "save() + in fence(), read-only compute in between", 0.02)):
        v = A(key)
        rr = ratio(v, sm)
        w(f"| b | {what}; time ratio, lower is better | {fr(v)} s | sync save, same "
          f"process, median: {fr(sm)} s (best {fr(A('sync_s'))} s) | {fr(rr)} | "
          f"{'≤ %.2f' % tgt if tgt else '—'} | "
          f"{status(rr, tgt + 1e-12, higher_is_better=False) if tgt else ''} |")
    for key, what in (("a_first_over_steady", "staging copy"),
                      ("b_first_over_steady", "deferred snapshot")):
        v = A(key)
        w(f"| b | {what}: **1st** save blocked / 2nd+ blocked (staging allocated at create, "
          f"faulted in by the manager's thread during training: "
          f"{fr(A('staging_prefault_s'))} s, {fr(100 * (A('staging_huge_frac') or 0))}% huge "
          f"pages) | {fr(v)} | — | {fr(v)} | ≤ 2 | "
          f"{status(v, 2.0 + 1e-12, higher_is_better=False) if v is not None else ''} |")
    C = lambda k: g("ckpt_async_cf", k)
    if C("c_steady_s") is not None:
        csm = C("sync_median_s")
        for key, what, tgt in (
                ("c_first_s", "copy-free snapshot (userfaultfd write-protect; "
                 f"mode {fr(C('mode'))}, 3 = copy-free), **1st** save: time in "
                 "`shs_manager_save`", None),
                ("c_steady_s", "copy-free snapshot, 2nd+ saves (median of 3): time in "
                 "`shs_manager_save`", 0.02)):
            v = C(key)
            rr = ratio(v, csm)
            w(f"| b | {what}; time ratio, lower is better | {fr(v)} s | sync save, same "
              f"process, median: {fr(csm)} s | {fr(rr)} | {'≤ %.2f' % tgt if tgt else '—'} | "
              f"{status(rr, tgt + 1e-12, higher_is_better=False) if tgt else ''} |")
        w(f"| b | copy-free: extra memory (`snapshot_extra_bytes`: pages the update wrote "
          f"before the writer passed them, tensor edges, page table) / state, median; pages "
          f"copied {fr(C('c_copied_frac'))} of the state | {fr(C('c_extra_frac'))} | staging "
          f"copy: 1.0 | {fr(C('c_extra_frac'))} | — | |")
    w(f"| b | background commit (`total_seconds`: snapshot to commit), 2nd+ median: plain "
      f"async / deferred | {fr(A('a_commit_s'))} s / {fr(A('b_commit_s'))} s | sync save "
      f"{fr(sm)} s | {fr(ratio(A('a_commit_s'), sm))} / {fr(ratio(A('b_commit_s'), sm))} "
      "| — | |")
    w(f"| b | the simulated read-only compute while the deferred snapshot is taken "
      f"(median) | {fr(A('b_compute_s'))} s | same compute alone (best) "
      f"{fr(A('b_compute_alone_s'))} s | {fr(ratio(A('b_compute_s'), A('b_compute_alone_s')))}"
      " | — | |")
    full = I("full_median_s")
    for k in range(1, 6):
        fw = I(f"s{k}_written_frac")
        if fw is None:
            continue
        t = k >= 3
        note = "(writes everything by design" + (
            ": frozen tensors move to their own file)" if k == 2 else ")")
        w(f"| c | incremental save {k} ({100 * (I('changing_frac') or 0):.1f}% of the bytes "
          f"change each step): bytes_written / state_bytes {'' if t else note} | "
          f"{fr(fw)} (linked {fr(I(f's{k}_linked_frac'))}), {fr(I(f's{k}_s'))} s | full "
          f"save of the same step {fr(I(f's{k}_full_s'))} s (median of all {fr(full)} s) | "
          f"time {fr(ratio(I(f's{k}_s'), full))} | {'≤ 0.15 bytes' if t else '—'} | "
          f"{status(fw, 0.15 + 1e-12, higher_is_better=False) if t else ''} |")
    r = ratio(L("shs_load"), L("memcpy"))
    w(f"| d | resume: `shs_manager_load` into the registered pre-faulted buffers, warm "
      f"cache (best of 5), load_worker_number=1 | {gbs(L('shs_load'))} ({fr(L('shs_load_s'))} s) | memcpy of the "
      f"same bytes between pre-faulted buffers: {gbs(L('memcpy'))} | {fr(r)} | (≥ 0.80) | "
      f"one thread: copy + checksum |")
    r2 = ratio(L("shs_load_w2"), L("memcpy_w2"))
    w(f"| d | resume, load_worker_number=2 (one reader per core) | {gbs(L('shs_load_w2'))} | "
      f"memcpy, same run: {gbs(L('memcpy_w2'))} | {fr(r2)} | ≥ 0.80 | {status(r2, 0.80)} |")
    w(f"| d | diagnostic: XXH3-64 of the state (the load verifies every chunk) | "
      f"{fr(L('xxh3_s'))} s | load {fr(L('shs_load_s'))} s | "
      f"{fr(ratio(L('xxh3_s'), L('shs_load_s')))} | — | |")
    w("")


def distributed(g, w):
    """Section 5: bench_dist (mpirun; bench/mpi/bench_dist.c)."""
    S = lambda k: g("dist_save", k)
    L4 = lambda k: g("dist_load_np4", k)
    L3 = lambda k: g("dist_load_np3", k)
    D = lambda k: g("dist_dedup", k)
    nproc = g("machine", "nproc", 0) or 0
    ranks = int(S("ranks") or 4)
    w("## 5. Distributed (MPI)")
    w("")
    over = (f" on {nproc} cores: the ranks are **oversubscribed** (`mpirun "
            "--oversubscribe`), so ranks share cores and the aggregate numbers are "
            "CPU-bound, not disk-bound" if nproc and ranks > nproc else "")
    w(f"`bench_dist` under Open MPI, {ranks} ranks{over}. Each mode is its own `mpirun`; "
      "every baseline runs in the same `mpirun`, interleaved with the shardsafe runs. "
      "Times span all ranks (barrier, then latest end minus earliest start); speeds are "
      "aggregate payload bytes / best time of 3 (GB = 10^9 bytes). The state for save "
      f"and load: {(S('state_bytes') or 0) / 2**30:.2f} GiB of 8 F32 tensors `[rows, 1024]` "
      "sharded on dim 0 (256 MiB per rank with 4 ranks), no blobs.")
    w("")
    w("| | what | shardsafe | baseline (same run) | ratio | target | status |")
    w("|---|---|---|---|---|---|---|")
    for tag, name, tgt in (("fsync", "fsync=1", 0.85), ("nofsync", "fsync=0", None)):
        r = ratio(S("shs_" + tag), S("base_" + tag))
        w(f"| a | save, {name}: `shs_manager_save` on every rank, each its shard (best of 3) "
          f"| {gbs(S('shs_' + tag))} ({fr(S('shs_' + tag + '_s'))} s) | every rank "
          f"`write(2)` of the same bytes into its own file{' + fsync' if tgt else ''}, at "
          f"the same time: {gbs(S('base_' + tag))} ({fr(S('base_' + tag + '_s'))} s) | "
          f"{fr(r)} | {'≥ %.2f' % tgt if tgt else '—'} | {status(r, tgt) if tgt else ''} |")
    mrb = S("max_rank_bytes")
    w(f"| a | save: bytes written per rank, `write_balance` (max / mean) | "
      f"{fr(S('write_balance'))} (max rank {fr(mrb / 2**20 if mrb else None)} MiB) | "
      "even shards | | ≈ 1 | |")
    for lbl, L in (("4 → 4 (saved layout)", L4), ("4 → 3 (rows redistributed, uneven)", L3)):
        for key, wn in (("shs_load", 1), ("shs_load_w2", 2)):
            wrong = L("wrong_values")
            chk = "" if wrong is None else f"{wrong:.0f} wrong values"
            w(f"| b | load {lbl}, `shs_manager_load`, load_worker_number={wn}, warm cache "
              f"(best of 3) | {gbs(L(key))} ({fr(L(key + '_s'))} s) | every rank `memcpy` of "
              f"its bytes, same `mpirun`: {gbs(L('memcpy'))} | {fr(ratio(L(key), L('memcpy')))}"
              f" | — | {chk} |")
    for key, wn in (("shs_load", 1), ("shs_load_w2", 2)):
        r = ratio(L3(key), L4(key))
        norm = ratio(ratio(L3(key), L3("memcpy")), ratio(L4(key), L4("memcpy")))
        w(f"| b | **reshard**: load 4 → 3 / load 4 → 4, load_worker_number={wn}; two "
          f"`mpirun`s (np 3, np 4), ratio of their aggregate speeds (normalised by each "
          f"one's memcpy: {fr(norm)}) | {gbs(L3(key))} | {gbs(L4(key))} | {fr(r)} | ≥ 0.80 | "
          f"{status(r, 0.80)} |")
    t3, st3 = L3("chunk_bytes_touched"), L3("state_bytes")
    if t3 and st3:
        w(f"| b | diagnostic: saved-chunk bytes overlapping the ranks' boxes, 4 → 3 (a chunk "
          f"read in part has only the 4 MiB blocks it touches checksummed) | "
          f"{fr(t3 / 2**30)} GiB | state {fr(st3 / 2**30)} GiB | {fr(t3 / st3)} | — | |")
    u = D("unique_bytes")
    rb = D("rr_bytes_written")
    eq = None if None in (u, rb) else ("PASS" if rb == u else "**MISS**")
    w(f"| c | dedup: {D('tensors') or 64:.0f} replicated F32 tensors (4 KiB .. 8 MiB), "
      f"`remove_redundancy=1`: bytes written, sum over ranks (`bytes_written`; on disk: "
      f"{fr((D('rr_disk_bytes') or 0) / 1e6)} MB of chunks) | {fr((rb or 0) / 1e6)} MB | "
      f"unique bytes {fr((u or 0) / 1e6)} MB | {fr(ratio(rb, u))} | = 1 | {eq or 'not measured'} |")
    bal = D("rr_balance")
    w(f"| c | dedup, `remove_redundancy=1`: `write_balance` = max / mean bytes per rank "
      f"(from the files on disk: {fr(D('rr_disk_balance'))}) | {bal if bal is None else f'{bal:.4f}'}"
      f" | | | ≤ 1.05 | {status(bal, 1.05 + 1e-12, higher_is_better=False)} |")
    nb = D("norr_bytes_written")
    w(f"| c | dedup, `remove_redundancy=0` (every rank writes every tensor): bytes written "
      f"| {fr((nb or 0) / 1e6)} MB | unique bytes {fr((u or 0) / 1e6)} MB | "
      f"{fr(ratio(nb, u))} | = ranks ({D('ranks') or 4:.0f}) | |")
    w(f"| c | dedup save time (fsync=1, best of 3): with / without `remove_redundancy` | "
      f"{fr(D('rr_s'))} s | {fr(D('norr_s'))} s | {fr(ratio(D('rr_s'), D('norr_s')))} | — | |")
    w("")
    w("Peak RSS (`ru_maxrss`, max over ranks):")
    w("")
    w("| process | peak RSS | what it holds |")
    w("|---|---|---|")
    for mode, what in (
            ("dist_save", "its 256 MiB shard"),
            ("dist_load_np4", "its 256 MiB shard + the memcpy baseline's source copy + the "
             "mapped checkpoint pages it read (shared page cache, reclaimable)"),
            ("dist_load_np3", "its ~341 MiB shard + the source copy + mapped pages"),
            ("dist_dedup", "the 70 MiB replicated state")):
        v = g(mode, "peak_rss")
        if v is not None:
            w(f"| `bench_dist {mode[5:]}` | {fr(v)} MiB | {what} |")
    w("")


def plan(g, w):
    """Section 6: bench_plan (the pure planner, src/dist/plan.c, simulated ranks)."""
    S = lambda k: g("plan_save", k)
    L = lambda k: g("plan_load", k)
    w("## 6. Plan (pure, simulated ranks)")
    w("")
    ranks = S("ranks") or L("ranks")
    per = S("chunks_per_rank") or L("chunks_per_rank")
    w(f"`bench_plan` (one process per mode, one core, no I/O, no MPI): the save and load "
      f"plans of `src/dist/plan.c` for {ranks or 0:,.0f} simulated ranks x {per or 0:,.0f} chunks "
      "(1,000 tensors: even ids `[16384*k + r, 1024]` F32 split on dim 0 over all ranks, "
      "unevenly; odd ids `[1024 + t, 256]` BF16 replicated on every rank). The load reads "
      f"the deduplicated save back into {L('target_ranks') or 0:,.0f} ranks with the same "
      "kind of layout. Targets (issue): < 2 s and < 1 GiB for the plan. Peak RSS includes "
      "the input lists (all ranks' chunks and boxes, as every rank holds them after the "
      "all-gather; \"input\" column); the planner's own allocations are counted apart "
      "(heap peak). Status uses wall time and the RSS peak during that plan.")
    w("")
    w("| plan | wall time | CPU time | heap peak | RSS peak during the plan (input) "
      "| max / mean bytes per rank | status (< 2 s, < 1 GiB) |")
    w("|---|---|---|---|---|---|---|")

    def prow(G, pre, tag, what):
        t, cpu = G(f"{pre}_{tag}_seconds"), G(f"{pre}_{tag}_cpu_seconds")
        heap, mom = G(f"{pre}_{tag}_heap_peak_mib"), G(f"{pre}_{tag}_max_over_mean")
        rss = G(f"{pre}_{tag}_rss_mib")
        if rss is None or rss < 0:  # no VmHWM: the process peak over both plans
            rss = G(f"{pre}_peak_rss_mib")
        if t is None:
            return
        st_t = status(t, 2.0, higher_is_better=False)
        if t >= 2.0 and cpu is not None and cpu < 2.0:
            st_t = (f"**MISS** on wall time; PASS on CPU time ({cpu:.2f} s): the wall time "
                    "includes waiting for a CPU on this busy machine")
        st_m = status(rss, 1024.0, higher_is_better=False)
        w(f"| {what} | {fr(t)} s | {fr(cpu)} s | {heap if heap is None else f'{heap:.0f}'} MiB "
          f"| {rss if rss is None else f'{rss:.0f}'} MiB (input "
          f"{fr(G('input_rss_mib'))} MiB) | "
          f"{mom if mom is None else f'{mom:.3f}'} | time {st_t}; memory {st_m} |")

    prow(S, "save", "dedup", "save, `remove_redundancy=1` (replicas written once, "
         "balanced by bytes)")
    prow(S, "save", "nodedup", "save, `remove_redundancy=0`")
    prow(L, "load", "balanced", "load, `load_balanced=1` (one reader per saved chunk, "
         "sends)")
    prow(L, "load", "unbalanced", "load, `load_balanced=0`")
    w("")
    for G, mode in ((S, "save"), (L, "load")):
        v = G(f"{mode}_peak_rss_mib")
        if v is not None:
            w(f"Process peak RSS of `bench_plan {mode}` (both plans, input included): "
              f"{fr(v)} MiB ({status(v, 1024.0, higher_is_better=False)} against 1 GiB).")
            w("")


def read_api(g, w):
    """Section 7: bench_read (public read API vs the manager's load) and
    bench_diff.sh (`shardsafe diff --full` vs cmp)."""
    R = lambda k: g("read", k)
    D = lambda k: g("diff", k)
    st = R("state_bytes")
    w("## 7. Public read API and `shardsafe diff`")
    w("")
    w(f"`bench_read` saves {fr((st or 0) / 2**30)} GiB of F32 state (16 matrices "
      "`[rows, 4096]`) twice, with 4 ranks and with 3 (threads over an in-process "
      "communicator, rows split evenly), then reads it back from a warm page cache, best of "
      "5, interleaved with its baseline: the checkpoint manager's own load "
      "(`shs_manager_load`, timed without the manager's create) of the same boxes. The public "
      "read's time includes `shs_checkpoint_open` and close. Values are checked equal. "
      "`shardsafe diff --full` then compares the 4-rank and the 3-rank save (same values, "
      "different chunkings, so every chunk is read, reassembled and checksummed), best of 3, "
      "against `cmp` of two identical files holding the 4-rank save's data files end to end "
      "(same bytes per side, warm cache). Speeds are bytes per side / wall time; peak RSS "
      "from `/usr/bin/time` (max of the runs).")
    w("")
    w("| | what | shardsafe | baseline (same run) | ratio | target | status |")
    w("|---|---|---|---|---|---|---|")
    r = ratio(R("read_whole"), R("manager_whole"))
    w(f"| a | whole checkpoint: `shs_checkpoint_open` + `shs_checkpoint_read` of every "
      f"whole tensor (4 files) | {gbs(R('read_whole'))} ({fr(R('read_whole_s'))} s) | "
      f"`shs_manager_load` into whole tensors: {gbs(R('manager_whole'))} "
      f"({fr(R('manager_whole_s'))} s) | {fr(r)} | ≥ 0.90 | {status(r, 0.9)} |")
    r = ratio(R("read_box"), R("manager_box"))
    bb = R("box_bytes")
    w(f"| b | resharded box: rows of rank 1 of 3 of every tensor ({fr((bb or 0) / 2**20)} MiB) "
      f"from the 4-rank save | {gbs(R('read_box'))} ({fr(R('read_box_s'))} s) | a manager "
      f"loading that box (4 → 3): {gbs(R('manager_box'))} ({fr(R('manager_box_s'))} s) | "
      f"{fr(r)} | ≥ 0.80 | {status(r, 0.8)} |")
    dspd = None if None in (st, D("diff_s")) else st / D("diff_s") / 1e9
    cspd = None if None in (D("cmp_bytes"), D("cmp_s")) else D("cmp_bytes") / D("cmp_s") / 1e9
    dcpu = None if None in (st, D("diff_cpu_s")) or not D("diff_cpu_s") else \
        st / D("diff_cpu_s") / 1e9
    w(f"| c | `shardsafe diff --full` of the 4-rank and the 3-rank save (exit 0: identical) "
      f"| {gbs(dspd)} ({fr(D('diff_s'))} s; by CPU time {gbs(dcpu)}) | `cmp` of two "
      f"identical {fr((D('cmp_bytes') or 0) / 2**30)} GiB files: {gbs(cspd)} "
      f"({fr(D('cmp_s'))} s) | {fr(ratio(dspd, cspd))} | ≥ 1 GB/s | {status(dspd, 1.0)} |")
    lim = 64 + 2 * 4
    w(f"| d | `shardsafe diff --full` peak RSS | {fr(D('diff_rss'))} MiB | `cmp`: "
      f"{fr(D('cmp_rss'))} MiB | — | ≤ {lim} MiB (64 + one 4 MiB block per side) | "
      f"{status(D('diff_rss'), lim + 1e-9, higher_is_better=False)} |")
    w(f"| | peak RSS of `bench_read` (two 1 GiB destinations + the mapped checkpoint pages "
      f"the manager's load touched) | {fr(R('peak_rss'))} MiB | | | — | |")
    w("")


def meta(g, w, res):
    """Section 8: bench_meta (open of a metadata.json: parse + validate)."""
    w("## 8. Opening a metadata.json")
    w("")
    w("`bench_meta` (white-box, one process per row, one core): `shs__meta_parse` of a "
      "generated, sealed metadata.json (read, checksum, parse and every validation of an "
      "open), best of 3, interleaved with its baseline: jansson's `json_loadb` of the same "
      "bytes alone (the parse every open must do at least). `ranks`: 16,384 ranks x 3 files "
      "(model, optimizer, state), 8 tensors split on dim 0 over every rank + 1 replicated "
      "on all, a blob per rank. Hostile layouts, one tensor of N boxes: `overlap` (each box "
      "overlaps the next: must be refused), `stagger` (disjoint bricks, each row cut "
      "differently, valid: the worst case of the coverage check). Scaling = time(N) / "
      "time(N / 10): 10 is linear, 100 quadratic.")
    w("")
    w("| layout | N | metadata.json | open (best) | CPU | json_loadb alone | ratio | "
      "scaling | result | peak RSS | target | status |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mode in ("meta_ranks", "meta_overlap", "meta_stagger"):
        ns = sorted(int(k[1][5:]) for k in res if k[0] == mode and k[1].startswith("open_")
                    and k[1][5:].isdigit())
        prev, prev_n = None, None
        for n in ns:
            G = lambda k: g(mode, f"{k}_{n}")
            t = G("open")
            acc = G("accepted")
            want = 0 if mode == "meta_overlap" else 1
            res_s = ("accepted" if acc else "refused") + ("" if acc == want else " **(wrong)**")
            tgt, st = "—", ""
            if mode == "meta_ranks":
                tgt, st = "≤ 0.5 s", status(t, 0.5 + 1e-9, higher_is_better=False)
            f3 = lambda x: "n/a" if x is None else f"{x:.3f}"
            w(f"| `{mode[5:]}` | {n:,} | {fr(G('mib'))} MiB | {f3(t)} s | {f3(G('open_cpu'))} s "
              f"| {f3(G('json'))} s | {fr(ratio(t, G('json')))} | "
              f"{fr(ratio(t, prev)) if prev and n == 10 * prev_n else '—'} | {res_s} | {fr(G('peak_rss'))} MiB | "
              f"{tgt} | {st} |")
            prev, prev_n = t, n
    w("")


def powerloss(g, w, res):
    """Section 9: the long power-loss sweep (a correctness test)."""
    P = lambda k: g("powerloss", k)
    w("## 9. Long power-loss sweep")
    w("")
    w(f"`SHS_POWERLOSS_LONG=1 {P('binary')}` (the test build, RelWithDebInfo; a correctness "
      "sweep, not a timing): every save kind is cut before each of its file-system calls and "
      "the power-loss model keeps only what was made durable; after each cut the checkpoint "
      "must load as the old or the new one. Exit status "
      f"{P('exit'):.0f}, cmocka: `{P('result')}`, wall time {P('wall')}, peak RSS "
      f"{fr((P('maxrss_kib') or 0) / 1024)} MiB. Its summary lines:")
    w("")
    lines = sorted((k[1], r["value"]) for k, r in res.items()
                   if k[0] == "powerloss" and k[1].startswith("line_"))
    bugs = [v for _, v in lines if "KNOWN BUG" in v]
    if bugs:
        w(f"**{len(bugs)} known bug(s) reported by the sweep** (a cut after which neither "
          "checkpoint loads, outside the fsync-off control): see the `KNOWN BUG` line(s).")
        w("")
    w("```")
    for _, v in lines:
        w(v)
    w("```")
    w("")


def encryption(g, w):
    """Section 10: bench_ckpt encrypt (docs/encryption.md)."""
    E = lambda k: g("ckpt_encrypt", k)
    w("## 10. Encryption at rest")
    w("")
    w(f"`bench_ckpt encrypt DIR`: the {fr((E('state_bytes') or 0) / 2**30)} GiB state of "
      "section 3 saved by `shs_manager_save` (sync) without and with `encrypt_key_file` "
      "(AES-256-GCM, a STREAM of 1 MiB segments per chunk, libcrypto), interleaved, best of 3 "
      "each; then loaded back (warm cache) by `shs_manager_load`, checked equal, and verified "
      "(`shs_checkpoint_verify` without and with the key). \"CPU ratio\" divides "
      "the best process CPU times (user + system) instead: the steadier number on a shared "
      "machine.")
    w("")
    w("| | what | encrypted | unencrypted (same run) | ratio | CPU ratio | target | status |")
    w("|---|---|---|---|---|---|---|---|")
    r = E("enc_save_ratio")
    w(f"| a | save, fsync=1 (the default) | {gbs(E('enc_save'))} | {gbs(E('plain_save'))} | "
      f"{fr(r)} (medians: {fr(E('enc_save_median_ratio'))}) | {fr(E('enc_save_cpu_ratio'))} "
      f"| ≥ 0.80 | {status(r, 0.8)} |")
    w(f"| b | save, fsync=0 (page cache: the CPU cost shows most) | "
      f"{gbs(E('enc_save_nofsync'))} | {gbs(E('plain_save_nofsync'))} | "
      f"{fr(E('enc_save_nofsync_ratio'))} | {fr(E('enc_save_nofsync_cpu_ratio'))} | — | |")
    w(f"| c | load, warm cache | {gbs(E('enc_load'))} | {gbs(E('plain_load'))} | "
      f"{fr(E('enc_load_ratio'))} | {fr(E('enc_load_cpu_ratio'))} | — | |")
    w(f"| d | verify, warm cache (encrypted: with the key, on "
      f"{fr(E('enc_verify_threads'))} cores busy) | {gbs(E('enc_verify'))} | "
      f"{gbs(E('plain_verify'))} | {fr(E('enc_verify_ratio'))} | | — | |")
    w(f"| | peak RSS of the process (two managers, the state, a 4 MiB ring per file written) | "
      f"{fr(E('peak_rss'))} MiB | | | | | |")
    w("")


def powerloss_log(log, rc, binary):
    """Turn test_powerloss's output (under /usr/bin/time -v) into "@@" lines."""
    def put(key, value):
        print("@@ " + json.dumps({"mode": "powerloss", "key": key, "value": value,
                                  "unit": "", "label": ""}))
    put("binary", binary)
    put("exit", int(rc))
    n, result, wall, rss = 0, "no cmocka summary", "?", 0
    with open(log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("powerloss:"):
                put(f"line_{n:03d}", line)
                n += 1
            elif "PASSED" in line or "FAILED" in line:
                result = line.strip()
            elif "Elapsed (wall clock)" in line:
                wall = line.rsplit(" ", 1)[-1]
            elif "Maximum resident set size" in line:
                rss = int(line.rsplit(" ", 1)[-1])
            else:
                continue
            print(line, file=sys.stderr)
    put("result", result)
    put("wall", wall)
    put("maxrss_kib", rss)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "machine":
        machine(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "start")
    elif len(sys.argv) >= 4 and sys.argv[1] == "powerloss":
        powerloss_log(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "")
    elif len(sys.argv) >= 3 and sys.argv[1] == "render":
        render(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "bench/run.sh")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
