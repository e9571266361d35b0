"""merge / reshard as Python calls, and MindSpore's unified_safetensors /
load_distributed_checkpoint (issue 15.4), over a checkpoint the
library's manager saves here."""

import json
import os

import numpy as np
import pytest

import mkst
import shardsafe
from shardsafe import CheckpointManager, open_checkpoint

NAMES = ["model.layers.1.w", "model.layers.10.w", "model.norm", "model.odd*[name]?"]


@pytest.fixture
def ckpt(tmp_path):
    """A save path (one step, 20) with model and optimizer tensors."""
    rng = np.random.default_rng(7)
    model = {n: rng.standard_normal((4, 6)).astype(np.float32) for n in NAMES}
    opt = {"optimizer.exp_avg." + n: rng.standard_normal((4, 6)).astype(np.float32)
           for n in NAMES[:2]}
    save = tmp_path / "ckpt"
    with CheckpointManager(model, opt, config={"save_path": str(save)}) as m:
        progress, _ = m.load({"global_batch_size": 1})
        progress["global_step"] = 20
        m.save(progress)
        m.wait()
    return save, model, opt


def hf_tensors(dst):
    """{name: array} of a merge output, read with the independent reader."""
    out = {}
    for f in sorted(os.listdir(dst)):
        if f.endswith(".safetensors"):
            _, _, data, meta = mkst.read(os.path.join(dst, f))
            assert meta == {"format": "pt"}
            for name, (dt, shape, raw) in data.items():
                out[name] = np.frombuffer(raw, {"F32": "<f4", "BF16": "<u2", "I32": "<i4"}[dt]).reshape(shape)
    return out


def test_merge_with_the_cli_options(ckpt, tmp_path):
    save, model, opt = ckpt
    dst = tmp_path / "hf"
    r = shardsafe.merge(save, dst)
    assert r["n_tensors"] == 4 and r["n_files"] == 1 and r["total_size"] == 4 * 96
    got = hf_tensors(dst)
    assert sorted(got) == sorted(NAMES)
    assert all(np.array_equal(got[n], model[n]) for n in NAMES)
    with pytest.raises(shardsafe.InvalidArgumentError):
        shardsafe.merge(save, dst)  # exists
    r = shardsafe.merge(save, dst, force=True, with_optimizer=True, max_shard_size="50B",
                        include=["model.layers.*", "optimizer.*"], exclude="*10*",
                        rename=[("model.", "m."), "layers=L"], dtype="bf16", fsync=True, jobs=2,
                        step=20)
    got = hf_tensors(dst)
    assert sorted(got) == ["m.L.1.w", "optimizer.exp_avg.m.L.1.w"]
    assert r["n_files"] == 2 and os.path.exists(dst / "model.safetensors.index.json")
    assert got["m.L.1.w"].dtype == np.uint16  # BF16 bits
    with pytest.raises(shardsafe.InvalidArgumentError, match="nope"):
        shardsafe.merge(save, tmp_path / "x", include="nope*")
    with pytest.raises(shardsafe.InvalidArgumentError, match="5XB"):
        shardsafe.merge(save, tmp_path / "x", max_shard_size="5XB")
    assert not os.path.exists(tmp_path / "x")


def test_merge_progress_callback_and_cancel(ckpt, tmp_path):
    save, _, _ = ckpt
    seen = []
    shardsafe.merge(save, tmp_path / "a", progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1] == 4 * 96
    with pytest.raises(shardsafe.InvalidArgumentError, match="cancel"):
        shardsafe.merge(save, tmp_path / "b", progress=lambda d, t: True)

    def boom(d, t):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        shardsafe.merge(save, tmp_path / "c", progress=boom)
    assert sorted(os.listdir(tmp_path)) == ["a", "ckpt"]  # nothing left behind


def test_merge_in_parts(ckpt, tmp_path):
    save, model, _ = ckpt
    dst = tmp_path / "hf"
    for i in range(2):
        shardsafe.merge(save, dst, max_shard_size=100, part=(i, 2))
    r = shardsafe.merge(save, dst, max_shard_size=100, finish_parts=2)
    assert r["n_files"] == 4
    got = hf_tensors(dst)
    assert all(np.array_equal(got[n], model[n]) for n in NAMES)
    with pytest.raises(shardsafe.InvalidArgumentError):
        shardsafe.merge(save, dst, part=(2, 2))


def test_choice_func_filters_and_renames_exactly(ckpt, tmp_path):
    """A Python callable: names with glob characters, one name inside
    another ('layers.1' in 'layers.10'), renames that are not prefixes."""
    save, model, _ = ckpt

    def choose(name):
        if name == "model.norm":
            return False
        if name == "model.layers.1.w":
            return "layers.1.weight"
        return name.replace("model.", "")

    dst = tmp_path / "hf"
    shardsafe.merge(save, dst, choice_func=choose)
    got = hf_tensors(dst)
    assert sorted(got) == ["layers.1.weight", "layers.10.w", "odd*[name]?"]
    assert np.array_equal(got["layers.10.w"], model["model.layers.10.w"])
    assert np.array_equal(got["odd*[name]?"], model["model.odd*[name]?"])
    shardsafe.merge(save, tmp_path / "one", choice_func=lambda n: n == "model.odd*[name]?")
    assert list(hf_tensors(tmp_path / "one")) == ["model.odd*[name]?"]
    for bad, msg in ((lambda n: 1, "must return a bool"), (lambda n: False, "kept none"),
                     (lambda n: "", "empty name")):
        with pytest.raises(shardsafe.InvalidArgumentError, match=msg):
            shardsafe.merge(save, tmp_path / "x", choice_func=bad)
    with pytest.raises(shardsafe.InvalidArgumentError, match="replaces include"):
        shardsafe.merge(save, tmp_path / "x", choice_func=choose, include="*")
    with pytest.raises(shardsafe.InvalidArgumentError, match="both be named 'same'"):
        shardsafe.merge(save, tmp_path / "x", choice_func=lambda n: "same")
    assert not os.path.exists(tmp_path / "x")


def test_rename_rules_are_exact_or_refused():
    from shardsafe.tools import rename_rules

    def apply(rules, n):
        for r in rules:
            f, t = r.split("=", 1)
            n = n.replace(f, t)
        return n

    names = ["a.1", "a.10", "b", "1", "xa.1y"]
    for mapping in ({"a.1": "x"}, {"a.1": "a.10"}, {"a.10": "a.1", "a.1": "a.10"},
                    {"1": "one"}, {"b": "a.1", "a.1": "b"}):
        rules = rename_rules(mapping, names)
        for n in names:
            assert apply(rules, n) == mapping.get(n, n), (mapping, rules, n)
    # a systematic rename stays one rule
    assert rename_rules({"model.a": "a", "model.b": "b"}, ["model.a", "model.b"]) == ["model.="]
    with pytest.raises(shardsafe.InvalidArgumentError, match="cannot be made exactly"):
        rename_rules({"a=b": "c"}, ["a=b"])


def test_reshard_and_saved_layout(ckpt, tmp_path):
    save, model, opt = ckpt
    layout = shardsafe.saved_layout(save)
    assert layout["world_size"] == 1 and set(layout["tensors"]) >= set(NAMES)
    dst = tmp_path / "iteration_00000020"
    r = shardsafe.reshard(save, dst, {"world_size": 2, "tensors": {"*": {"split_dim": 0}}})
    assert r["world_size"] == 2 and r["saved_world_size"] == 1 and r["step"] == 20
    assert r["n_tensors"] == 6
    with open_checkpoint(dst) as c:
        assert c.world_size == 2
        for n in NAMES:
            assert np.array_equal(c.get_tensor(n), model[n])
            assert c.tensor_info(n)["n_chunks"] == 2
    path = tmp_path / "layout.json"
    path.write_text(json.dumps({"world_size": 2, "tensors": {"*": {"replicated": True}}}))
    r = shardsafe.reshard(save, tmp_path / "rep", path, fsync=False, prefix="ck")
    assert r["world_size"] == 2
    with pytest.raises(shardsafe.InvalidArgumentError):
        shardsafe.reshard(save, dst)  # exists
    with pytest.raises(shardsafe.InvalidArgumentError, match="world_size"):
        shardsafe.reshard(save, tmp_path / "z", world_size=0)


def test_unified_safetensors(ckpt, tmp_path):
    save, model, opt = ckpt
    dst = tmp_path / "merged"
    with pytest.raises(NotImplementedError, match="file_suffix"):
        shardsafe.unified_safetensors(save, None, dst, file_suffix="1_1")
    r = shardsafe.unified_safetensors(save, None, dst, max_process_num=64,
                                      choice_func=lambda n: "exp_avg" not in n)
    assert r["n_tensors"] == 4 and sorted(hf_tensors(dst)) == sorted(NAMES)
    # again into the same folder (MindSpore overwrites), every tensor
    r = shardsafe.unified_safetensors(save, None, dst, merge_with_redundancy=False)
    assert r["n_tensors"] == 6  # optimizer tensors too, as MindSpore merges every parameter
    for i in (1, 2):
        shardsafe.unified_safetensors(save, None, tmp_path / "split", split_dst_file=(i, 2))
    shardsafe.merge(save, tmp_path / "split", with_optimizer=True, finish_parts=2)
    assert len(hf_tensors(tmp_path / "split")) == 6
    with pytest.raises(shardsafe.InvalidArgumentError, match="split_dst_file"):
        shardsafe.unified_safetensors(save, None, tmp_path / "s2", split_dst_file=(0, 2))


def _strategy_ranks(tmp_path):
    """A 2 x 2 (dp x tp) MindSpore strategy file (mkstrategy: written from
    the protobuf wire format) and rank_0..rank_3 folders holding each
    rank's slices as MindSpore saves them; returns (ranks, strategy, full)."""
    import mkstrategy as ms
    rng = np.random.default_rng(3)
    full = {"w": rng.standard_normal((8, 6)).astype(np.float32),
            "b": rng.standard_normal(6).astype(np.float32),
            "ids": np.arange(12, dtype=np.int32).reshape(3, 4)}
    params = [dict(name="w", dev=[2, 2], tmap=[0, -1]), dict(name="b", dev=[2, 2], tmap=[-1]),
              dict(name="ids", dev=[2, 2], tmap=[-1, 0])]
    strategy = tmp_path / "strategy.ckpt"
    ms.write(str(strategy), params)
    per_rank = {r: [] for r in range(4)}
    for p in params:
        for r, (off, size) in ms.slices(p, list(full[p["name"]].shape)).items():
            part = np.ascontiguousarray(ms.cut(full[p["name"]], off, size))
            per_rank[r].append(mkst.entry(p["name"], part))
    ranks = tmp_path / "ranks"
    for r, entries in per_rank.items():
        os.makedirs(ranks / f"rank_{r}")
        mkst.write(str(ranks / f"rank_{r}" / f"checkpoint_{r}-1_1.safetensors"), entries,
                   metadata={"format": "ms"})
    return ranks, strategy, full


def test_strategy_files(tmp_path):
    ranks, strategy, full = _strategy_ranks(tmp_path)
    # seed 004: unified_safetensors(src_dir, src_strategy_file, dst_dir)
    r = shardsafe.unified_safetensors(ranks, strategy, tmp_path / "merged")
    assert r["n_tensors"] == 3
    got = hf_tensors(tmp_path / "merged")
    assert sorted(got) == sorted(full)
    for n, a in full.items():
        assert np.array_equal(got[n], a), n
    # merge() with the file, the older grouping
    shardsafe.merge(ranks, tmp_path / "legacy", src_strategy_file=strategy, grouping="legacy")
    assert np.array_equal(hf_tensors(tmp_path / "legacy")["w"], full["w"])
    with pytest.raises(shardsafe.InvalidArgumentError, match="grouping"):
        shardsafe.merge(ranks, tmp_path / "g", src_strategy_file=strategy, grouping="newest")
    with pytest.raises(NotImplementedError, match="choice_func"):
        shardsafe.unified_safetensors(ranks, strategy, tmp_path / "c", choice_func=bool)
    with pytest.raises(shardsafe.InvalidArgumentError, match="choice_func with src_strategy_file"):
        shardsafe.merge(ranks, tmp_path / "c", src_strategy_file=strategy, choice_func=bool)
    # a file that is not a strategy: an error naming it, nothing written
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"\xff" * 16)
    with pytest.raises(shardsafe.ShardsafeError, match="bad.ckpt"):
        shardsafe.unified_safetensors(ranks, bad, tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
    # reshard to the strategy's layout: rank k holds the boxes it names
    r = shardsafe.reshard(tmp_path / "merged", tmp_path / "step", strategy_file=strategy,
                          fsync=False)
    assert r["world_size"] == 4
    with open_checkpoint(tmp_path / "step") as c:
        assert np.array_equal(c.get_tensor("w"), full["w"])
    r = shardsafe.reshard(tmp_path / "merged", tmp_path / "step2", strategy_file=strategy,
                          rank_list=[3, 2, 1, 0], fsync=False)
    assert r["world_size"] == 4
    with pytest.raises(shardsafe.InvalidArgumentError, match="not both"):
        shardsafe.reshard(tmp_path / "merged", tmp_path / "x", {"world_size": 1},
                          strategy_file=strategy)
    with pytest.raises(ValueError, match="rank_list"):
        shardsafe.reshard(tmp_path / "merged", tmp_path / "x", strategy_file=strategy,
                          rank_list=[-1, 0, 1, 2])
    with pytest.raises(shardsafe.InvalidArgumentError, match="rank_list applies to a strategy_file"):
        shardsafe.reshard(tmp_path / "merged", tmp_path / "x", rank_list=[0])
    assert not (tmp_path / "x").exists()


def test_load_distributed_checkpoint(ckpt, tmp_path):
    save, model, opt = ckpt
    # into numpy arrays in place, converted to their dtype
    net = {n: np.zeros((4, 6), np.float16) for n in NAMES[:2]}
    ptr = net[NAMES[0]].ctypes.data
    missing, unexpected = shardsafe.load_distributed_checkpoint(
        net, unified_safetensors_dir=save, choice_func=lambda n: not n.startswith("optimizer"))
    assert net[NAMES[0]].ctypes.data == ptr and missing == []
    assert sorted(unexpected) == sorted(NAMES[2:])
    assert np.array_equal(net[NAMES[1]], model[NAMES[1]].astype(np.float16))
    with pytest.raises(shardsafe.MismatchError, match="strict_load"):
        shardsafe.load_distributed_checkpoint(net, checkpoint_filenames=save, strict_load=True)
    # the tensors themselves
    d = shardsafe.load_distributed_checkpoint(checkpoint_filenames=save, return_param_dict=True,
                                              name_map={"model.norm": "norm"})
    assert sorted(d) == sorted([n for n in NAMES if n != "model.norm"] + ["norm"] + list(opt))
    assert np.array_equal(d["norm"], model["model.norm"])
    # a list of files that hold different tensors (a merge output)
    shardsafe.merge(save, tmp_path / "hf", max_shard_size=100)
    files = sorted(str(tmp_path / "hf" / f) for f in os.listdir(tmp_path / "hf")
                   if f.endswith(".safetensors"))
    d = shardsafe.load_distributed_checkpoint(checkpoint_filenames=files)
    assert sorted(d) == sorted(NAMES)
    with pytest.raises(shardsafe.MismatchError, match="in both"):
        shardsafe.load_distributed_checkpoint(checkpoint_filenames=files + files[:1])
    for kw, msg in (({"predict_strategy": "p.ckpt"}, "predict_strategy"),
                    ({"train_strategy_filename": "t.ckpt"}, "train_strategy_filename"),
                    ({"format": "ckpt"}, "ckpt"), ({"rank_id": 1}, "rank_id")):
        with pytest.raises(NotImplementedError, match=msg):
            shardsafe.load_distributed_checkpoint(net, checkpoint_filenames=save, **kw)


def test_load_distributed_checkpoint_into_a_torch_module(ckpt):
    torch = pytest.importorskip("torch")
    save, model, _ = ckpt

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(torch.zeros(4, 6, dtype=torch.bfloat16))
            self.w10 = torch.nn.Parameter(torch.zeros(4, 6))
            self.tied = self.w10  # a second name of the same parameter

    net = Net()
    names = {"model.layers.1.w": "w1", "model.layers.10.w": "w10"}
    missing, unexpected = shardsafe.load_distributed_checkpoint(
        net, checkpoint_filenames=save, name_map=names,
        choice_func=lambda n: n in names)
    assert missing == [] and unexpected == []  # "tied" is filled through w10
    assert torch.equal(net.w10.detach(), torch.from_numpy(model["model.layers.10.w"]))
    assert torch.equal(net.w1.detach(), torch.from_numpy(model["model.layers.1.w"]).bfloat16())
    with pytest.raises(shardsafe.MismatchError, match="shape"):
        bad = {"model.norm": torch.zeros(3)}
        shardsafe.load_distributed_checkpoint(bad, checkpoint_filenames=save)
