"""The `safetensors` package's API in shardsafe (issue 15.1): every public
name, with the reference's semantics, checked against files written by
the independent writer tests/cli/mkst.py.  Written for shardsafe (the
reference's own suite is run by run_reference_tests.sh, not committed)."""

import io
import os
import struct

import numpy as np
import pytest

import mkst
import shardsafe
import shardsafe.numpy as snp
from shardsafe import safe_open


def test_reference_names_exist():
    import shardsafe.torch as st
    for name in ("SafetensorError", "TensorSpec", "__version__", "deserialize", "safe_open",
                 "_safe_open_handle", "serialize", "serialize_file"):
        assert hasattr(shardsafe, name), name
    for name in ("save_file", "load_file", "save", "load"):
        assert callable(getattr(snp, name)), name
    for name in ("save_file", "load_file", "save", "load", "save_model", "load_model",
                 "storage_ptr", "storage_size", "_find_shared_tensors", "_remove_duplicate_names",
                 "_is_complete", "_end_ptr", "_filter_shared_not_shared"):
        assert callable(getattr(st, name)), name
    # one error class catches every error of the library
    for cls in (shardsafe.FormatError, shardsafe.InvalidArgumentError, shardsafe.NotFoundError,
                shardsafe.ShardsafeIOError, shardsafe.SliceError):
        assert issubclass(cls, shardsafe.SafetensorError)


def i32_2x2(vals=(0, 0, 0, 0)):
    return ("test", "I32", [2, 2], np.array(vals, "<i4").tobytes())


def test_serialize_takes_both_reference_forms_and_is_byte_identical(tmp_path):
    ref = tmp_path / "ref.safetensors"
    mkst.write(ref, [i32_2x2((0, 0, 0, 1))], metadata={"m": "1"})
    a = np.array([[0, 0], [0, 1]], np.int32)
    # safetensors 0.7: a dict with the bytes
    d07 = {"test": {"dtype": "int32", "shape": [2, 2], "data": a.tobytes()}}
    assert shardsafe.serialize(d07, metadata={"m": "1"}) == ref.read_bytes()
    # safetensors 0.8: a TensorSpec by address
    spec = shardsafe.TensorSpec(dtype="int32", shape=[2, 2], data_ptr=a.ctypes.data,
                                data_len=a.nbytes)
    assert spec.dtype == "I32" and spec.shape == [2, 2] and spec.data_len == 16
    assert "TensorSpec(dtype='I32'" in repr(spec)
    with pytest.raises(AttributeError):
        spec.data_len = 3
    out = tmp_path / "out.safetensors"
    shardsafe.serialize_file({"test": spec}, out, metadata={"m": "1"})
    assert out.read_bytes() == ref.read_bytes()
    # F4 packs two values per byte: the header counts values
    assert shardsafe.TensorSpec(dtype="float4_e2m1fn_x2", shape=[2, 3], data_ptr=0,
                                data_len=0).shape == [2, 6]


def test_serialize_errors_are_safetensor_errors():
    with pytest.raises(shardsafe.SafetensorError):
        shardsafe.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0)
    # a dict without its bytes: a SafetensorError (0.7) and a TypeError (0.8)
    with pytest.raises(shardsafe.SafetensorError) as ei:
        shardsafe.serialize({"test": {"dtype": "float32", "shape": [1]}})
    assert isinstance(ei.value, TypeError) and "Missing `data`" in str(ei.value)
    with pytest.raises(TypeError):
        shardsafe.serialize({"t": {"dtype": "float32", "shape": [1], "data_ptr": 0,
                                   "data_len": 0}})
    with pytest.raises(TypeError):
        shardsafe.serialize({"t": [1, 2]})
    with pytest.raises(shardsafe.SafetensorError, match="Unknown dtype"):
        shardsafe.serialize({"t": {"dtype": "complex128", "shape": [1], "data": bytes(16)}})
    with pytest.raises(shardsafe.SafetensorError, match="buffer of 3 bytes, expected 4"):
        shardsafe.serialize({"t": {"dtype": "float32", "shape": [1], "data": b"abc"}})


def test_deserialize_returns_copies_in_file_order(tmp_path):
    p = tmp_path / "t.safetensors"
    mkst.write(p, [("b", "F32", [2], np.array([1, 2], "<f4").tobytes()),
                   ("a", "U8", [3], b"\x01\x02\x03"), ("e", "F32", [0], b"")])
    out = shardsafe.deserialize(p.read_bytes())
    assert [k for k, _ in out] == ["b", "e", "a"]  # reference order: F32 before U8
    d = dict(out)
    assert d["b"] == {"shape": [2], "dtype": "F32", "data": bytearray(b"\0\0\x80?\0\0\0@")}
    assert isinstance(d["a"]["data"], bytearray) and d["e"]["data"] == bytearray()
    with pytest.raises(shardsafe.SafetensorError):
        shardsafe.deserialize(b"\x02\x00\x00\x00\x00\x00\x00\x00{]")


def test_numpy_big_endian_and_non_contiguous_are_written_as_the_reference(tmp_path):
    """The reference byte-swaps big-endian arrays and writes
    non-contiguous ones in C order (it used to be refused here)."""
    vals = np.arange(6, dtype=np.int32).reshape(2, 3)
    ref = tmp_path / "ref.safetensors"
    mkst.write(ref, [("a", "I32", [2, 3], vals.astype("<i4").tobytes()),
                     ("t", "I32", [3, 2], np.ascontiguousarray(vals.T).tobytes())])
    got = snp.save({"a": vals.astype(">i4"), "t": vals.T})
    assert got == ref.read_bytes()
    p = tmp_path / "t.safetensors"
    snp.save_file({"a": vals.astype(">i4"), "t": vals.T}, p)
    assert p.read_bytes() == ref.read_bytes()
    back = snp.load_file(p)
    assert (back["a"] == vals).all() and (back["t"] == vals.T).all()


def test_numpy_get_tensor_is_writable_copy_on_write(tmp_path):
    """As the reference's arrays: writable; the write stays in this
    handle (private mapping), the file never changes."""
    p = tmp_path / "t.safetensors"
    a = np.arange(1000, dtype=np.float32)
    snp.save_file({"a": a}, p)
    before = p.read_bytes()
    f = safe_open(p, "np")
    v = f.get_tensor("a")
    assert v.flags.writeable and not v.flags.owndata  # zero-copy
    v[0] = 42.0
    assert f.get_tensor("a")[0] == 42.0  # the same handle sees it
    with safe_open(p, "np") as g:
        assert g.get_tensor("a")[0] == 0.0  # another handle does not
    f.close()
    assert v[0] == 42.0 and p.read_bytes() == before
    with safe_open(p, "np", backend="pread") as g:
        c = g.get_tensor("a")
        assert c.flags.writeable and c.flags.owndata


def test_get_tensors_and_offset_keys(tmp_path):
    p = tmp_path / "t.safetensors"
    mkst.write(p, [("z", "F64", [1], bytes(8)), ("a", "U8", [1], b"\x05")])
    with safe_open(p, "np") as f:
        assert f.keys() == ["a", "z"] and f.offset_keys() == ["z", "a"]
        got = f.get_tensors()
        assert list(got) == ["z", "a"] and got["a"][0] == 5


def test_numpy_slices_follow_the_reference_rules(tmp_path):
    p = tmp_path / "t.safetensors"
    a = np.random.default_rng(1).random((10, 5))
    snp.save_file({"a": a}, p)
    with safe_open(p, "np") as f:
        s = f.get_slice("a")
        for key, want in (((), a), (slice(None), a), (slice(None, 2), a[:2]),
                          ((0, slice(None, 2)), a[0, :2]), ((slice(2, None), -1), a[2:, -1]),
                          ((slice(2, None), -5), a[2:, -5]), ((slice(1, 9, 3),), a[1:9:3]),
                          ((Ellipsis, 1), a[..., 1])):
            got = s[key]
            assert got.shape == want.shape and np.array_equal(got, want), key
            assert got.flags.writeable
            if got.size:
                got.reshape(-1)[0] = -1.0  # its own memory: later reads unchanged
                assert np.array_equal(s[key], want), key
        assert s[[]].shape == (0, 5)  # an empty list selects nothing of dimension 0
        assert s[5:2].shape == (0, 5)  # an empty range
        cases = [
            ((slice(2, None), -6), "Invalid index -6 for dimension 1 of size 5"),
            ((slice(2, None), 20), "Error during slicing [2:, 20] with shape [10, 5]: index 20 "
                                   "out of bounds for tensor dimension #1 of size 5"),
            (slice(None, 20), "Error during slicing [:20] with shape [10, 5]: index 19 out of "
                              "bounds for tensor dimension #0 of size 10"),
            ((slice(None), slice(None, 20)), "Error during slicing [:, :20] with shape [10, 5]: "
                                             "index 19 out of bounds for tensor dimension #1 "
                                             "of size 5"),
            (slice(10, None), "index 10 out of bounds for tensor dimension #0 of size 10"),
            ((0, 0, 0), "more slicing indexes than dimensions in tensor"),
            ((slice(None, None, -1),), "negative step"),
        ]
        for key, msg in cases:
            with pytest.raises(shardsafe.SafetensorError) as ei:
                s[key]
            assert msg in str(ei.value), key
            assert isinstance(ei.value, IndexError)
        with pytest.raises(shardsafe.SafetensorError, match="^Non empty lists are not implemented$"):
            s[[0, 1]]
        with pytest.raises(TypeError):
            s[None]


def test_slices_of_empty_dimensions(tmp_path):
    p = tmp_path / "t.safetensors"
    snp.save_file({"e": np.zeros((0, 4), np.float32)}, p)
    with safe_open(p, "np") as f:
        assert f.get_slice("e")[:].shape == (0, 4)
        assert f.get_slice("e")[:, 1:3].shape == (0, 2)
        with pytest.raises(shardsafe.SliceError):
            f.get_slice("e")[0]


def test_file_not_found_has_the_reference_message(tmp_path):
    missing = tmp_path / "notafile"
    with pytest.raises(FileNotFoundError) as ei:
        safe_open(missing, framework="np")
    assert str(ei.value) == f"No such file or directory: {missing}"
    assert isinstance(ei.value, shardsafe.SafetensorError) and ei.value.errno == 2


def test_framework_device_and_backend_arguments(tmp_path):
    p = tmp_path / "t.safetensors"
    snp.save_file({"a": np.zeros(2)}, p)
    for fw in ("np", "numpy"):
        with safe_open(p, fw, device="cpu") as f:
            assert f.get_tensor("a").shape == (2,)
    with pytest.raises(shardsafe.SafetensorError, match="not supported for framework numpy"):
        safe_open(p, "np", device="cuda:0")
    with pytest.raises(shardsafe.SafetensorError, match="framework tf is not supported"):
        safe_open(p, "tf")
    with pytest.raises(shardsafe.SafetensorError, match="framework nope is invalid"):
        safe_open(p, "nope")
    with pytest.raises(shardsafe.SafetensorError, match="backend"):
        safe_open(p, "np", backend="nope")
    with safe_open(p, "np", backend="pread") as f:
        assert f.get_slice("a")[1:].shape == (1,)


def test_safe_open_handle_reads_file_objects(tmp_path):
    p = tmp_path / "t.safetensors"
    t = {"a": np.arange(4, dtype=np.float32), "b": np.ones((2, 3), np.uint8)}
    snp.save_file(t, p)

    def check(h):
        with h as g:
            assert g.keys() == ["a", "b"]
            for k, v in t.items():
                assert np.array_equal(g.get_tensor(k), v)
                assert g.get_tensor(k).flags.writeable

    with open(p, "r") as fh:  # text mode, as the reference's own test does
        check(shardsafe._safe_open_handle(fh, framework="np", device="cpu"))
    with open(p, "rb") as fh:
        os.unlink(p)  # no path left: read through the open descriptor
        check(shardsafe._safe_open_handle(fh, "np"))
    data = snp.save(t)
    check(shardsafe._safe_open_handle(io.BytesIO(data), "np"))  # no descriptor: in memory
    with pytest.raises(shardsafe.FormatError):
        shardsafe._safe_open_handle(io.BytesIO(data[:-1]), "np")
    with pytest.raises(shardsafe.InvalidArgumentError, match="binary mode"):
        shardsafe._safe_open_handle(io.StringIO("x"), "np")


def test_load_bytes_is_validated_like_a_file():
    data = snp.save({"a": np.arange(3, dtype=np.int16)})
    assert snp.load(data)["a"].tolist() == [0, 1, 2]
    assert snp.load(bytearray(data))["a"].flags.writeable
    with pytest.raises(shardsafe.FormatError) as ei:
        snp.load(data + b"x")
    assert ei.value.code == "SHS_ETRAILING" and "<bytes>" in str(ei.value)
    n = struct.unpack("<Q", data[:8])[0]
    dup = data[:8] + data[8:8 + n].replace(b"}}", b'},"a":{"dtype":"I16","shape":[3],'
                                                   b'"data_offsets":[0,6]}}', 1)
    with pytest.raises(shardsafe.FormatError):
        snp.load(dup)


def test_duplicate_names_say_we_are_stricter(tmp_path):
    """The reference keeps the last of two equal keys; shardsafe refuses
    the file and says that this is deliberate."""
    p = tmp_path / "dup.safetensors"
    h = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},' \
        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    h += b" " * (-(8 + len(h)) % 8)
    p.write_bytes(struct.pack("<Q", len(h)) + h + b"\x01")
    with pytest.raises(shardsafe.FormatError) as ei:
        safe_open(p, "np")
    assert ei.value.code == "SHS_EDUPLICATE"
    assert "stricter than the reference" in str(ei.value), str(ei.value)


def test_the_binding_opens_and_maps_nothing_itself():
    """Issue 19.7: every file is opened and mapped by the library (the
    binding's C files make no open/mmap call of their own)."""
    import re
    src = os.path.join(os.environ.get("SHS_SOURCE_DIR", os.path.join(
        os.path.dirname(__file__), "..", "..")), "python", "shardsafe")
    calls = re.compile(r"(?<![\w.>])(open|openat|fopen|mmap|munmap)\s*\(|<fcntl\.h>")
    names = [n for n in os.listdir(src) if n.endswith(".c")]
    assert "_C_file.c" in names
    for name in names:
        with open(os.path.join(src, name)) as fh:
            hit = calls.search(fh.read())
        assert hit is None, (name, hit and hit.group(0))
