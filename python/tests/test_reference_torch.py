"""shardsafe.torch as `safetensors.torch` (issue 15.1): save_model /
load_model with tied and aliased weights, the shared-memory rules,
torch's slicing, device strings.  Skipped (visibly) without torch."""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mkst  # noqa: E402
import shardsafe  # noqa: E402
import shardsafe.torch as st  # noqa: E402
from shardsafe import safe_open  # noqa: E402


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.b = torch.nn.Linear(3, 3)
        self.a = self.b  # the same module twice: four names, two storages


class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 3)


def test_shared_tensor_groups():
    A = torch.zeros(4)
    assert st._find_shared_tensors({"B": A[:2], "C": A[2:]}) == [{"B"}, {"C"}]
    assert st._find_shared_tensors({"B": A[:2], "C": A[1:]}) == [{"B", "C"}]
    assert st._find_shared_tensors({"B": A[:2], "C": A[2:], "D": A[:1]}) == [{"B", "D"}, {"C"}]
    # a view nested in a longer one: one group (the reference splits it and
    # then refuses the save; here it is saved once)
    big = torch.zeros(10)
    groups = st._find_shared_tensors({"w": big, "x": big[1:2], "y": big[3:4]})
    assert groups == [{"w", "x", "y"}]
    meta = torch.zeros(2, 2, device="meta")
    assert st._find_shared_tensors({"m": meta, "n": meta[:1]}) == []
    assert st._is_complete(torch.zeros(3, 3)) and not st._is_complete(torch.zeros(3, 3)[:1])
    assert not st._is_complete(torch.zeros(3, 3)[::2])
    B = torch.zeros(16)
    assert st._end_ptr(B[::4]) - B.data_ptr() == 16 * 3 + 4
    A = torch.zeros(3, 3)
    assert st._remove_duplicate_names({"A": A, "B": A[:1], "C": A}) == {"A": ["B", "C"]}
    with pytest.raises(RuntimeError, match="None is covering the entire storage"):
        st._remove_duplicate_names({"B": A[:1]})
    # preferred names (the file's) win, then the smallest not discarded
    assert st._remove_duplicate_names({"x": A, "y": A}, preferred_names=["y"]) == {"y": ["x"]}
    assert st._remove_duplicate_names({"x": A, "y": A}, discard_names=["x"]) == {"y": ["x"]}


def test_save_file_refuses_shared_memory_but_not_disjoint_views(tmp_path):
    p = tmp_path / "t.safetensors"
    A = torch.arange(6.0).reshape(2, 3)
    for t in ({"A": A, "B": A[:1]}, {"A": A, "B": A[1:]}, {"a": A, "b": A}):
        with pytest.raises(RuntimeError, match="share memory.*save_model"):
            st.save_file(t, p)
        with pytest.raises(shardsafe.SharedTensorsError):
            st.save(t)
    assert not p.exists()
    Z = torch.zeros(10, 10)
    st.save_file({"test": Z[1:], "test2": Z[:1]}, p)  # same storage, disjoint: fine
    back = st.load_file(p)
    assert back["test"].shape == (9, 10) and back["test2"].shape == (1, 10)


def test_save_model_writes_tied_weights_once_and_load_model_restores_them(tmp_path):
    p = tmp_path / "m.safetensors"
    m = Tied()
    st.save_model(m, p)
    n, hdr, data, meta = mkst.read(p)
    assert sorted(k for k in hdr if k != "__metadata__") == ["a.bias", "a.weight"]
    assert meta == {"b.bias": "a.bias", "b.weight": "a.weight"}  # dropped -> kept
    m2 = Tied()
    missing, unexpected = st.load_model(m2, p)
    assert missing == set() and unexpected == []
    assert torch.equal(m2.b.weight, m.b.weight) and m2.a is m2.b
    # the caller's metadata wins and is not modified
    md = {"b.weight": "mine"}
    st.save_model(m, p, metadata=md)
    assert md == {"b.weight": "mine"}
    assert mkst.read(p)[3] == {"b.bias": "a.bias", "b.weight": "mine"}


def test_load_model_prefers_the_names_in_the_file(tmp_path):
    p = tmp_path / "m.safetensors"
    m = Tied()
    sd = m.state_dict()
    st.save_file({"b.weight": sd["b.weight"].clone(), "b.bias": sd["b.bias"].clone()}, p)
    m2 = Tied()
    assert st.load_model(m2, p) == (set(), [])
    assert torch.equal(m2.a.weight, m.a.weight)


def test_load_model_strict_reports_missing_and_unexpected(tmp_path):
    p = tmp_path / "m.safetensors"
    st.save_model(Tied(), p)
    with pytest.raises(RuntimeError) as ei:
        st.load_model(Two(), p)
    assert 'Missing key(s) in state_dict: "b.bias", "b.weight"' in str(ei.value)
    assert str(ei.value).startswith("Error(s) in loading state_dict for Two:")
    missing, unexpected = st.load_model(Two(), p, strict=False)
    assert missing == {"b.bias", "b.weight"} and unexpected == []
    st.save_model(Two(), p)
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "b.bias", "b.weight"'):
        st.load_model(Tied(), p)


def test_save_model_contiguity(tmp_path):
    p = tmp_path / "m.safetensors"
    m = torch.nn.Linear(4, 4)
    m.weight = torch.nn.Parameter(torch.zeros(4, 4).t())
    with pytest.raises(ValueError, match=r"use save_model\(\.\.\., force_contiguous=True\)"):
        st.save_model(m, p, force_contiguous=False)
    st.save_model(m, p)
    m2 = torch.nn.Linear(4, 4)
    st.load_model(m2, p)
    assert torch.equal(m2.weight, m.weight)
    c = copy.deepcopy(Two())
    st.save_model(c, p)  # copies share nothing
    assert set(mkst.read(p)[1]) == {"a.weight", "a.bias", "b.weight", "b.bias"}


def test_reference_messages_for_bad_input(tmp_path):
    p = tmp_path / "t.safetensors"
    with pytest.raises(ValueError) as ei:
        st.save_file({"test": torch.sparse_coo_tensor(size=(2, 3))}, p)
    assert str(ei.value).startswith("You are trying to save a sparse tensors: `['test']`")
    with pytest.raises(ValueError, match="^Key `test` is invalid, expected torch.Tensor but "
                                         "received <class 'dict'>$"):
        st.save_file({"test": {"some": "thing"}}, p)
    with pytest.raises(ValueError, match="^Expected a dict of \\[str, torch.Tensor\\] but "
                                         "received <class 'str'>$"):
        st.save_file("notadict", p)
    with pytest.raises(ValueError, match="non contiguous tensor: `x`"):
        st.save_file({"x": torch.zeros(2, 3).t()}, p)
    with pytest.raises(RuntimeError, match="Cannot copy out of meta tensor"):
        st.save_file({"m": torch.zeros(2, device="meta")}, p)
    assert not p.exists()


def test_torch_slices_use_torch_indexing_with_mmap_and_the_reference_rules_with_pread(tmp_path):
    p = tmp_path / "t.safetensors"
    A = torch.randn(10, 5)
    st.save_file({"a": A}, p)
    with safe_open(p, "pt") as f:
        s = f.get_slice("a")
        for key in (np.s_[:], (), np.s_[:2], np.s_[:, :2], np.s_[0, :2], np.s_[2:, -1],
                    np.s_[::3, 1:], np.s_[:20], [], [0, 3], np.s_[None, 1]):
            assert torch.equal(s[key], A[key]), key  # torch's own rules, as the reference
        v = s[1:3]
        v[0, 0] = 1234.0  # a view of the private mapping, as the reference
        assert f.get_tensor("a")[1, 0].item() == 1234.0
    with safe_open(p, "pt") as f:
        assert f.get_tensor("a")[1, 0].item() == A[1, 0].item()  # not the file
    with safe_open(p, "pt", backend="pread") as f:
        s = f.get_slice("a")
        assert torch.equal(s[2:, 1], A[2:, 1])
        with pytest.raises(shardsafe.SliceError, match="index 19 out of bounds"):
            s[:20]


def test_device_strings_are_parsed_as_torch_parses_them(tmp_path):
    p = tmp_path / "t.safetensors"
    st.save_file({"a": torch.ones(2)}, p)
    for dev in ("cpu", torch.device("cpu")):
        assert st.load_file(p, device=dev)["a"].device.type == "cpu"
    with pytest.raises(shardsafe.SafetensorError, match="device foo is invalid"):
        st.load_file(p, device="foo")
    if not torch.cuda.is_available():
        for dev in ("cuda", "cuda:0", 0):
            with pytest.raises(shardsafe.SafetensorError, match="CUDA is not available"):
                safe_open(p, "pt", device=dev)
    meta = st.load_file(p, device="meta")["a"]  # a device torch has everywhere
    assert meta.device.type == "meta" and meta.shape == (2,)


def test_pread_backend_and_load_model(tmp_path):
    p = tmp_path / "m.safetensors"
    m = Two()
    st.save_model(m, p)
    m2 = Two()
    st.load_model(m2, p, backend="pread")
    assert torch.equal(m2.a.weight, m.a.weight)
    back = st.load_file(p, backend="pread")
    assert torch.equal(back["b.bias"], m.b.bias.detach())
    with pytest.raises(shardsafe.SafetensorError, match="backend"):
        st.load_file(p, backend="nope")
