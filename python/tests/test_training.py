"""TorchCheckpointer in one process: what a state dict becomes in the
checkpoint, and what a fresh process gets back."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import shardsafe  # noqa: E402
from shardsafe import InvalidArgumentError, open_checkpoint  # noqa: E402
from shardsafe.training import TorchCheckpointer  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.unused = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("count", torch.zeros(1, dtype=torch.int64))


def make(seed=0):
    torch.manual_seed(seed)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    return net, opt, sched


def train(net, opt, sched, steps):
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        net.lin(torch.randn(5, 3)).pow(2).sum().backward()
        opt.step()
        sched.step()
        net.count += 1


def test_state_dict_roundtrip(tmp_path):
    net, opt, sched = make()
    cfg = {"save_path": str(tmp_path), "save_interleaved_steps": 2}
    with TorchCheckpointer(net, opt, sched, config=cfg) as ck:
        train(net, opt, sched, 2)
        assert ck.step({"global_step": 2}, extra={"epoch": 1, "index": 16})
    with open_checkpoint(tmp_path, framework="pt") as c:
        keys = set(c.keys())
        # optimizer state under the parameter names; AdamW's step is a 0-d tensor
        assert {"model.lin.weight", "model.lin.bias", "model.unused", "model.count",
                "optimizer.state.lin.weight.exp_avg", "optimizer.state.lin.weight.exp_avg_sq",
                "optimizer.state.lin.weight.step"} <= keys
        assert tuple(c.tensor_info("optimizer.state.lin.weight.step")["shape"]) == ()
        assert not [k for k in keys if k.startswith("optimizer.state.unused")]  # no gradient
    want_opt = opt.state_dict()
    want_model = {k: v.clone() for k, v in net.state_dict().items()}
    rng_after = torch.rand(3)

    net2, opt2, sched2 = make(seed=1)  # a fresh process: other weights, no optimizer state
    with TorchCheckpointer(net2, opt2, sched2, config=cfg) as ck2:
        progress, res = ck2.load({})
        assert res["loaded"] and progress["global_step"] == 2
        assert ck2.extra == {"epoch": 1, "index": 16}
    for k, v in want_model.items():
        assert torch.equal(net2.state_dict()[k], v), k
    got = opt2.state_dict()
    assert got["param_groups"][0]["lr"] == want_opt["param_groups"][0]["lr"]
    assert sorted(got["state"]) == sorted(want_opt["state"])  # unused: still no state
    for i, st in want_opt["state"].items():
        for k, v in st.items():
            assert torch.equal(got["state"][i][k], v), (i, k)
    assert sched2.state_dict()["last_epoch"] == 2
    assert torch.equal(torch.rand(3), rng_after)  # the torch RNG was restored


def test_resumed_training_is_identical(tmp_path):
    cfg = {"save_path": str(tmp_path), "save_interleaved_steps": 3}
    net, opt, sched = make()
    with TorchCheckpointer(net, opt, sched, config=cfg) as ck:
        train(net, opt, sched, 3)
        ck.step({"global_step": 3})
        train(net, opt, sched, 2)
    net2, opt2, sched2 = make(seed=5)
    with TorchCheckpointer(net2, opt2, sched2, config=cfg) as ck:
        ck.load({})
        train(net2, opt2, sched2, 2)
    for (k, a), b in zip(net.state_dict().items(), net2.state_dict().values()):
        assert torch.equal(a, b), k


def test_not_jsonable_is_refused(tmp_path):
    net, opt, sched = make()
    cfg = {"save_path": str(tmp_path), "save_interleaved_steps": 1}
    with TorchCheckpointer(net, opt, sched, config=cfg) as ck:
        train(net, opt, sched, 1)
        with pytest.raises(InvalidArgumentError, match=r"extra\.loader: a builtins\.object is "
                                                       r"neither a tensor nor JSON-able"):
            ck.step({"global_step": 1}, extra={"loader": object()})
        opt.param_groups[0]["hook"] = np.float32  # not JSON-able either
        with pytest.raises(InvalidArgumentError, match=r"optimizer\.param_groups\.hook"):
            ck.save({"global_step": 1})
    assert not [d for d in os.listdir(tmp_path) if d.startswith("iteration_")]


def test_foreign_optimizer_parameter():
    net, _, _ = make()
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))])
    with pytest.raises(InvalidArgumentError, match="not one of the model's"):
        TorchCheckpointer(net, opt, config={"save_path": "/nonexistent"})


def test_python_comm_turns_async_off(tmp_path):
    class OneRank(shardsafe.dist.PyComm):
        calls = 0

        def barrier(self):
            OneRank.calls += 1

        def broadcast(self, data, length, root):
            OneRank.calls += 1
            return data

        def allgather(self, data):
            OneRank.calls += 1
            return data

        def gatherv(self, data, lens, root):
            OneRank.calls += 1
            return data

    w = np.arange(6, dtype=np.float32)
    with pytest.warns(RuntimeWarning, match="async_save is off"):
        m = shardsafe.CheckpointManager({"w": shardsafe.Shard(w, (6,), (0,))},
                                        config={"save_path": str(tmp_path), "async_save": True},
                                        comm=OneRank())
    with m:
        m.save({"global_step": 1})
    assert OneRank.calls > 0
    with open_checkpoint(tmp_path) as c:
        assert np.array_equal(c.get_tensor("w"), w)


def test_python_comm_async_uses_its_own_channel(tmp_path):
    import threading
    import warnings

    class Chan(shardsafe.dist.PyComm):
        def __init__(self):
            self.calls, self.threads, self.child = 0, set(), None

        def _op(self):
            self.calls += 1
            self.threads.add(threading.get_ident())

        def barrier(self):
            self._op()

        def broadcast(self, data, length, root):
            self._op()
            return data

        def allgather(self, data):
            self._op()
            return data

        def gatherv(self, data, lens, root):
            self._op()
            return data

        def for_async(self):
            self.child = Chan()
            return self.child

    main = Chan()
    w = np.arange(6, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "async_save is off"
        m = shardsafe.CheckpointManager({"w": shardsafe.Shard(w, (6,), (0,))},
                                        config={"save_path": str(tmp_path), "async_save": True},
                                        comm=main)
    before = main.calls
    with m:
        m.save({"global_step": 1})
        m.wait()
    # after the create's agreement, nothing ran on the caller's channel;
    # the save's collectives ran on the async channel, from another thread
    assert main.calls == before and main.child is not None
    assert main.child.calls > 0
    assert main.child.threads - {threading.get_ident()}, "no collective ran in the background"
    with open_checkpoint(tmp_path) as c:
        assert np.array_equal(c.get_tensor("w"), w)


def test_python_comm_async_save_must_agree(tmp_path):
    """Rank 0 asks for async_save, the (simulated) rank 1 does not: every
    rank raises before anyone asks for a channel of its own."""
    class HalfAsync(shardsafe.dist.PyComm):
        rank, size = 0, 2
        asked = False

        def barrier(self):
            pass

        def broadcast(self, data, length, root):
            return data

        def allgather(self, data):
            if len(data) == 1:  # the async_save flags: rank 1 says no
                return data + bytes([0])
            return data * 2

        def gatherv(self, data, lens, root):
            return data

        def for_async(self):
            HalfAsync.asked = True
            return None

    w = np.arange(6, dtype=np.float32)
    with pytest.raises(shardsafe.InvalidArgumentError, match=r"async_save is on for ranks \[0\]"):
        shardsafe.CheckpointManager({"w": shardsafe.Shard(w, (6,), (0,))},
                                    config={"save_path": str(tmp_path), "async_save": True},
                                    comm=HalfAsync())
    assert not HalfAsync.asked
    assert not os.listdir(tmp_path)


def test_python_comm_error_is_reported(tmp_path):
    class Broken(shardsafe.dist.PyComm):
        def barrier(self):
            raise RuntimeError("link down")

        def broadcast(self, data, length, root):
            return data

        def allgather(self, data):
            return data

        def gatherv(self, data, lens, root):
            raise RuntimeError("link down")

    w = np.zeros(4, dtype=np.float32)
    with pytest.raises(shardsafe.ShardsafeError, match="communicator (barrier|gatherv) failed: "
                                                       "RuntimeError: link down"):
        with shardsafe.CheckpointManager({"w": w}, config={"save_path": str(tmp_path)},
                                         comm=Broken()) as m:
            m.save({"global_step": 1})
    assert not [d for d in os.listdir(tmp_path) if d.startswith("iteration_")]


def test_deferred_snapshot(tmp_path):
    """defer_snapshot: step() saves when due and returns before the copy;
    after fence() the parameters may change, the checkpoint holds them as
    they were at the step."""
    net, opt, sched = make()
    cfg = {"save_path": str(tmp_path), "save_interleaved_steps": 2, "async_save": True}
    with TorchCheckpointer(net, opt, sched, config=cfg, defer_snapshot=True) as ck:
        train(net, opt, sched, 1)
        assert not ck.step({"global_step": 1})  # not due: nothing saved
        train(net, opt, sched, 1)
        want = {k: v.clone() for k, v in net.state_dict().items()}
        assert ck.step({"global_step": 2})
        ck.fence()
        with torch.no_grad():
            for p in net.parameters():
                p.add_(1000.0)  # the optimizer step after the fence
        ck.wait()
        stats = ck.last_save()
        assert stats["step"] == 2
        # the copy-free snapshot where the kernel permits it, else the deferred copy
        assert stats["snapshot_mode"] in ("copy-free", "deferred")
        if stats["snapshot_mode"] == "deferred":
            assert stats["staging_bytes"] >= stats["state_bytes"]
    with open_checkpoint(tmp_path, framework="pt") as c:
        for k, v in want.items():
            assert torch.equal(c.get_tensor("model." + k), v), k
