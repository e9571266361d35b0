#!/usr/bin/python3
"""torch.save of the training state of bench_ckpt.c, for section 3 (README.md).

    /usr/bin/python3 bench/bench_torch_ckpt.py DIR

Same tensors as bench_ckpt.c's make_state(): a model state dict of 48 F32
matrices [rows, 1024] (rows summing to 131,072: 512 MiB) + 16 small F32
vectors, the Adam moments exp_avg / exp_avg_sq of each in BF16 (2 x 256
MiB), and small lr_scheduler / dataloader / rng entries, saved as one
torch.save({"model", "optimizer", ...}) + os.fsync, best of 3, each from no
file and a clean page cache.  Interleaved in-process baseline: os.write of
the same tensor buffers to one file + fsync.  "@@ {json}" result lines,
mode "torch_ckpt".
"""
import json
import os
import resource
import statistics
import sys
import time

N_MODEL = 64
MODEL_ROWS = 131072
REPS = 3
KIND = ["attn.qkv.weight", "mlp.up.weight", "mlp.down.weight", "norm.weight"]
MODE = "torch_ckpt"


def result(key, value, unit, label):
    print("@@ " + json.dumps({"mode": MODE, "key": key, "value": value,
                              "unit": unit, "label": label}), flush=True)


def shapes():
    wsum = sum(1 + (i * 37) % 64 for i in range(N_MODEL) if i % 4 != 3)
    rows_left = MODEL_ROWS
    out = []
    for i in range(N_MODEL):
        name = f"model.layers.{i // 4}.{KIND[i % 4]}"
        if i % 4 == 3:
            shape = (64 * (i + 1),)
        else:
            w = 1 + (i * 37) % 64
            rows = rows_left if i == N_MODEL - 2 else MODEL_ROWS * w // wsum
            rows_left -= rows
            shape = (rows, 1024)
        out.append((name, shape))
    return out


def fresh(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.sync()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    import torch
    torch.manual_seed(0)
    model, optim = {}, {}
    for name, shape in shapes():
        model[name] = torch.rand(shape, dtype=torch.float32).add_(1.0)
        optim[name] = {
            "step": torch.tensor(300.0),
            "exp_avg": torch.rand(shape, dtype=torch.float32).mul_(0.01).to(torch.bfloat16),
            "exp_avg_sq": torch.rand(shape, dtype=torch.float32).mul_(0.01).to(torch.bfloat16),
        }
    ckpt = {
        "model": model,
        "optimizer": {"state": optim, "param_groups": [{"lr": 3e-4, "betas": (0.9, 0.95)}]},
        "lr_scheduler": {"last_epoch": 300, "base_lrs": [3e-4], "_last_lr": [2.9e-4]},
        "dataloader": {"epoch": 0, "consumed_samples": 9600, "shard": 3},
        "rng": bytes(5120),
        "train_state": {"global_step": 300},
    }
    bufs = list(model.values())
    for v in optim.values():
        bufs += [v["exp_avg"], v["exp_avg_sq"]]
    nbytes = sum(t.numel() * t.element_size() for t in bufs)
    result("state_bytes", nbytes, "B", "tensor bytes")
    print(f"torch {torch.__version__}: {len(bufs)} tensors, {nbytes} bytes", flush=True)
    p = os.path.join(d, "bench_torch_ckpt.pt")
    pb = os.path.join(d, "bench_torch_ckpt_baseline.bin")
    raw = [t.view(torch.uint8).numpy() if t.dtype == torch.bfloat16 else t.numpy() for t in bufs]

    def base():
        fd = os.open(pb, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for b in raw:
                mv = memoryview(b).cast("B")
                while len(mv):
                    mv = mv[os.write(fd, mv):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def save():
        with open(p, "wb") as f:
            torch.save(ckpt, f)
            f.flush()
            os.fsync(f.fileno())

    tb, ts = [], []
    for _ in range(REPS):
        fresh(pb)
        t0 = time.perf_counter()
        base()
        tb.append(time.perf_counter() - t0)
        fresh(pb)
        fresh(p)
        t0 = time.perf_counter()
        save()
        ts.append(time.perf_counter() - t0)
    fresh(p)
    for key, t, label in (("base_fsync", tb, "os.write of the same tensors + fsync"),
                          ("torch_save_fsync", ts, "torch.save(checkpoint dict) + fsync")):
        best = min(t)
        print(f"{MODE} {key:<18} best {best:.3f} s  {nbytes / best / 1e9:6.2f} GB/s "
              f"(median {statistics.median(t):.3f} s)  -- {label}", flush=True)
        result(key, nbytes / best / 1e9, "GB/s", label)
        result(key + "_s", best, "s", "best time")
        result(key + "_median_s", statistics.median(t), "s", "median time")
    mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"peak RSS (ru_maxrss): {mib:.1f} MiB", flush=True)
    result("peak_rss", mib, "MiB", "peak RSS of the process")


if __name__ == "__main__":
    main()
