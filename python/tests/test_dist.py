"""Distributed CheckpointManager: sharded save and resharding load over
torch.distributed (gloo ranks launched as subprocesses) and mpi4py (under
mpirun).  Every launch has a timeout: a hang fails the test."""
import os
import shutil
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")
TIMEOUT = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def have(mod):
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


need_torch = pytest.mark.skipif(not have("torch.distributed"), reason="torch not installed")


def gloo(n, scenario, path, expect_ok=True):
    """Run n gloo ranks; returns [(rc, stdout, stderr)] in rank order."""
    port = str(free_port())
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, WORKER, "gloo", scenario, str(path)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=TIMEOUT)
            out.append((p.returncode, o, e))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if expect_ok:
        for r, (rc, o, e) in enumerate(out):
            assert rc == 0 and o.strip().endswith("ok"), f"rank {r} rc={rc}\n{o}\n{e}"
    return out


def committed_steps(path):
    return sorted(d for d in os.listdir(path) if d.startswith(("iteration_", "step-")))


@need_torch
def test_gloo_save_then_reshard(tmp_path):
    gloo(4, "save", tmp_path)
    assert committed_steps(tmp_path) == ["iteration_00000003"]
    subprocess.run([sys.executable, WORKER, "-", "read", str(tmp_path)], check=True,
                   timeout=TIMEOUT)
    # 4 -> 2 ranks, 4 -> 3 ranks (uneven rows) with load_balanced
    gloo(2, "load", tmp_path)
    gloo(3, "load_balanced", tmp_path)


@need_torch
def test_gloo_bad_input_raises_on_every_rank(tmp_path):
    out = gloo(2, "bad", tmp_path)
    assert "misfit: InvalidArgumentError: shard 'w' does not fit its global shape" in out[1][1]
    assert "misfit: InvalidArgumentError: rank 1 could not register its state" in out[0][1]
    for rc, o, e in out:
        assert "overlap: " in o and "overlap" in o.split("overlap: ", 1)[1], o
    # a state dict with an object that is neither a tensor nor JSON-able, on rank 1
    assert "notjson: InvalidArgumentError: extra.x: a builtins.object is neither" in out[1][1]
    assert "notjson: InvalidArgumentError: rank 1 could not register its state: extra.x" \
        in out[0][1]
    assert not committed_steps(tmp_path)
    assert not (tmp_path / "tc").exists() or not committed_steps(tmp_path / "tc")


@need_torch
def test_gloo_rank_dies_during_save(tmp_path):
    out = gloo(3, "die", tmp_path, expect_ok=False)
    assert out[1][0] == 3, out[1]
    for r in (0, 2):
        rc, o, e = out[r]
        assert rc != 0 and "communicator" in e, f"rank {r}: rc={rc}\n{e}"
    assert not committed_steps(tmp_path)
    assert not os.path.exists(os.path.join(tmp_path, "latest_checkpointed_iteration.txt"))


def mpirun():
    exe = shutil.which("mpirun")
    if not exe or not have("mpi4py"):
        pytest.skip("mpirun or mpi4py not installed")
    return [exe, "--oversubscribe", "-n"]


def run_mpi(n, scenario, path):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
    p = subprocess.run(mpirun() + [str(n), sys.executable, WORKER, "mpi", scenario, str(path)],
                       env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0 and p.stdout.count("ok") == n, f"{p.stdout}\n{p.stderr}"


@need_torch
def test_gloo_async_save_on_its_own_group(tmp_path):
    gloo(2, "async", tmp_path)
    assert committed_steps(tmp_path) == ["iteration_00000005"]


def test_mpi_async_save_on_a_duplicated_communicator(tmp_path):
    run_mpi(2, "async", tmp_path)
    assert committed_steps(tmp_path) == ["iteration_00000005"]


def test_mpi_save_then_reshard(tmp_path):
    run_mpi(4, "save", tmp_path)
    assert committed_steps(tmp_path) == ["iteration_00000003"]
    run_mpi(2, "load", tmp_path)
    run_mpi(3, "load_balanced", tmp_path)
