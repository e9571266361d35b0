#!/usr/bin/env python3
"""A small PyTorch training loop (CPU) checkpointed with shardsafe.

    python3 train_torch.py --steps 40 --save-path /tmp/ck --save-interval 10
    # distributed (gloo), one process per rank:
    RANK=r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 python3 train_torch.py ...

Model: an MLP with dropout and one parameter that never gets a gradient
(so AdamW has no state for it), trained with AdamW and a warmup + cosine
LambdaLR on a synthetic regression set.  Randomness from all three RNGs
(torch: dropout, numpy: input noise, Python random: noise scale), a
data-loader position (epoch, index) and the LR scheduler are checkpointed,
so a run killed (SIGKILL) and restarted ends bitwise identical to an
uninterrupted one.  With WORLD_SIZE > 1 each rank takes its slice of
every global batch and gradients are averaged with all_reduce (data
parallel: every tensor is replicated, saved once with remove_redundancy).

Flags as the C demo trainers': --steps, --save-path, --load-path,
--save-interval, --set KEY=VALUE (a checkpoint config field).  Prints
"loaded step=<n> digest=<hex>" after a resume, "saved global_step=<n>"
after each save, "warning: ..." for each new warning of the manager (a
failed retention deletion: the save itself succeeded), and closes with
final_digest=<hex> and global_step=<n>.
"""
import argparse
import datetime
import hashlib
import math
import os
import random
import sys

import numpy as np
import torch

try:
    import shardsafe
except ImportError:  # run from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "build", "python"))
    import shardsafe
from shardsafe.training import TorchCheckpointer

N_SAMPLES, GLOBAL_BATCH, SEED = 64, 8, 1234


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.drop = torch.nn.Dropout(0.1)
        self.out = torch.nn.Linear(16, 4)
        self.unused = torch.nn.Parameter(torch.ones(3))  # never gets a gradient

    def forward(self, x):
        return self.out(self.drop(torch.nn.functional.gelu(self.inp(x))))


def digest(model, optimizer):
    """Hash of every model and optimizer state tensor (name order)."""
    h = hashlib.blake2b(digest_size=8)
    names = {id(p): n for n, p in model.named_parameters()}
    for n, t in sorted(model.state_dict().items()):
        h.update(n.encode())
        h.update(t.contiguous().numpy().tobytes())
    for p, st in sorted(optimizer.state.items(), key=lambda kv: names[id(kv[0])]):
        for k, v in sorted(st.items()):
            h.update(f"{names[id(p)]}.{k}".encode())
            h.update(v.contiguous().numpy().tobytes() if torch.is_tensor(v) else repr(v).encode())
    return h.hexdigest()


def warn_new(ck, said):
    """Print the manager's latest warning (shs_manager_warning, reported
    with the last save's statistics) once."""
    stats = ck._m.last_save()  # TorchCheckpointer's CheckpointManager
    w = stats and stats.get("warning")
    if w and w != said:
        print(f"warning: {w}", flush=True)
        return w
    return said


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--save-path", required=True)
    ap.add_argument("--load-path")
    ap.add_argument("--save-interval", type=int, default=10)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    return ap.parse_args()


def main():
    args = parse()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    comm = None
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        comm = shardsafe.dist.TorchComm()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.manual_seed(SEED + rank)
    np.random.seed(SEED + rank)
    random.seed(SEED + rank)

    gen = torch.Generator().manual_seed(SEED)
    xs = torch.randn(N_SAMPLES, 8, generator=gen)
    ys = torch.randn(N_SAMPLES, 4, generator=gen)
    torch.manual_seed(SEED)  # the same initial weights on every rank
    model = Net()
    torch.manual_seed(SEED + rank)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = 3

    def lr_at(s):
        if s < warmup:
            return (s + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, args.steps - warmup))))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)

    config = {"save_path": args.save_path, "save_interleaved_steps": args.save_interval,
              "remove_redundancy": True}
    if args.load_path:
        config["load_path"] = args.load_path
    for kv in args.set:
        k, _, v = kv.partition("=")
        config[k] = v
    ck = TorchCheckpointer(model, opt, sched, config=config, comm=comm)
    progress, res = ck.load({"global_batch_size": GLOBAL_BATCH})
    pos = ck.extra or {"epoch": 0, "index": 0}
    if res["loaded"]:
        print(f"loaded step={res['step']} digest={digest(model, opt)}", flush=True)
    said = None

    per = GLOBAL_BATCH // world
    while progress["global_step"] < args.steps:
        order = np.random.RandomState(SEED + pos["epoch"]).permutation(N_SAMPLES)
        idx = order[pos["index"] + rank * per:pos["index"] + (rank + 1) * per]
        scale = 0.01 * (1 + random.random())
        x = xs[idx] + torch.from_numpy(scale * np.random.randn(per, 8).astype(np.float32))
        loss = torch.nn.functional.mse_loss(model(x), ys[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            for p in model.parameters():
                if p.grad is not None:
                    torch.distributed.all_reduce(p.grad)
                    p.grad /= world
        opt.step()
        sched.step()
        pos["index"] += GLOBAL_BATCH
        if pos["index"] >= N_SAMPLES:
            pos = {"epoch": pos["epoch"] + 1, "index": 0}
        progress["global_step"] += 1
        progress["consumed_samples"] = progress.get("consumed_samples", 0) + GLOBAL_BATCH
        if ck.step(progress, extra=pos):
            print(f"saved global_step={progress['global_step']}", flush=True)
        said = warn_new(ck, said)
    ck.finish(progress, extra=pos)
    said = warn_new(ck, said)
    ck.close()
    if world > 1:
        torch.distributed.destroy_process_group()
    print(f"final_digest={digest(model, opt)}")
    print(f"global_step={progress['global_step']}", flush=True)


if __name__ == "__main__":
    main()
