"""shardsafe.torch and safe_open(framework="pt").  Skipped (visibly) when
torch is not installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mkst  # noqa: E402
import shardsafe  # noqa: E402
import shardsafe.torch as st  # noqa: E402
from shardsafe import safe_open  # noqa: E402

TORCH_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
    "I32": torch.int32, "I64": torch.int64, "F16": torch.float16,
    "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
    "C64": torch.complex64,
}
# dtypes newer torch versions have; torch 1.13 has none of them
OPTIONAL = {"U16": "uint16", "U32": "uint32", "U64": "uint64",
            "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
for _k, _v in OPTIONAL.items():
    if hasattr(torch, _v):
        TORCH_DTYPES[_k] = getattr(torch, _v)
MISSING = sorted(k for k, v in OPTIONAL.items() if not hasattr(torch, v))


def raw(t):
    """The tensor's bytes (bit patterns, whatever the dtype)."""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def random_tensor(dtype, shape, seed=1):
    """Any bit pattern: NaN payloads, -0, subnormals."""
    g = np.random.default_rng(seed)
    if dtype == torch.bool:
        return torch.from_numpy(g.integers(0, 2, size=shape).astype(np.bool_))
    esize = torch.empty((), dtype=dtype).element_size()
    n = int(np.prod(shape, dtype=np.int64))
    b = torch.from_numpy(np.frombuffer(g.bytes(n * esize), np.uint8).copy())
    return b.view(dtype).reshape(shape)


@pytest.mark.parametrize("dname", sorted(TORCH_DTYPES))
def test_every_torch_dtype_round_trips_bit_exactly(tmp_path, dname):
    dt = TORCH_DTYPES[dname]
    p = tmp_path / "t.safetensors"
    t = {"x": random_tensor(dt, (4, 3)), "s": random_tensor(dt, ())}
    st.save_file(t, p)
    _, hdr, _, _ = mkst.read(p)
    assert hdr["x"]["dtype"] == dname
    for got in (st.load_file(p), st.load(st.save(t))):
        for k, v in t.items():
            assert got[k].dtype == dt and got[k].shape == v.shape
            assert raw(got[k]) == raw(v)
    with safe_open(p, "pt") as f:
        assert raw(f.get_tensor("x")) == raw(t["x"])
        assert raw(f.get_slice("x")[1:3, ::2]) == raw(t["x"][1:3, ::2])


@pytest.mark.parametrize("dname", MISSING)
def test_dtypes_this_torch_lacks_raise_dtype_error(tmp_path, dname):
    p = tmp_path / "t.safetensors"
    n = 8 if dname.startswith("F8") else {"U16": 16, "U32": 32, "U64": 64}[dname] // 8 * 8
    mkst.write(p, [("x", dname, [1], bytes(n // 8)), ("ok", "F32", [1], bytes(4))])
    with safe_open(p, "pt") as f:
        assert f.get_tensor("ok").item() == 0.0
        with pytest.raises(shardsafe.DtypeError, match=f"{dname} has no equivalent in torch"):
            f.get_tensor("x")
    with pytest.raises(shardsafe.DtypeError):
        st.load_file(p)


def test_zero_d_zero_size_and_grad(tmp_path):
    p = tmp_path / "t.safetensors"
    t = {"s": torch.tensor(1.5), "e": torch.empty(0, 3, dtype=torch.bfloat16),
         "w": torch.ones(2, 2, requires_grad=True)}
    st.save_file(t, p)
    back = st.load_file(p)
    assert back["s"].shape == () and back["s"].item() == 1.5
    assert back["e"].shape == (0, 3) and back["e"].dtype == torch.bfloat16
    assert torch.equal(back["w"], torch.ones(2, 2)) and not back["w"].requires_grad
    with safe_open(p, "pt") as f:
        assert f.get_tensor("e").shape == (0, 3)
        assert f.get_tensor("s").item() == 1.5


def test_non_contiguous_is_refused_clearly(tmp_path):
    p = tmp_path / "t.safetensors"
    a = torch.arange(12.0).reshape(3, 4)
    with pytest.raises(shardsafe.InvalidArgumentError, match=r"non contiguous.*contiguous\(\)"):
        st.save_file({"a": a.t()}, p)
    assert not p.exists()
    st.save_file({"a": a.t().contiguous()}, p)
    assert torch.equal(st.load_file(p)["a"], a.t())


def test_shared_storage_is_refused_clearly(tmp_path):
    p = tmp_path / "t.safetensors"
    a = torch.arange(12.0)
    for t in ({"a": a, "b": a}, {"a": a, "v": a.view(3, 4)}, {"a": a, "b": a[3:5]}):
        with pytest.raises(shardsafe.SharedTensorsError, match="share memory") as ei:
            st.save_file(t, p)
        assert "'a'" in str(ei.value) and isinstance(ei.value, RuntimeError)
        with pytest.raises(shardsafe.SharedTensorsError, match="share memory"):
            st.save(t)
    assert not p.exists()
    st.save_file({"a": a, "b": a.clone()}, p)  # cloned: fine
    st.save_file({"a": a[:6], "b": a[6:]}, p)  # one storage, no overlap: fine


def test_wrong_types_are_refused(tmp_path):
    p = tmp_path / "t.safetensors"
    with pytest.raises(shardsafe.InvalidArgumentError, match="torch.Tensor"):
        st.save_file({"a": np.zeros(2)}, p)
    with pytest.raises(shardsafe.DtypeError):
        st.save_file({"a": torch.zeros(2, dtype=torch.complex128)}, p)
    with pytest.raises(shardsafe.InvalidArgumentError, match="sparse"):
        st.save_file({"a": torch.eye(3).to_sparse()}, p)
    with pytest.raises(shardsafe.InvalidArgumentError):
        st.save_file([torch.zeros(1)], p)


def test_zero_copy_tensors_are_private_copy_on_write(tmp_path):
    p = tmp_path / "t.safetensors"
    w = torch.arange(1000, dtype=torch.float32)
    st.save_file({"w": w}, p)
    before = p.read_bytes()
    f = safe_open(p, "pt")
    a = f.get_tensor("w")
    b = f.get_tensor("w")
    assert a.data_ptr() == b.data_ptr()  # both views of the one mapping
    a[0] = -1.0  # writes go to a private copy of the page, never to the file
    f.close()
    assert p.read_bytes() == before
    assert a[0].item() == -1.0 and torch.equal(a[1:], w[1:])
    with safe_open(p, "pt") as g:
        assert g.get_tensor("w")[0].item() == 0.0
    with safe_open(p, "pt", copy=True) as g:
        c = g.get_tensor("w")
        d = g.get_tensor("w")
        assert c.data_ptr() != d.data_ptr()
        assert torch.equal(c, w)


def test_load_file_device(tmp_path):
    p = tmp_path / "t.safetensors"
    st.save_file({"a": torch.zeros(1)}, p)
    with pytest.raises(shardsafe.InvalidArgumentError, match="device"):
        st.load_file(p, device="cuda")


def test_views_outlive_every_handle(tmp_path):
    """The tensor keeps the mapping alive: no handle left, still readable
    (a use after unmap would crash here, and ASan runs this too)."""
    import gc
    p = tmp_path / "t.safetensors"
    w = torch.arange(4096, dtype=torch.float64)
    st.save_file({"w": w}, p)
    t = safe_open(p, "pt").get_tensor("w")
    gc.collect()
    with safe_open(p, "pt") as f:
        s = f.get_slice("w")
    gc.collect()
    assert torch.equal(t, w)
    with pytest.raises(shardsafe.InvalidArgumentError, match="closed"):
        s[0:1]


def test_misaligned_tensor_is_copied_aligned(tmp_path):
    """Data not in the reference order may put an F32 at an odd address:
    torch gets an aligned copy, numpy a correct (unaligned) view."""
    p = tmp_path / "odd.safetensors"
    vals = np.arange(6, dtype=np.float32)
    mkst.write(p, [("pad", "U8", [1], b"\x07"), ("x", "F32", [6], vals.tobytes())], sort=False)
    _, hdr, _, _ = mkst.read(p)
    assert hdr["x"]["data_offsets"][0] == 1
    with safe_open(p, "pt") as f:
        x = f.get_tensor("x")
        assert x.data_ptr() % 4 == 0 and torch.equal(x, torch.from_numpy(vals))
    with safe_open(p, "np") as f:
        assert np.array_equal(f.get_tensor("x"), vals)


def test_large_tensors_load_into_their_own_writable_memory(tmp_path):
    """load_file / get_slice of tensors >= 4 MiB (their new memory gets
    huge-page advice before the read): exact bytes, each tensor its own
    writable storage, slices included; bad buffers to advise_huge raise."""
    p = tmp_path / "big.safetensors"
    src = {"a": random_tensor(torch.float32, (1025, 1031), seed=3),   # ~4.03 MiB, odd size
           "b": random_tensor(torch.bfloat16, (4096, 1024), seed=4),  # 8 MiB
           "c": random_tensor(torch.int8, (3,), seed=5)}
    st.save_file(src, p)
    got = st.load_file(p)
    for k, t in src.items():
        assert raw(got[k]) == raw(t), k
    ptrs = {got[k].storage().data_ptr() for k in got}
    assert len(ptrs) == 3
    got["b"].view(torch.int16).fill_(7)
    with safe_open(p, "pt") as f:
        assert raw(f.get_tensor("b")) == raw(src["b"])  # the file is unchanged
        part = f.get_slice("a")[1:1025]
        assert raw(part) == raw(src["a"][1:1025])
    with pytest.raises(BufferError):
        shardsafe._C.advise_huge(b"read-only bytes")
    shardsafe._C.advise_huge(bytearray(10))  # small: nothing to advise, no error


def test_encrypted_data_file_is_never_read_as_plain(tmp_path):
    """torch reads through a private copy-on-write mapping of its own: an
    encrypted data file (header "shardsafe_cipher") is refused there too."""
    p = str(tmp_path / "model.safetensors")
    st.save_file({"w": torch.arange(12, dtype=torch.float32)}, p,
                 metadata={"shardsafe_cipher": "AES-256-GCM-STREAM"})
    for copy in (False, True):
        with safe_open(p, "pt", copy=copy) as f:
            assert f.keys() == ["w"]
            with pytest.raises(shardsafe.ShardsafeError, match="ciphertext"):
                f.get_tensor("w")
