"""Interoperability: files the binding writes are read by the C CLI
(`shardsafe verify/inspect`) and by an independent pure-Python reader
(mkst); files the C library writes (CLI convert, demo_write, the demo
trainer's checkpoints) and the reference layout are read by the binding;
open_checkpoint reads through the public checkpoint read API."""

import json
import os
import subprocess

import numpy as np
import pytest

import mkst
import shardsafe
import shardsafe.numpy as snp
from shardsafe import open_checkpoint, safe_open


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def sample():
    rng = np.random.default_rng(7)
    return {
        "model.w": rng.standard_normal((8, 5)).astype(np.float32),
        "model.b": rng.standard_normal(5).astype(np.float64),
        "ids": rng.integers(-100, 100, (3, 3)).astype(np.int32),
        "mask": np.array([True, False, True]),
        "h": rng.standard_normal((2, 3)).astype(np.float16),
        "step": np.array(12, np.int64),
        "empty": np.zeros((0, 4), np.uint8),
    }


def entries(t):
    """mkst entries (its entry() turns 0-d arrays into 1-d ones)."""
    return [(k, mkst.NP[v.dtype], list(v.shape), v.tobytes()) for k, v in t.items()]


def test_binding_files_are_byte_identical_to_the_reference_layout(tmp_path):
    t = sample()
    p = tmp_path / "b.safetensors"
    snp.save_file(t, p, metadata={"format": "np"})
    # independent reader: header JSON parsed with json, bytes checked
    n, hdr, out, md = mkst.read(p)
    assert md == {"format": "np"}
    assert list(hdr)[0] == "__metadata__"
    for k, v in t.items():
        dt, shape, data = out[k]
        assert shape == list(v.shape) and data == v.tobytes()
    assert (8 + n) % 8 == 0
    # and the whole file equals what the reference writer lays out
    ref = tmp_path / "ref.safetensors"
    mkst.write(ref, entries(t), metadata={"format": "np"})
    assert p.read_bytes() == ref.read_bytes()


def test_reference_written_files_are_read_by_the_binding(tmp_path):
    t = sample()
    p = tmp_path / "ref.safetensors"
    # unsorted data order: valid, and read by the offsets in the header
    mkst.write(p, entries(t), metadata={"x": "y"}, sort=False)
    with safe_open(p, "np") as f:
        assert f.keys() == sorted(t)
        assert f.metadata() == {"x": "y"}
        for k, v in t.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype and got.tobytes() == v.tobytes()


def test_cli_verifies_and_inspects_binding_files(tmp_path, cli):
    t = sample()
    p = tmp_path / "b.safetensors"
    snp.save_file(t, p)
    r = run(cli, "verify", str(p))
    assert r.returncode == 0, r.stderr
    r = run(cli, "inspect", "--json", str(p))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 2
    text = json.dumps(doc)
    for k, v in t.items():
        assert f'"{k}"' in text
    # a corrupted binding file: the CLI and the binding both refuse it
    data = bytearray(p.read_bytes())
    data[3] = 0x7F
    p.write_bytes(bytes(data))
    assert run(cli, "verify", str(p)).returncode != 0
    with pytest.raises(shardsafe.FormatError):
        safe_open(p, "np")


def test_c_converted_files_are_read_by_the_binding(tmp_path, cli):
    torch = pytest.importorskip("torch")
    import shardsafe.torch as st
    src = tmp_path / "f32.safetensors"
    a = torch.randn(16, 9, generator=torch.Generator().manual_seed(3))
    a[0, :4] = torch.tensor([0.0, -0.0, float("inf"), 1e-40])
    st.save_file({"a": a, "i": torch.arange(5)}, src)
    for dtype, tdt in (("bf16", torch.bfloat16), ("f16", torch.float16), ("f64", torch.float64)):
        out = tmp_path / f"{dtype}.safetensors"
        r = run(cli, "convert", str(src), str(out), "--dtype", dtype)
        assert r.returncode == 0, r.stderr
        got = st.load_file(out)
        assert got["a"].dtype == tdt
        # the C converter rounds to nearest even, as torch's .to() does
        assert torch.equal(got["a"].view(-1).view(torch.uint8), a.to(tdt).view(-1).view(torch.uint8))
        assert torch.equal(got["i"], torch.arange(5))


def test_demo_write_output_is_read_by_the_binding(tmp_path, build_tool):
    demo = build_tool("demo_write")
    p = tmp_path / "demo.safetensors"
    r = run(demo, str(p))
    assert r.returncode == 0, r.stderr
    _, _, ref, md = mkst.read(p)
    with safe_open(p, "np") as f:
        assert sorted(ref) == f.keys()
        assert f.metadata() == md
        for k, (dt, shape, data) in ref.items():
            assert f.get_slice(k).get_dtype() == dt
            got = f.get_tensor(k)
            assert list(got.shape) == shape and got.tobytes() == data


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A save path the C library's demo trainer wrote (steps 20 and 40)."""
    build = os.environ.get("SHS_BUILD_DIR")
    trainer = os.path.join(build, "trainer") if build else None
    if not trainer or not os.access(trainer, os.X_OK):
        pytest.skip("trainer not found (set SHS_BUILD_DIR; ctest sets it)")
    d = tmp_path_factory.mktemp("ckpt") / "save"
    r = run(trainer, "--steps", "40", "--save-interval", "20", "--log-every", "0",
            "--save-path", str(d))
    assert r.returncode == 0, r.stderr
    return d


def file_tensors(step_dir):
    """Every tensor of the step's data files, by the independent reader."""
    out = {}
    for name in os.listdir(step_dir):
        if name.endswith(".safetensors"):
            out.update(mkst.read(os.path.join(step_dir, name))[2])
    return out


def test_open_checkpoint_reads_a_c_written_checkpoint(trained):
    with open_checkpoint(trained) as c:
        assert c.step == 40 and c.world_size == 1 and not c.is_plain
        assert c.format_version == 2
        assert c.progress()["global_step"] == 40
        files = file_tensors(c.path)
        assert c.keys() and set(c.keys()) <= set(files)
        for k in c.keys():
            info = c.tensor_info(k)
            dt, shape, data = files[k]
            assert info["dtype"] == dt and list(info["shape"]) == shape
            got = c.get_tensor(k)
            assert got.tobytes() == data
        names = [b[0] for b in c.blobs()]
        assert "rng" in names
        assert len(c.read_blob("rng")) == dict((b[0], b[2]) for b in c.blobs())["rng"]
        with pytest.raises(shardsafe.NotFoundError):
            c.read_blob("nope")
        with pytest.raises(shardsafe.NotFoundError):
            c.get_tensor("nope")
    with open_checkpoint(trained, step=20) as c:
        assert c.step == 20
    with pytest.raises(shardsafe.NotFoundError) as ei:
        open_checkpoint(trained, step=30)
    assert ei.value.code == "SHS_ENOCHECKPOINT"
    with pytest.raises(shardsafe.ShardsafeFileNotFoundError):
        open_checkpoint(trained / "missing")


def test_open_checkpoint_boxes_and_dtype_conversion(trained):
    with open_checkpoint(trained) as c:
        k = next(k for k in c.keys() if len(c.tensor_info(k)["shape"]) == 2)
        full = c.get_tensor(k)
        s = c.get_slice(k)
        for key in (np.s_[1:3], np.s_[:, 2:5], np.s_[-1, ::2], np.s_[::3, 1]):
            assert np.array_equal(s[key], full[key]), key
        f64 = c.get_tensor(k, dtype="F64")
        assert f64.dtype == np.float64 and np.array_equal(f64, full.astype(np.float64))
        assert np.array_equal(c.get_tensor(k, dtype=np.float16), full.astype(np.float16))
        assert np.array_equal(c.get_slice(k, dtype="F16")[1:2], full[1:2].astype(np.float16))
        with pytest.raises(shardsafe.DtypeError):
            c.get_tensor(k, dtype="I32")  # float -> int: SHS_ECONVERT
        with pytest.raises(shardsafe.DtypeError):
            c.get_tensor(k, dtype="BF16")  # numpy has no bfloat16
        with pytest.raises(shardsafe.FormatError):
            c.get_tensor(k, dtype="F99")


def test_open_checkpoint_torch_and_bf16(trained):
    torch = pytest.importorskip("torch")
    with open_checkpoint(trained, framework="pt") as c:
        k = c.keys()[0]
        full = c.get_tensor(k)
        assert isinstance(full, torch.Tensor)
        bf = c.get_tensor(k, dtype=torch.bfloat16)
        assert torch.equal(bf.view(torch.int16), full.to(torch.bfloat16).view(torch.int16))


def test_open_checkpoint_detects_a_flipped_data_byte(trained, tmp_path):
    import shutil
    step = tmp_path / "iteration_00000040"
    shutil.copytree(trained / "iteration_00000040", step)
    model = next(n for n in os.listdir(step) if "-model-" in n)
    path = step / model
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # last byte of the last tensor's data
    path.write_bytes(bytes(data))
    with open_checkpoint(step) as c:
        _, _, out, _ = mkst.read(path)
        bad = next(k for k, (_, _, b) in out.items() if b and b[-1] == data[-1])
        with pytest.raises(shardsafe.ChecksumError) as ei:
            c.get_tensor(bad)
        assert model in str(ei.value)


def test_open_checkpoint_of_plain_files(tmp_path):
    t = sample()
    p = tmp_path / "m.safetensors"
    snp.save_file(t, p)
    with open_checkpoint(p) as c:
        assert c.is_plain and c.step == -1 and c.progress() is None
        assert c.keys() == sorted(t)
        for k, v in t.items():
            assert c.get_tensor(k).tobytes() == v.tobytes()
