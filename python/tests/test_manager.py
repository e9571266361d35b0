"""shardsafe.CheckpointManager: save, resume in place, retention, async,
errors -- a single process over the library's shs_manager."""

import os

import numpy as np
import pytest
import torch

import shardsafe
from shardsafe import CheckpointManager, open_checkpoint


def state(seed=0):
    rng = np.random.default_rng(seed)
    return ({"model.w": rng.standard_normal((16, 8)).astype(np.float32),
             "model.b": rng.standard_normal(8).astype(np.float32)},
            {"optimizer.exp_avg.model.w": rng.standard_normal((16, 8)).astype(np.float32)})


def train(model, opt, step):
    for t in list(model.values()) + list(opt.values()):
        t += np.float32(step) * 0.01


@pytest.mark.parametrize("async_save", [False, True])
def test_save_then_resume_in_place(tmp_path, async_save):
    save = tmp_path / "ckpt"
    cfg = {"save_path": str(save), "save_interleaved_steps": 5, "save_max": 2,
           "async_save": async_save}
    model, opt = state()
    with CheckpointManager(model, opt, config=cfg) as m:
        progress, res = m.load({"global_batch_size": 4})
        assert not res["loaded"] and res["source"] == "none"
        saved = []
        while progress["global_step"] < 12:
            train(model, opt, progress["global_step"])
            progress["global_step"] += 1
            progress["consumed_samples"] = progress["global_step"] * 4
            m.set_blob("rng", progress["global_step"].to_bytes(8, "little"))
            if m.step(progress):
                saved.append(progress["global_step"])
        m.finish(progress)
        assert saved == [5, 10]
        assert m.last_save()["step"] == 12
    # save_max 2: steps 10 and 12 kept
    assert sorted(os.listdir(save)) == [".shardsafe.lock", "iteration_00000010",
                                        "iteration_00000012", "latest_checkpointed_iteration.txt"]
    with open_checkpoint(save) as c:
        assert c.step == 12
        assert np.array_equal(c.get_tensor("model.w"), model["model.w"])
    # a new process resumes into fresh memory, in place
    model2, opt2 = state(seed=1)
    ptr = model2["model.w"].ctypes.data
    with CheckpointManager(model2, opt2, config=cfg) as m:
        progress, res = m.load({"global_batch_size": 4})
        assert res["loaded"] and res["source"] == "save_path" and res["step"] == 12
        assert progress["global_step"] == 12 and progress["consumed_samples"] == 48
        assert m.get_blob("rng") == (12).to_bytes(8, "little")
    assert model2["model.w"].ctypes.data == ptr
    for k in model:
        assert np.array_equal(model2[k], model[k])
    assert np.array_equal(opt2["optimizer.exp_avg.model.w"], opt["optimizer.exp_avg.model.w"])


def test_torch_tensors_and_no_load_optim(tmp_path):
    torch = pytest.importorskip("torch")
    save = tmp_path / "ckpt"
    w = torch.randn(4, 4, dtype=torch.bfloat16)
    master = w.float()
    with CheckpointManager({"w": w}, {"master.w": master}, config={"save_path": str(save)},
                           master_of={"master.w": "w"}) as m:
        m.save({"global_step": 3})
        m.wait()
    w2, master2 = torch.zeros(4, 4, dtype=torch.bfloat16), torch.zeros(4, 4)
    cfg = {"save_path": str(tmp_path / "other"), "load_path": str(save), "no_load_optim": True}
    with CheckpointManager({"w": w2}, {"master.w": master2}, config=cfg,
                           master_of={"master.w": "w"}) as m:
        _, res = m.load()
        assert res["loaded"] and res["source"] == "load_path" and not res["optimizer_loaded"]
    assert torch.equal(w2, w)
    # no_load_optim refreshes the fp32 master copy from the loaded weights
    assert torch.equal(master2, w.float())


def test_config_errors_and_bad_tensors(tmp_path):
    model, opt = state()
    with pytest.raises(shardsafe.InvalidArgumentError, match="save_max") as ei:
        CheckpointManager(model, config={"save_path": str(tmp_path), "save_mx": 3})
    assert ei.value.code == "SHS_ECONFIG"
    with pytest.raises(shardsafe.InvalidArgumentError):
        CheckpointManager(model, config={"save_interleaved_steps": "often"})
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(shardsafe.InvalidArgumentError, match="read-only"):
        CheckpointManager({"w": ro}, config={"save_path": str(tmp_path)})
    with pytest.raises(shardsafe.InvalidArgumentError, match="contiguous"):
        CheckpointManager({"w": np.zeros((4, 4), np.float32).T}, config={"save_path": str(tmp_path)})
    with pytest.raises(shardsafe.InvalidArgumentError, match="unknown keys"):
        with CheckpointManager(model, config={"save_path": str(tmp_path / "a")}) as m:
            m.step({"global_stp": 1})


def test_yaml_and_lock_and_mismatch(tmp_path):
    save = tmp_path / "ckpt"
    y = tmp_path / "train.yaml"
    y.write_text(f"checkpoint:\n  save_path: \"{save}\"\n  save_interleaved_steps: 2\n")
    model, opt = state()
    m = CheckpointManager(model, opt, yaml=str(y))
    # one writer per save path: a second manager is refused
    with pytest.raises(shardsafe.ShardsafeIOError) as ei:
        CheckpointManager(state()[0], yaml=str(y))
    assert ei.value.code == "SHS_ELOCKED"
    assert m.step({"global_step": 2}) is True
    m.close()
    with pytest.raises(shardsafe.InvalidArgumentError, match="closed"):
        m.step({"global_step": 3})
    # a state that does not match the checkpoint: MismatchError naming it
    small = {"model.w": np.zeros((2, 2), np.float32), "model.b": np.zeros(8, np.float32)}
    with CheckpointManager(small, opt, yaml=str(y)) as m2:
        with pytest.raises(shardsafe.MismatchError, match="model.w"):
            m2.load()


class _FakeShardedTensor:
    """torch.distributed._shard's ShardedTensor interface (Debian's torch
    1.13 cannot import the module under Python 3.11): local_shards() and
    metadata().size."""

    class _Md:
        def __init__(self, offsets):
            self.shard_offsets = list(offsets)

    class _Local:
        def __init__(self, tensor, offsets):
            self.tensor = tensor
            self.metadata = _FakeShardedTensor._Md(offsets)

    class _Global:
        def __init__(self, size):
            self.size = torch.Size(size)

    def __init__(self, size, locals_):
        self._size, self._locals = size, locals_

    def local_shards(self):
        return [self._Local(t, off) for t, off in self._locals]

    def metadata(self):
        return self._Global(self._size)


def test_sharded_tensor_is_taken_as_a_shard(tmp_path):
    rows = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sh = shardsafe.Shard.from_sharded_tensor("w", _FakeShardedTensor((6, 4), [(rows, (3, 0))]))
    assert sh.global_shape == (6, 4) and sh.offsets == (3, 0) and sh.tensor is rows
    # one process holding the whole tensor as its one local shard: saved
    # under the global shape, read back equal
    whole = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    m = CheckpointManager({"w": _FakeShardedTensor((6, 4), [(whole, (0, 0))])},
                          config={"save_path": str(tmp_path)})
    with m:
        m.save({"global_step": 1})
    with open_checkpoint(str(tmp_path)) as c:
        assert c.tensor_info("w")["shape"] == (6, 4)
        assert np.array_equal(c.get_tensor("w"), whole.numpy())
    two = _FakeShardedTensor((6, 4), [(rows, (0, 0)), (rows.clone(), (3, 0))])
    with pytest.raises(shardsafe.InvalidArgumentError, match="holds 2 local shards"):
        CheckpointManager({"w": two}, config={"save_path": str(tmp_path / "x")})
    with pytest.raises(shardsafe.InvalidArgumentError, match="does not fit its global shape"):
        CheckpointManager({"w": _FakeShardedTensor((4, 4), [(rows, (3, 0))])},
                          config={"save_path": str(tmp_path / "y")})
