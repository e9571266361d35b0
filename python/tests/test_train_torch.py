"""examples/python/train_torch.py: killed with SIGKILL after a save and
restarted, it ends bitwise identical to an uninterrupted run, in one
process and on 4 gloo ranks; the 4-rank checkpoint resumes on 2 ranks
with the same model and optimizer values."""
import os
import signal
import subprocess
import sys

import pytest

from test_dist import TIMEOUT, free_port, have

pytestmark = pytest.mark.skipif(not have("torch.distributed"), reason="torch not installed")

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "..", "examples", "python", "train_torch.py")
STEPS, INTERVAL = 12, 4


def launch(n, save, *extra, port=None):
    args = [sys.executable, TRAIN, "--steps", str(STEPS), "--save-path", str(save),
            "--save-interval", str(INTERVAL), *extra]
    procs = []
    port = str(port or free_port())
    for r in range(n):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if n > 1:
            env.update(RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs):
    outs = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=TIMEOUT)
            assert p.returncode == 0, f"rc={p.returncode}\n{o}\n{e}"
            outs.append(o)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def closing(out):
    lines = out.strip().splitlines()
    assert lines[-1] == f"global_step={STEPS}", out
    assert lines[-2].startswith("final_digest="), out
    return lines[-2].split("=", 1)[1]


def killed_after_save(procs, step):
    """Read rank 0 until it reports the save of `step`, then SIGKILL
    every rank."""
    try:
        for line in procs[0].stdout:
            if line.strip() == f"saved global_step={step}":
                break
        else:
            pytest.fail("rank 0 ended without saving step %d: %s" % (step, procs[0].stderr.read()))
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.communicate(timeout=TIMEOUT)
    assert procs[0].returncode == -signal.SIGKILL


def test_single_process_kill_and_resume(tmp_path):
    want = closing(finish(launch(1, tmp_path / "a"))[0])
    killed_after_save(launch(1, tmp_path / "b"), 8)
    out = finish(launch(1, tmp_path / "b"))[0]
    assert "loaded step=8 " in out, out
    assert closing(out) == want


def test_gloo_4_ranks_kill_resume_then_2_ranks(tmp_path):
    outs = finish(launch(4, tmp_path / "a"))
    want = closing(outs[0])
    assert all(closing(o) == want for o in outs)  # data parallel: same state everywhere

    killed_after_save(launch(4, tmp_path / "b"), 8)
    outs = finish(launch(4, tmp_path / "b"))
    assert "loaded step=8 " in outs[0], outs[0]
    assert [closing(o) for o in outs] == [want] * 4

    # the 4-rank checkpoint of step 12, on 2 ranks: the same values
    outs = finish(launch(2, tmp_path / "c", "--load-path", str(tmp_path / "a")))
    for o in outs:
        assert f"loaded step={STEPS} digest={want}" in o, o
        assert closing(o) == want
