#!/usr/bin/python3
"""Sharded save and resharding load on gloo ranks: shardsafe vs PyTorch
1.13's distributed checkpoint prototype.

    /usr/bin/python3 bench/bench_py_dist.py [--size-mib N] [--reps N] [--save-ranks 4]
                                            [--load-ranks 3] [DIR]

Needs the binding on PYTHONPATH (PYTHONPATH=build/python after
scripts/build.sh build) and Debian's torch.  The ranks are processes
started by this script (torch.distributed, backend gloo, CPU; 127.0.0.1).

State: 8 F32 tensors [rows, 1024], --size-mib in all (1 GiB: 32,768 rows
each), every tensor split by rows over the ranks (rank r holds rows
[r * rows / n, (r + 1) * rows / n), the first ranks one more row when it
does not divide).  Values are a function of (tensor, row, column), so every
load is checked against them (not timed).

  save  --save-ranks ranks: shardsafe.CheckpointManager with a
        shardsafe.Shard per tensor and shardsafe.dist.TorchComm (fsync=1)
        vs torch.distributed._shard.checkpoint.save_state_dict of the same
        tensors as ShardedTensors (init_from_local_shards) with
        FileSystemWriter(single_file_per_rank=True, sync_files=True: its
        fsync) (target >= 2x).  Each save into an empty directory after
        `sync`, untimed.
  load  --load-ranks ranks (4 -> 3: every rank's rows straddle saved
        chunks) load the last checkpoint of each into their new shards,
        in place: CheckpointManager.load (checksums checked) vs
        load_state_dict with FileSystemReader into ShardedTensors of the
        new layout (target >= 1x); warm page cache (one untimed load of
        each first).

Why ShardedTensor on the torch side: torch 1.13's prototype has no way
to say that a plain tensor is one rank's part of a larger one; its
default planner treats plain tensors as replicated and writes them from
the coordinator rank only, whole (create_default_local_save_plan).
ShardedTensors carry the global shape and each shard's offsets, and its
loader reshards them (a 4 -> 3 row split here).

Times: every rank waits at a barrier, times its call, waits at a barrier
again; the row's time is the largest over the ranks (all_reduce MAX).
Best of --reps, the two libraries interleaved rep after rep, after one
untimed warm-up rep of each.  Peak RSS: VmHWM, the largest over the ranks.
With more ranks than cores the ranks share the cores, for both libraries
alike.

torch 1.13 on Python 3.11: torch.distributed._shard does not import
(a dataclass field defaults to a mutable dataclass instance, which Python
3.11 refuses: "mutable default ... use default_factory").  The bench
imports it with dataclasses' check relaxed for that import only (the
default becomes a default_factory returning a copy; see import_dcp()).
"""
import copy
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time

N_TENSORS = 8
COLS = 1024


def import_dcp():
    """torch.distributed._shard.checkpoint and sharded_tensor, importable on
    Python 3.11 (see the module docstring)."""
    orig = dataclasses._get_field

    def get_field(cls, a_name, a_type, *rest):
        default = cls.__dict__.get(a_name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            d = default.default
            if (d is not dataclasses.MISSING and dataclasses.is_dataclass(d)
                    and not isinstance(d, type) and type(d).__hash__ is None):
                default.default = dataclasses.MISSING
                default.default_factory = lambda d=d: copy.deepcopy(d)
        return orig(cls, a_name, a_type, *rest)

    dataclasses._get_field = get_field
    try:
        import torch.distributed._shard.checkpoint as dcp
        import torch.distributed._shard.sharded_tensor as sht
        from torch.distributed._shard.metadata import ShardMetadata
    finally:
        dataclasses._get_field = orig
    return dcp, sht, ShardMetadata


def peak_rss_mib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def rows_of(rank, n, total):
    base, extra = divmod(total, n)
    start = rank * base + min(rank, extra)
    return start, base + (1 if rank < extra else 0)


def values(torch, k, r0, nrows):
    """The reference values of tensor k, rows [r0, r0 + nrows)."""
    i = torch.arange(r0 * COLS, (r0 + nrows) * COLS, dtype=torch.int64)
    return ((i * 2654435761 + k * 97) % 65521).to(torch.float32).reshape(nrows, COLS)


def rank_main(args):
    import torch
    import torch.distributed as dist
    import shardsafe
    from shardsafe.dist import Shard, TorchComm
    dcp, sht, ShardMetadata = import_dcp()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total_rows = args.size * 2**20 // (4 * COLS) // N_TENSORS
    r0, nrows = rows_of(rank, world, total_rows)
    names = [f"layers.{k}.weight" for k in range(N_TENSORS)]
    if args.op == "save":
        local = [values(torch, k, r0, nrows) for k in range(N_TENSORS)]
    else:
        local = [torch.full((nrows, COLS), -1.0) for _ in range(N_TENSORS)]
    gshape = (total_rows, COLS)
    shs_state = {n: Shard(t, gshape, (r0, 0)) for n, t in zip(names, local)}
    md = ShardMetadata(shard_offsets=[r0, 0], shard_sizes=[nrows, COLS],
                       placement=f"rank:{rank}/cpu")
    dcp_state = {n: sht.init_from_local_shards([sht.Shard(tensor=t, metadata=md)], *gshape)
                 for n, t in zip(names, local)}
    shs_dir, dcp_dir = (os.path.join(args.dir, x) for x in ("shs_ckpt", "dcp_ckpt"))
    comm = TorchComm()
    cfg = {"save_path": shs_dir, "fsync": True, "save_max": 0,
           "save_interleaved_steps": 1000000, "async_save": False}
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = shardsafe.CheckpointManager(model=shs_state, config=cfg, comm=comm)
    nbytes = sum(t.numel() * 4 for t in local)
    step = [0]

    def fresh(path):
        if rank == 0:
            subprocess.run(["rm", "-rf", path], check=True)
            os.makedirs(path)
            os.sync()

    def check():
        for k, t in enumerate(local):
            if not torch.equal(t, values(torch, k, r0, nrows)):
                raise SystemExit(f"rank {rank}: tensor {k} loaded wrong values")
            t.fill_(-1.0)

    if args.op == "save":
        def shs_save():
            step[0] += 1
            m.save({"global_step": step[0]})

        raw_dir = os.path.join(args.dir, "raw")

        def raw_save():  # the physical baseline: this rank's bytes, one file, fsync
            with open(os.path.join(raw_dir, f"rank{rank}.bin"), "wb") as fh:
                for t in local:
                    fh.write(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
                fh.flush()
                os.fsync(fh.fileno())

        cases = {"raw": (lambda: fresh(raw_dir), raw_save),
                 "shs": (lambda: fresh(shs_dir), shs_save),
                 "torch": (lambda: fresh(dcp_dir), lambda: dcp.save_state_dict(
                     dcp_state, dcp.FileSystemWriter(dcp_dir, single_file_per_rank=True,
                                                     sync_files=True)))}
        after = None
    else:
        def shs_load():
            _, res = m.load()
            if not res["loaded"]:
                raise SystemExit(f"rank {rank}: shardsafe loaded nothing: {res}")

        src = [values(torch, k, r0, nrows) for k in range(N_TENSORS)]

        def memcpy():  # the physical baseline: this rank's bytes copied in place
            for t, x in zip(local, src):
                t.copy_(x)

        cases = {"raw": (lambda: None, memcpy),
                 "shs": (lambda: None, shs_load),
                 "torch": (lambda: None, lambda: dcp.load_state_dict(
                     dcp_state, dcp.FileSystemReader(dcp_dir)))}
        after = check
    times = {k: [] for k in cases}
    for rep in range(args.reps + 1):  # rep 0: warm-up, not counted
        for k, (setup, fn) in cases.items():
            setup()
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            dist.barrier()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if rep:
                times[k].append(float(t))
            if after:
                after()
                dist.barrier()
    m.close()
    rss = torch.tensor([peak_rss_mib()], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    tot = torch.tensor([nbytes], dtype=torch.int64)
    dist.all_reduce(tot)
    if rank == 0:
        du = {}
        for k, p in (("shs", shs_dir), ("torch", dcp_dir)):
            out = subprocess.run(["du", "-sb", p], capture_output=True, text=True).stdout
            du[k] = int(out.split()[0]) if out else 0
        print("@@ " + json.dumps({"op": args.op, "ranks": world, "nbytes": int(tot),
                                  "t_shs": times["shs"], "t_torch": times["torch"],
                                  "t_raw": times["raw"],
                                  "disk_bytes": du, "peak_rss_mib": float(rss),
                                  "loadavg": os.getloadavg()[0]}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(op, ranks, args, d):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(ranks), OMP_NUM_THREADS="1")
    procs = []
    for r in range(ranks):
        cmd = [sys.executable, os.path.abspath(__file__), "--rank-op", op, "--size-mib",
               str(args.size), "--reps", str(args.reps), d]
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    result, errs = None, []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=1800)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"bench_py_dist: {op}: rank {r} timed out")
        if p.returncode != 0:
            errs.append(f"rank {r} exit {p.returncode}:\n{err[-3000:]}")
        for line in out.splitlines():
            if line.startswith("@@ "):
                result = json.loads(line[3:])
    if errs or result is None:
        sys.exit(f"bench_py_dist: {op} failed:\n" + "\n".join(errs))
    print("  " + json.dumps(result), file=sys.stderr, flush=True)
    return result


def table(s, lo):
    import statistics
    med = statistics.median
    rows = ["| row | shardsafe (best; median) | torch 1.13 _shard.checkpoint (best; median) | ratio (torch time / shardsafe time; by median) | target | status | baseline, same ranks (best) | baseline time / shardsafe time; / torch time | on disk (shardsafe / torch) | peak RSS, max over ranks (MiB) | load avg |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for what, r, target, base in (
            (f"save, {s['ranks']} gloo ranks, fsync", s, 2.0, "each rank write(2) + fsync of its bytes"),
            (f"load {s['ranks']} -> {lo['ranks']} ranks (resharding), warm cache", lo, 1.0,
             "each rank memcpy of its bytes in place")):
        n = r["nbytes"]
        bs, bt = min(r["t_shs"]), min(r["t_torch"])
        ratio = bt / bs
        rows.append(
            f"| {what} | {bs:.3f} s = {n / bs / 1e9:.2f} GB/s; {med(r['t_shs']):.3f} s | "
            f"{bt:.3f} s = {n / bt / 1e9:.2f} GB/s; {med(r['t_torch']):.3f} s | {ratio:.2f}; "
            f"{med(r['t_torch']) / med(r['t_shs']):.2f} | >= {target:g} | "
            f"{'PASS' if ratio >= target else '**MISS**'} | "
            f"{base}: {min(r['t_raw']):.3f} s = {n / min(r['t_raw']) / 1e9:.2f} GB/s | "
            f"{min(r['t_raw']) / bs:.2f}; {min(r['t_raw']) / bt:.2f} | "
            f"{s['disk_bytes']['shs'] / 1e6:.0f} MB / {s['disk_bytes']['torch'] / 1e6:.0f} MB | "
            f"{r['peak_rss_mib']:.0f} | {r['loadavg']:.2f} |")
    return "\n".join(rows)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--size-mib", dest="size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--save-ranks", type=int, default=4)
    ap.add_argument("--load-ranks", type=int, default=3)
    ap.add_argument("--rank-op")
    args = ap.parse_args()
    if args.rank_op:
        args.op = args.rank_op
        rank_main(args)
        return
    import tempfile
    import shardsafe
    import torch
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="shardsafe-bench-pydist.", dir=args.dir) as d:
        print("bench_py_dist: save ...", file=sys.stderr, flush=True)
        s = launch("save", args.save_ranks, args, d)
        print("bench_py_dist: load ...", file=sys.stderr, flush=True)
        lo = launch("load", args.load_ranks, args, d)
    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse",
                             "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    md = (f"\n### Distributed, gloo ranks (bench/bench_py_dist.py)\n\n"
          f"Reproduce: `scripts/build.sh build && PYTHONPATH=build/python /usr/bin/python3 "
          f"bench/bench_py_dist.py --size-mib {args.size} --reps {args.reps}` "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
          f"shardsafe {shardsafe.__version__}, torch {torch.__version__}, load average "
          f"{' '.join(f'{x:.2f}' for x in load0)} at start, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at end, nproc {os.cpu_count()}). "
          f"{N_TENSORS} F32 tensors split by rows, {s['nbytes'] / 2**20:.0f} MiB in all; "
          f"best of {args.reps} after a warm-up rep, interleaved; time = the slowest rank "
          f"between barriers; every load checked value by value (untimed).\n\n"
          + table(s, lo) + "\n")
    print(md)


if __name__ == "__main__":
    main()
