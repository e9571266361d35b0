"""shardsafe.titan: seed 003's torchtitan configurations
(tests/fixtures/seeds/003_*.toml, its CLI examples) read as torchtitan
reads them and run with a CheckpointManager: where it saves, what it
loads, torchtitan's defaults, enable = false, load_step errors."""

import os
import shutil

import numpy as np
import pytest

import shardsafe
from shardsafe import CheckpointManager, InvalidArgumentError, NotFoundError, titan
from conftest import SOURCE_DIR

FIX = os.path.join(SOURCE_DIR, "tests", "fixtures", "seeds")


def fixture(name):
    return os.path.join(FIX, name)


def test_torchtitan_defaults():
    cfg = titan.from_torchtitan(None)
    assert cfg == {"enable": False, "save_path": "./torchtitan/outputs/checkpoint",
                   "save_interleaved_steps": 500, "last_save_model_only": True,
                   "export_dtype": "float32", "keep_latest_k": 10}


EXPECTED = {
    "003_save_dcp.toml": {"enable": True, "save_path": "./outputs/dsv32_4layers/checkpoint",
                          "save_interleaved_steps": 100},
    "003_registry.toml": {"enable": True, "save_path": "./torchtitan/outputs/checkpoint",
                          "save_interleaved_steps": 100, "keep_latest_k": 5,
                          "async_mode": "disabled"},
    "003_last_full.toml": {"save_interleaved_steps": 100, "last_save_model_only": False},
    "003_export_bf16.toml": {"save_interleaved_steps": 500, "last_save_model_only": True,
                             "export_dtype": "bfloat16"},
    "003_load_step.toml": {"save_path": "./outputs/dsv32_4layers/checkpoint", "load_step": 500},
    "003_initial_full.toml": {
        "save_path": "./outputs/dsv32_new_job/checkpoint",
        "initial_load_path": "./outputs/dsv32_4layers/checkpoint/step-500",
        "initial_load_model_only": False},
    "003_initial_exclude.toml": {
        "initial_load_path": "./outputs/dsv32_4layers/checkpoint/step-500",
        "exclude_from_loading": ["optimizer", "lr_scheduler", "dataloader"]},
    "003_hf.toml": {"initial_load_in_hf": True, "initial_load_path": "./checkpoint/DeepSeek-V3.2"},
    "003_hf_assets.toml": {"initial_load_in_hf": True,
                           "hf_assets_path": "./checkpoint/DeepSeek-V3.2"},
    "003_hf_export.toml": {"save_path": "./outputs/dsv32_hf_export/checkpoint",
                           "last_save_in_hf": True, "export_dtype": "bfloat16"},
    "003_seed.toml": {"create_seed_checkpoint": True},
    "003_disabled.toml": {"enable": False, "initial_load_in_hf": True},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_maps(name):
    cfg = titan.load_toml(fixture(name))
    for k, v in EXPECTED[name].items():
        assert cfg[k] == v, (k, cfg)
    # every fixture makes a manager (the names are all known)
    CheckpointManager({"model.w": np.zeros(4, np.float32)}, config=dict(cfg, enable=False))


def test_every_003_fixture_is_covered():
    assert sorted(f for f in os.listdir(FIX) if f.startswith("003_")) == sorted(EXPECTED)


# the seed's command lines, as torchtitan (tyro) takes them
CLI = [
    (["--dump_folder", "./outputs/dsv32_4layers", "--checkpoint.enable",
      "--checkpoint.folder", "checkpoint", "--checkpoint.interval", "100"],
     titan.load_toml(fixture("003_save_dcp.toml"))),
    (["--dump_folder", "./outputs/dsv32_4layers", "--checkpoint.enable",
      "--checkpoint.load_step", "500"], titan.load_toml(fixture("003_load_step.toml"))),
    (["--checkpoint.enable", "--checkpoint.initial_load_path",
      "./outputs/dsv32_4layers/checkpoint/step-500", "--checkpoint.exclude_from_loading",
      "optimizer,lr_scheduler,dataloader", "--dump_folder", "./outputs/dsv32_new_job"],
     titan.load_toml(fixture("003_initial_exclude.toml"))),
    (["--checkpoint.enable", "--checkpoint.initial_load_in_hf",
      "--hf_assets_path", "./checkpoint/DeepSeek-V3.2"],
     titan.load_toml(fixture("003_hf_assets.toml"))),
    (["--dump_folder", "./outputs/dsv32_hf_export", "--checkpoint.enable",
      "--checkpoint.interval", "500", "--checkpoint.last_save_in_hf",
      "--checkpoint.export_dtype", "bfloat16"], titan.load_toml(fixture("003_hf_export.toml"))),
    (["--checkpoint.enable", "--checkpoint.create_seed_checkpoint",
      "--parallelism.data_parallel_replicate_degree", "1"],
     titan.load_toml(fixture("003_seed.toml"))),
]


@pytest.mark.parametrize("args,want", CLI)
def test_seed_command_lines(tmp_path, args, want):
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert titan.load_toml(empty, args) == want


def test_cli_booleans_and_overrides(tmp_path):
    t = tmp_path / "j.toml"
    t.write_text('[checkpoint]\nenable = true\nload_only = true\nfolder = "ck"\n'
                 '[job]\ndump_folder = "/d"\n')
    cfg = titan.load_toml(t, ["--checkpoint.no-load-only", "--checkpoint.folder=other",
                              "--job.dump_folder", "/e"])
    assert cfg["load_only"] is False and cfg["save_path"] == "/e/other"
    assert titan.load_toml(t, ["--checkpoint.no_enable"])["enable"] is False
    with pytest.raises(InvalidArgumentError, match="takes no value"):
        titan.load_toml(t, ["--checkpoint.no-load-only=true"])
    with pytest.raises(InvalidArgumentError, match="needs a value"):
        titan.load_toml(t, ["--checkpoint.interval"])
    # an absolute folder is used as it is (os.path.join)
    assert titan.from_torchtitan({"folder": "/abs"}, dump_folder="/d")["save_path"] == "/abs"
    # torchtitan's older names
    old = titan.from_torchtitan({"enable_checkpoint": True,
                                 "exclude_from_loading": ["data_loader", "lr_scheduler"]})
    assert old["enable"] is True and old["exclude_from_loading"] == ["dataloader", "lr_scheduler"]


def test_refusals(tmp_path):
    with pytest.raises(InvalidArgumentError, match="initial_load_in_hf_quantized"):
        titan.from_torchtitan({"initial_load_in_hf_quantized": True})
    with pytest.raises(InvalidArgumentError, match="older name"):
        titan.from_torchtitan({"enable": True, "enable_checkpoint": True})
    with pytest.raises(InvalidArgumentError, match="checkpoint.interval: expected an integer"):
        titan.from_torchtitan({"interval": "often"})
    with pytest.raises(InvalidArgumentError, match="checkpoint.interval: expected a positive"):
        titan.from_torchtitan({"interval": 0})
    with pytest.raises(InvalidArgumentError, match="checkpoint.enable: expected a boolean"):
        titan.from_torchtitan({"enable": "sometimes"})
    bad = tmp_path / "bad.toml"
    bad.write_text("[checkpoint\nenable = true\n")
    with pytest.raises(InvalidArgumentError, match="not valid TOML"):
        titan.load_toml(bad)
    both = tmp_path / "both.toml"
    both.write_text('dump_folder = "/a"\n[job]\ndump_folder = "/b"\n')
    with pytest.raises(InvalidArgumentError, match="both at the top level and in"):
        titan.load_toml(both)
    # a key torchtitan does not have is a shardsafe field: checked, with
    # "did you mean", when the manager is created
    typo = titan.from_torchtitan({"keep_lastest_k": 2})
    with pytest.raises(shardsafe.ShardsafeError, match="did you mean 'keep_latest_k'"):
        CheckpointManager({"model.w": np.zeros(4, np.float32)}, config=typo)
    # shardsafe's own fields ride along
    assert titan.from_torchtitan({"incremental": True})["incremental"] is True


# ---- running them ----

def state():
    return ({"model.w": np.zeros((8, 4), np.float32)},
            {"optimizer.exp_avg.model.w": np.zeros((8, 4), np.float32)})


def run(cfg, steps, model=None, opt=None):
    """Train to `steps` with the manager from cfg; returns (result of the
    load, final progress, model)."""
    if model is None:
        model, opt = state()
    with CheckpointManager(model, opt, config=cfg) as m:
        progress, res = m.load({"global_batch_size": 4})
        while progress["global_step"] < steps:
            progress["global_step"] += 1
            model["model.w"] += 1
            opt["optimizer.exp_avg.model.w"] += 2
            m.step(progress)
        m.finish(progress)
    return res, progress, model


def test_run_the_seed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = "outputs/dsv32_4layers/checkpoint"
    # DCP-style periodic saves into {dump_folder}/{folder}; the last save
    # (torchtitan's default last_save_model_only) holds weights only
    res, p, _ = run(titan.load_toml(fixture("003_save_dcp.toml")), 250)
    assert not res["loaded"]
    assert sorted(d for d in os.listdir(job) if d.startswith("iteration")) == [
        "iteration_00000100", "iteration_00000200", "iteration_00000250"]
    with shardsafe.open_checkpoint(os.path.join(job, "iteration_00000250")) as c:
        assert not any(k.startswith("optimizer.") for k in c.keys())
    # a restart resumes from the newest full step, not the weights-only one
    res, p, model = run(titan.load_toml(fixture("003_save_dcp.toml")), 500)
    assert res["source"] == "save_path" and res["step"] == 200
    assert float(model["model.w"][0, 0]) == 500.0
    # load_step: that step; a missing one is an error, never a fresh start
    res, p, model = run(titan.load_toml(fixture("003_load_step.toml"), ["--checkpoint.load-only"]),
                        500)
    assert res["step"] == 500 and p["global_step"] == 500
    with pytest.raises(NotFoundError, match="load_step 700"):
        run(titan.load_toml(fixture("003_load_step.toml"), ["--checkpoint.load_step", "700"]), 1)
    with pytest.raises(NotFoundError, match="load_step 500: save_path"):
        run(titan.load_toml(fixture("003_load_step.toml"), ["--dump_folder", "elsewhere"]), 1)
    assert not os.path.exists("elsewhere/checkpoint/iteration_00000001")
    # initial_load_path: another job's step-500, full state or with exclusions
    shutil.copytree(os.path.join(job, "iteration_00000500"), os.path.join(job, "step-500"))
    res, p, model = run(titan.load_toml(fixture("003_initial_full.toml")), 500)
    assert res["source"] == "initial_load_path" and res["step"] == 500
    assert p["global_step"] == 500 and res["optimizer_loaded"]
    res, p, model = run(titan.load_toml(fixture("003_initial_exclude.toml"),
                                        ["--dump_folder", "./outputs/third"]), 3)
    assert res["source"] == "initial_load_path" and not res["optimizer_loaded"]
    assert p["global_step"] == 3 and float(model["model.w"][0, 0]) == 503.0
    # enable = false: nothing loaded (even with a checkpoint and an
    # initial_load_path), nothing saved, no folder made
    cfg = titan.load_toml(fixture("003_disabled.toml"), ["--dump_folder", "./outputs/dsv32_4layers"])
    res, p, model = run(cfg, 600)
    assert not res["loaded"] and "enable: false" in res["message"]
    assert float(model["model.w"][0, 0]) == 600.0
    assert not os.path.exists(os.path.join(job, "iteration_00000600"))


def test_run_hf_seed_and_export(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from shardsafe.numpy import save_file
    os.makedirs("checkpoint/DeepSeek-V3.2")
    save_file({"model.w": np.full((8, 4), 7, np.float32)},
              "checkpoint/DeepSeek-V3.2/model.safetensors")
    for name in ("003_hf.toml", "003_hf_assets.toml"):
        res, p, model = run(titan.load_toml(fixture(name), ["--dump_folder", name]), 0)
        assert res["loaded"] and res["source"] == "initial_load_path", name
        assert float(model["model.w"][0, 0]) == 7.0
    # the seed checkpoint: nothing loaded, the initialised model saved as step 0
    model, opt = state()
    with CheckpointManager(model, opt, config=titan.load_toml(fixture("003_seed.toml"))) as m:
        progress, res = m.load({})
        assert res["source"] == "seed"
        m.save(progress, model_only=True)
    assert os.path.isdir("torchtitan/outputs/checkpoint/iteration_00000000")
    # the final weights exported in the Hugging Face layout, as bfloat16
    run(titan.load_toml(fixture("003_hf_export.toml")), 3)
    out = "outputs/dsv32_hf_export/checkpoint/hf-iteration_00000003/model.safetensors"
    with shardsafe.safe_open(out, "np") as f:
        assert f.get_slice("model.w").get_dtype() == "BF16"
