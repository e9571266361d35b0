"""shardsafe.numpy and safe_open(framework="np"): round trips, views,
slices, and bad input -> the right exception class."""

import os
import struct

import numpy as np
import pytest

import mkst
import shardsafe
import shardsafe.numpy as snp
from shardsafe import safe_open

NP_DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16,
    "U16": np.uint16, "I32": np.int32, "U32": np.uint32, "I64": np.int64,
    "U64": np.uint64, "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "C64": np.complex64,
}


def random_array(dtype, shape, seed=1):
    """Any bit pattern (NaN payloads, -0, subnormals) for float types."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return np.frombuffer(rng.bytes(n), dtype=dt).reshape(shape).copy()


def bits(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes()


@pytest.mark.parametrize("dname", sorted(NP_DTYPES))
def test_every_numpy_dtype_round_trips_bit_exactly(tmp_path, dname):
    p = tmp_path / "t.safetensors"
    t = {"x": random_array(NP_DTYPES[dname], (3, 5)), "s": random_array(NP_DTYPES[dname], ())}
    snp.save_file(t, p)
    back = snp.load_file(p)
    assert set(back) == {"x", "s"}
    for k, v in t.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert bits(back[k]) == bits(v)
    # the dtype string in the header is the safetensors name
    _, hdr, _, _ = mkst.read(p)
    assert hdr["x"]["dtype"] == dname


def test_zero_d_and_zero_size(tmp_path):
    p = tmp_path / "t.safetensors"
    t = {"scalar": np.array(2.5, np.float32), "empty": np.zeros((4, 0, 3), np.int16),
         "none": np.zeros((0,), np.float64)}
    snp.save_file(t, p)
    back = snp.load_file(p)
    assert back["scalar"].shape == () and back["scalar"] == 2.5
    assert back["empty"].shape == (4, 0, 3) and back["empty"].dtype == np.int16
    assert back["none"].shape == (0,)
    with safe_open(p, "np") as f:
        assert f.get_tensor("scalar").shape == ()
        assert f.get_tensor("empty").shape == (4, 0, 3)
        assert f.get_slice("empty")[1:3].shape == (2, 0, 3)
        assert f.get_slice("scalar")[...] == 2.5


def test_dtypes_safetensors_lacks_are_refused(tmp_path):
    p = tmp_path / "t.safetensors"
    for bad in (np.array(["x"]), np.array([1.0], np.longdouble), np.array([None], object),
                np.array([1 + 1j], np.complex128)):
        with pytest.raises(shardsafe.DtypeError):
            snp.save_file({"a": bad}, p)
    with pytest.raises(shardsafe.InvalidArgumentError, match="numpy.ndarray"):
        snp.save_file({"a": [1, 2, 3]}, p)
    assert not p.exists()


def test_metadata(tmp_path):
    p = tmp_path / "t.safetensors"
    snp.save_file({"a": np.zeros(2)}, p, metadata={"format": "np", "b": "ü\u00e9"})
    with safe_open(p, "np") as f:
        assert f.metadata() == {"format": "np", "b": "ü\u00e9"}
    snp.save_file({"a": np.zeros(2)}, p)
    with safe_open(p, "np") as f:
        assert f.metadata() is None
    with pytest.raises(shardsafe.InvalidArgumentError):
        snp.save_file({"a": np.zeros(2)}, p, metadata={"k": 1})
    with pytest.raises(shardsafe.InvalidArgumentError, match="NUL"):
        snp.save_file({"a": np.zeros(2)}, p, metadata={"k": "a\0b"})


def test_views_are_zero_copy_and_copy_on_write(tmp_path):
    p = tmp_path / "t.safetensors"
    a = np.arange(1000, dtype=np.float32)
    snp.save_file({"a": a}, p)
    f = safe_open(p, "np")
    v = f.get_tensor("a")
    assert v.flags.writeable and not v.flags.owndata
    v[1] = 5  # private to this handle
    # the view keeps the mapping alive after close
    f.close()
    assert v[1] == 5 and (v[2:] == a[2:]).all()
    with pytest.raises(shardsafe.InvalidArgumentError, match="closed"):
        f.get_tensor("a")
    for kw in ({"copy": True}, {"mmap": False}, {"backend": "pread"}):
        with safe_open(p, "np", **kw) as g:
            c = g.get_tensor("a")
            assert c.flags.writeable and c.flags.owndata
            c[0] = 7
        assert (snp.load_file(p)["a"] == a).all()


def test_get_slice_reads_the_box(tmp_path):
    """Slices under the reference's rules (test_reference_api.py has the
    rules and messages): every backend gives numpy's values."""
    p = tmp_path / "t.safetensors"
    a = random_array(np.float32, (6, 7, 5), seed=3)
    snp.save_file({"a": a}, p)
    keys = [np.s_[1:4], np.s_[:, 2:6, ::2], np.s_[-1], np.s_[..., 3], np.s_[2, ..., 1:],
            np.s_[::3, ::4, ::5], np.s_[-3:, -1, :], np.s_[:], np.s_[...], np.s_[0, 0, 0],
            np.s_[4:6], np.s_[:, 5:2]]
    for mmap in (True, False):
        with safe_open(p, "np", mmap=mmap) as f:
            s = f.get_slice("a")
            assert s.get_shape() == [6, 7, 5] and s.get_dtype() == "F32" and len(s) == 6
            for k in keys:
                got = s[k]
                assert got.shape == a[k].shape, k
                assert bits(got) == bits(a[k]), k
                assert got.flags.writeable
    with safe_open(p, "np") as f:
        s = f.get_slice("a")
        for bad in (6, (0, 0, 0, 0), slice(4, 100), [0, 1]):
            with pytest.raises(IndexError):
                s[bad]
        with pytest.raises(shardsafe.InvalidArgumentError, match="negative step"):
            s[::-1]


def test_save_load_bytes_match_the_reference_layout(tmp_path):
    t = {"b": np.arange(4, dtype=np.int64), "a": np.ones((2, 2), np.float16)}
    data = snp.save(t, metadata={"m": "1"})
    entries = [("b", "I64", [4], t["b"].tobytes()), ("a", "F16", [2, 2], t["a"].tobytes())]
    p = tmp_path / "ref.safetensors"
    mkst.write(p, entries, metadata={"m": "1"})
    assert data == p.read_bytes()
    back = snp.load(data)
    assert bits(back["b"]) == bits(t["b"]) and bits(back["a"]) == bits(t["a"])
    with pytest.raises(shardsafe.FormatError):
        snp.load(b"\x02\x00\x00\x00\x00\x00\x00\x00{]")
    assert snp.load(b"\x02\x00\x00\x00\x00\x00\x00\x00{}") == {}
    with pytest.raises(shardsafe.InvalidArgumentError):
        snp.load("not bytes")


def test_bad_files_raise_the_right_class(tmp_path):
    good = tmp_path / "good.safetensors"
    snp.save_file({"a": np.arange(10, dtype=np.float32)}, good)
    raw = good.read_bytes()

    def check(data, cls, code):
        p = tmp_path / "bad.safetensors"
        p.write_bytes(data)
        with pytest.raises(cls) as ei:
            safe_open(p, "np")
        assert ei.value.code == code, str(ei.value)
        assert str(p) in str(ei.value)  # the C message names the file
        with pytest.raises(cls):
            snp.load_file(p)

    check(raw[:-4], shardsafe.FormatError, "SHS_ETRAILING")
    check(raw[:5], shardsafe.FormatError, "SHS_EHEADER_TOO_SMALL")
    check(raw[:20], shardsafe.FormatError, "SHS_EHEADER_LENGTH")
    check(raw + b"x", shardsafe.FormatError, "SHS_ETRAILING")
    (n,) = struct.unpack("<Q", raw[:8])
    check(raw[:8] + b"[" + raw[9:], shardsafe.FormatError, "SHS_EJSON")
    check(raw[:8] + raw[8:8 + n].replace(b"F32", b"F99") + raw[8 + n:],
          shardsafe.FormatError, "SHS_EDTYPE")
    check(b"version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 1\n",
          shardsafe.FormatError, "SHS_EWRONG_FORMAT")

    with pytest.raises(shardsafe.ShardsafeFileNotFoundError) as ei:
        safe_open(tmp_path / "missing.safetensors", "np")
    assert isinstance(ei.value, FileNotFoundError) and isinstance(ei.value, shardsafe.ShardsafeIOError)
    assert ei.value.errno == 2
    with pytest.raises(shardsafe.ShardsafeError):
        safe_open(tmp_path, "np")  # a directory


def test_missing_key_and_framework(tmp_path):
    p = tmp_path / "t.safetensors"
    snp.save_file({"a": np.zeros(1)}, p)
    with safe_open(p, "np") as f:
        with pytest.raises(shardsafe.NotFoundError) as ei:
            f.get_tensor("b")
        assert isinstance(ei.value, KeyError)
        assert ei.value.code == "SHS_ENOTFOUND" and "'b'" in str(ei.value)
        with pytest.raises(KeyError):
            f.get_slice("b")
    with pytest.raises(shardsafe.InvalidArgumentError, match="framework"):
        safe_open(p, "tf")
    with pytest.raises(shardsafe.InvalidArgumentError, match="(?i)device cuda:0"):
        safe_open(p, "np", device="cuda:0")


def test_bf16_and_f8_files_are_refused_by_numpy(tmp_path):
    p = tmp_path / "t.safetensors"
    mkst.write(p, [("h", "BF16", [2], b"\x80\x3f\x00\x40"), ("e", "F8_E4M3", [1], b"\x38"),
                   ("ok", "U8", [1], b"\x05")])
    with safe_open(p, "np") as f:
        assert f.get_tensor("ok")[0] == 5
        for k, dt in (("h", "BF16"), ("e", "F8_E4M3")):
            with pytest.raises(shardsafe.DtypeError, match=dt) as ei:
                f.get_tensor(k)
            assert isinstance(ei.value, shardsafe.MismatchError)
            with pytest.raises(shardsafe.DtypeError):
                f.get_slice(k)[0:1]


def test_failed_save_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "t.safetensors"
    snp.save_file({"a": np.arange(3, dtype=np.int32)}, p)
    before = p.read_bytes()
    with pytest.raises(shardsafe.InvalidArgumentError) as ei:
        snp.save_file({"ok": np.zeros(3), "__metadata__": np.zeros(1)}, p)
    assert ei.value.status is not None  # raised by the library's writer
    assert p.read_bytes() == before
    assert os.listdir(tmp_path) == ["t.safetensors"]
    with pytest.raises(shardsafe.ShardsafeFileNotFoundError):
        snp.save_file({"a": np.zeros(1)}, tmp_path / "no" / "dir" / "t.safetensors")


def test_fsync_and_align(tmp_path):
    p = tmp_path / "t.safetensors"
    snp.save_file({"a": np.arange(5, dtype=np.float64)}, p, fsync=True, align=4096)
    n, _, out, _ = mkst.read(p)
    assert (8 + n) % 4096 == 0
    assert out["a"][2] == np.arange(5, dtype=np.float64).tobytes()
    with pytest.raises(shardsafe.InvalidArgumentError):
        snp.save_file({"a": np.zeros(1)}, p, align=3)


def test_error_classes():
    assert issubclass(shardsafe.ChecksumError, shardsafe.FormatError)
    for cls in (shardsafe.FormatError, shardsafe.ShardsafeIOError, shardsafe.NotFoundError,
                shardsafe.MismatchError, shardsafe.InvalidArgumentError):
        assert issubclass(cls, shardsafe.ShardsafeError)
    assert issubclass(shardsafe.ShardsafeIOError, OSError)
    assert issubclass(shardsafe.DtypeError, TypeError)


def test_numpy_views_outlive_every_handle(tmp_path):
    import gc
    p = tmp_path / "t.safetensors"
    a = np.arange(4096, dtype=np.int32)
    snp.save_file({"a": a}, p)
    v = safe_open(p, "np").get_tensor("a")
    gc.collect()
    assert (v == a).all()


@pytest.mark.skipif(not os.environ.get("SHS_PY_SANITIZED"), reason="not the ASan+UBSan build")
def test_the_sanitizer_runtime_is_loaded():
    """In the ASan build the module is instrumented: its runtime must be
    in the process, or nothing would be checked."""
    with open("/proc/self/maps") as fh:
        maps = fh.read()
    assert "libasan" in maps and "libubsan" in maps
    assert "__asan_init" in open(shardsafe._C.__file__, "rb").read().decode("latin-1")


def test_encrypted_data_file_is_never_read_as_plain(tmp_path):
    """A data file of an encrypted save (its header's __metadata__ has
    "shardsafe_cipher") holds ciphertext: names and shapes are readable,
    its tensors are refused everywhere outside its checkpoint, mapped,
    copied, sliced or through the read API (docs/encryption.md)."""
    p = str(tmp_path / "model.safetensors")
    snp.save_file({"w": np.arange(12, dtype=np.float32).reshape(4, 3)}, p,
                 metadata={"shardsafe_cipher": "AES-256-GCM-STREAM"})
    for mmap in (True, False):
        with safe_open(p, "np", mmap=mmap) as f:
            assert f.keys() == ["w"]
            assert f.metadata()["shardsafe_cipher"] == "AES-256-GCM-STREAM"
            with pytest.raises(shardsafe.ShardsafeError, match="ciphertext"):
                f.get_tensor("w")
            with pytest.raises(shardsafe.ShardsafeError, match="ciphertext"):
                f.get_slice("w")[1:2]
    with pytest.raises(shardsafe.ShardsafeError, match="without the metadata.json"):
        shardsafe.open_checkpoint(p).get_tensor("w")
