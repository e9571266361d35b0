"""One rank of a distributed test (test_dist.py launches N of these).

    dist_worker.py BACKEND SCENARIO SAVE_PATH
BACKEND: gloo (env RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or mpi
(under mpirun).  Prints "ok" on success; an exception exits non-zero
with its class and message on stderr (the test checks them).
"""
import datetime
import os
import sys

import numpy as np

import shardsafe
from shardsafe import CheckpointManager, Shard, open_checkpoint

ROWS, COLS = 8, 6


def make_comm(backend):
    if backend == "gloo":
        import torch.distributed as dist
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        return shardsafe.dist.TorchComm()
    return shardsafe.dist.MPIComm()


def rows_of(rank, size):
    """Rows of rank in an uneven block split of ROWS."""
    base, extra = divmod(ROWS, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def global_w(step):
    return (np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS) + 1000 * step)


def state(rank, size, step, lo=None, hi=None):
    """This rank's shards: w by rows, b replicated, the optimizer's m by rows."""
    if lo is None:
        lo, hi = rows_of(rank, size)
    w = np.ascontiguousarray(global_w(step)[lo:hi])
    m = -w
    b = np.full(COLS, step, dtype=np.float64)  # the same on every rank
    model = {"w": Shard(w, (ROWS, COLS), (lo, 0)), "b": b}
    optim = {"m.w": Shard(m, (ROWS, COLS), (lo, 0))}
    return model, optim


def cfg(path, **kw):
    c = {"save_path": path, "save_interleaved_steps": 1, "remove_redundancy": True}
    c.update(kw)
    return c


def scenario_save(comm, path):
    model, optim = state(comm.rank, comm.size, 3)
    with CheckpointManager(model, optim, config=cfg(path), comm=comm) as m:
        m.set_blob("rank", str(comm.rank).encode())
        m.save({"global_step": 3, "global_batch_size": 4})


def scenario_load(comm, path, balanced=False):
    model, optim = state(comm.rank, comm.size, 0)
    for t in (model["w"].tensor, optim["m.w"].tensor, model["b"]):
        t[...] = 0
    with CheckpointManager(model, optim, config=cfg(path, load_balanced=balanced),
                           comm=comm) as m:
        progress, res = m.load({"global_batch_size": 4})
        assert res["loaded"] and res["step"] == 3, res
        assert progress["global_step"] == 3, progress
        lo, hi = rows_of(comm.rank, comm.size)
        want = global_w(3)[lo:hi]
        assert np.array_equal(model["w"].tensor, want), (model["w"].tensor, want)
        assert np.array_equal(optim["m.w"].tensor, -want)
        assert np.array_equal(model["b"], np.full(COLS, 3.0))
        # saved on another number of ranks: the blobs are not restored
        assert res["saved_world_size"] == 4, res


def expect_error(what, fn):
    """Run fn, which must raise: print "<what>: <class>: <message>"."""
    try:
        fn()
    except shardsafe.ShardsafeError as e:
        print(f"{what}: {type(e).__name__}: {e}", flush=True)
        return
    raise AssertionError(f"{what}: no exception")


def scenario_bad(comm, path):
    """A shard that does not fit, then shards that overlap: every rank
    raises, none hangs, nothing is committed."""
    def misfit():
        model, optim = state(comm.rank, comm.size, 3)
        if comm.rank == 1:  # 4 rows at row 6 of 8
            model["w"] = Shard(model["w"].tensor, (ROWS, COLS), (6, 0))
        CheckpointManager(model, optim, config=cfg(path), comm=comm)

    def overlap():
        lo, hi = rows_of(comm.rank, comm.size)
        if comm.rank == 1:
            lo, hi = lo - 1, hi - 1  # overlaps rank 0's last row, leaves a gap
        model, optim = state(comm.rank, comm.size, 3, lo, hi)
        with CheckpointManager(model, optim, config=cfg(path), comm=comm) as m:
            m.save({"global_step": 3})

    def notjson():
        import torch
        from shardsafe.training import TorchCheckpointer
        net = torch.nn.Linear(2, 2)
        opt = torch.optim.AdamW(net.parameters())
        with TorchCheckpointer(net, opt, config=cfg(path + "/tc"), comm=comm) as ck:
            ck.save({"global_step": 1}, extra={"x": object() if comm.rank == 1 else 1})

    expect_error("misfit", misfit)
    expect_error("overlap", overlap)
    expect_error("notjson", notjson)
    assert not [d for d in os.listdir(path) if d.startswith("iteration_")]


def scenario_die(comm, path):
    """Rank 1 dies inside a collective of the save: the others raise."""
    calls = {"n": 0}
    if comm.rank == 1:
        real = comm.allgather

        def dying(data):
            calls["n"] += 1
            if calls["n"] == 3:  # _agree and the create took the first two
                os._exit(3)
            return real(data)
        comm.allgather = dying
    model, optim = state(comm.rank, comm.size, 3)
    with CheckpointManager(model, optim, config=cfg(path), comm=comm) as m:
        m.save({"global_step": 3})


def scenario_async(comm, path):
    """async_save on a channel of its own (comm.for_async()): the save runs
    in the background while the training loop keeps running collectives on
    its own group; then the committed step holds this step's values."""
    import warnings
    model, optim = state(comm.rank, comm.size, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "async_save is off"
        m = CheckpointManager(model, optim, config=cfg(path, async_save=True), comm=comm)
    with m:
        m.save({"global_step": 5, "global_batch_size": 4})
        for i in range(20):  # "training": collectives on the caller's own group
            got = comm.allgather(bytes([comm.rank, i % 256]))
            assert got == b"".join(bytes([r, i % 256]) for r in range(comm.size))
        m.wait()
    with open_checkpoint(path) as c:
        assert c.step == 5 and c.world_size == comm.size
        assert np.array_equal(c.get_tensor("w"), global_w(5))
        assert np.array_equal(c.get_tensor("m.w"), -global_w(5))


def scenario_read(path):
    with open_checkpoint(path) as c:
        assert c.step == 3 and c.world_size == 4
        assert np.array_equal(c.get_tensor("w"), global_w(3))
        assert np.array_equal(c.get_tensor("m.w"), -global_w(3))


def main():
    backend, scen, path = sys.argv[1:4]
    if scen == "read":
        scenario_read(path)
        print("ok")
        return
    comm = make_comm(backend)
    if scen == "load_balanced":
        scenario_load(comm, path, balanced=True)
    else:
        globals()["scenario_" + scen](comm, path)
    if backend == "gloo":
        # torch 1.13: a process group left to interpreter exit may abort
        # ("terminate called without an active exception")
        import torch.distributed as dist
        dist.destroy_process_group()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
