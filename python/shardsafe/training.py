"""shardsafe.TorchCheckpointer: checkpoints of a PyTorch training loop.

    ck = TorchCheckpointer(model, optimizer, scheduler,
                           config={"save_path": "/ckpt", "save_interleaved_steps": 100},
                           comm=None)                 # or shardsafe.dist.TorchComm()
    progress, result = ck.load({"global_batch_size": 32})
    extra = ck.extra                                  # restored data-loader position etc.
    while progress["global_step"] < total:
        ...; optimizer.step(); scheduler.step()
        progress["global_step"] += 1
        ck.step(progress, extra={"epoch": e, "index": i})
    ck.finish(progress, extra=...)
    ck.close()

What is saved, over CheckpointManager (the library's shs_manager):
- model.state_dict() tensors as "model.<name>" (in place: the manager
  reads and loads the parameters' own memory);
- optimizer state tensors under the parameters' names,
  "optimizer.state.<param name>.<key>" (AdamW's `step` is a 0-d tensor),
  so they reshard with the model; parameters with no state (no gradient
  yet) have none after loading either;
- the JSON blob "optimizer": param_groups (parameters by name) and the
  state keys of each parameter; "lr_scheduler": scheduler.state_dict();
  "train_state": the caller's `extra` (JSON);
- the rank-local blob "rng": torch, numpy and Python `random` states.

`shard` (optional) maps (name, tensor) -> Shard or tensor: a parameter's
chunk of this rank; its optimizer tensors of the same shape get the same
global shape and offsets.  Without it every tensor is whole on every rank
(replicated: set remove_redundancy to write each once).

Objects that are neither tensors nor JSON-able raise InvalidArgumentError
naming their key path.
"""

import json
import random

from ._errors import InvalidArgumentError
from .dist import Shard
from .manager import CheckpointManager, _agree

__all__ = ["TorchCheckpointer"]


def _jsonable(obj, where):
    """obj as JSON-able data, or InvalidArgumentError naming `where`."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise InvalidArgumentError(f"{where}: key {k!r} is neither a str nor an int")
            out[str(k)] = _jsonable(v, f"{where}.{k}")
        return out
    raise InvalidArgumentError(
        f"{where}: a {type(obj).__module__}.{type(obj).__qualname__} is neither a tensor nor "
        "JSON-able (bool, int, float, str, None, list, dict)")


def _dumps(obj, where):
    return json.dumps(_jsonable(obj, where), sort_keys=True).encode()


class TorchCheckpointer:
    def __init__(self, model, optimizer=None, scheduler=None, config=None, yaml=None, comm=None,
                 shard=None, defer_snapshot=False):
        import torch
        self.defer_snapshot = bool(defer_snapshot)
        self._torch = torch
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.config, self.yaml, self.comm, self.shard = dict(config or {}), yaml, comm, shard
        self.extra = None
        self._m = None
        self._key = None
        self._names = {}
        for name, p in model.named_parameters():
            self._names.setdefault(id(p), name)
        if optimizer is not None:
            for g in optimizer.param_groups:
                for p in g["params"]:
                    if id(p) not in self._names:
                        raise InvalidArgumentError(
                            "the optimizer has a parameter that is not one of the model's "
                            f"(shape {list(p.shape)}): state is saved under parameter names")

    # ---- flattening ----
    def _wrap(self, name, t, like=None):
        if like is not None and isinstance(like, Shard):
            return Shard(t, like.global_shape, like.offsets)
        return self.shard(name, t) if self.shard else t

    def _flatten(self):
        torch = self._torch
        model, optim, shards = {}, {}, {}
        for k, v in self.model.state_dict(keep_vars=False).items():
            if not isinstance(v, torch.Tensor):
                raise InvalidArgumentError(f"model.{k}: not a tensor")
            shards[k] = model["model." + k] = self._wrap("model." + k, v)
        layout = {"param_groups": [], "state": {}}
        if self.optimizer is not None:
            for g in self.optimizer.param_groups:
                pg = {k: v for k, v in g.items() if k != "params"}
                pg["params"] = [self._names[id(p)] for p in g["params"]]
                layout["param_groups"].append(_jsonable(pg, "optimizer.param_groups"))
                for p in g["params"]:
                    st = self.optimizer.state.get(p)
                    if not st:
                        continue  # no gradient yet: no state
                    pname = self._names[id(p)]
                    entry = layout["state"][pname] = {}
                    for k, v in st.items():
                        where = f"optimizer.state.{pname}.{k}"
                        if isinstance(v, torch.Tensor):
                            same = tuple(v.shape) == tuple(p.shape)
                            optim[where] = self._wrap(where, v, shards.get(pname) if same else None)
                            entry[k] = {"tensor": True, "dtype": str(v.dtype).split(".")[-1],
                                        "shape": list(v.shape), "like_param": same}
                        else:
                            entry[k] = {"value": _jsonable(v, where)}
        return model, optim, layout

    def _registration_key(self, model, optim):
        def key(t):
            t = t.tensor if isinstance(t, Shard) else t
            return (t.data_ptr(), tuple(t.shape), str(t.dtype))
        return tuple((n, key(t)) for n, t in sorted({**model, **optim}.items()))

    def _ensure(self, model, optim):
        """(Re)create the manager when the set of tensors or their memory
        changed (the optimizer made its state); collectively."""
        key = self._registration_key(model, optim)
        change = key != self._key
        if self.comm is not None:
            got = self.comm.allgather(bytes([change]))
            change = any(got)
        if not change and self._m is not None:
            return
        if self._m is not None:
            self._m.close()
            self._m = None
        self._m = CheckpointManager(model, optim, config=self.config, yaml=self.yaml,
                                    comm=self.comm)
        self._key = key

    # ---- blobs ----
    def _blobs(self, layout, extra):
        import numpy as np
        torch = self._torch
        out = {"optimizer": _dumps(layout, "optimizer")}
        if self.scheduler is not None:
            out["lr_scheduler"] = _dumps(self.scheduler.state_dict(), "lr_scheduler")
        if extra is not None:
            out["train_state"] = _dumps(extra, "extra")
        npst = np.random.get_state()
        rng = {"torch": torch.get_rng_state().tolist(),
               "numpy": [npst[0], npst[1].tolist(), *npst[2:]],
               "python": _jsonable(random.getstate(), "random")}
        out["rng"] = json.dumps(rng).encode()
        return out

    def _prepare(self, extra):
        """Flatten the state and encode the blobs; with a communicator every
        rank learns whether one failed (all raise, none waits in a save)."""
        error = blobs = None
        try:
            model, optim, layout = self._flatten()
            blobs = self._blobs(layout, extra)
        except Exception as e:  # noqa: BLE001 - re-raised on every rank
            error = e
        if self.comm is not None:
            _agree(self.comm, error)
        elif error is not None:
            raise error
        self._ensure(model, optim)
        for name, data in blobs.items():
            self._m.set_blob(name, data)

    def step(self, progress, extra=None):
        """After each optimizer step: saves when due (True when it did).
        With defer_snapshot the save returns before the state is copied:
        call fence() before the next optimizer.step()."""
        self._prepare(extra)
        return self._m.step(progress, defer_snapshot=self.defer_snapshot)

    def save(self, progress, extra=None, defer_snapshot=None):
        """Save now; defer_snapshot (default: the constructor's) as in step."""
        self._prepare(extra)
        defer = self.defer_snapshot if defer_snapshot is None else defer_snapshot
        self._m.save(progress, defer_snapshot=defer)

    def fence(self):
        """Wait until the snapshot of the save in flight is taken: call it
        before changing the state (optimizer.step()) after a deferred save.
        Forward and backward only read the parameters and may run before."""
        if self._m is not None:
            self._m.fence()

    def wait(self):
        """Wait until the save in flight is committed (its error, if any)."""
        if self._m is not None:
            self._m.wait()

    def last_save(self):
        """Statistics of the last committed save (dict), or None."""
        return self._m.last_save() if self._m is not None else None

    def finish(self, progress, extra=None):
        self._prepare(extra)
        self._m.finish(progress)

    # ---- load ----
    def _saved_layout(self):
        """The optimizer layout of the checkpoint a load would pick
        (read through open_checkpoint), or None when there is none."""
        from . import open_checkpoint
        from ._errors import ShardsafeError
        for key in ("save_path", "load_path"):
            path = self.config.get(key)
            if not path:
                continue
            try:
                with open_checkpoint(path) as c:
                    if "optimizer" not in {b[0] for b in c.blobs()}:
                        return None
                    return json.loads(c.read_blob("optimizer", rank=0))
            except (ShardsafeError, OSError, KeyError):
                continue
        return None

    def _materialise(self, layout):
        """Create zero optimizer state of the saved structure, so loading
        has memory to fill in place."""
        torch = self._torch
        by_name = {n: p for n, p in self.model.named_parameters()}
        for pname, entry in layout.get("state", {}).items():
            p = by_name.get(pname)
            if p is None:
                continue
            st = self.optimizer.state[p]
            for k, spec in entry.items():
                if not spec.get("tensor"):
                    continue
                dtype = getattr(torch, spec["dtype"])
                st[k] = (torch.zeros_like(p, dtype=dtype) if spec["like_param"]
                         else torch.zeros(spec["shape"], dtype=dtype))

    def load(self, progress=None):
        """Resume per the config; returns (progress, result).  The restored
        `extra` is in self.extra (None when nothing was restored)."""
        if self.optimizer is not None:
            layout = self._saved_layout()
            if layout is not None:
                self.optimizer.state.clear()
                self._materialise(layout)
        model, optim, _ = self._flatten()
        self._ensure(model, optim)
        progress, res = self._m.load(progress)
        if res["loaded"]:
            self._restore_blobs(res)
        return progress, res

    def _global_blob(self, res, name):
        """A blob that is the same on every rank: this rank's when the
        rank-local state was restored, else rank 0's of the loaded step."""
        if res["rank_state_restored"]:
            return self._m.get_blob(name)
        from . import open_checkpoint
        with open_checkpoint(res["path"]) as c:
            return c.read_blob(name, rank=0) if name in {b[0] for b in c.blobs()} else None

    def _restore_blobs(self, res):
        import numpy as np
        torch = self._torch
        raw = self._global_blob(res, "optimizer")
        if self.optimizer is not None and raw is not None and res["optimizer_loaded"]:
            layout = json.loads(raw)
            by_name = {n: p for n, p in self.model.named_parameters()}
            for g, saved in zip(self.optimizer.param_groups, layout["param_groups"]):
                g.update({k: v for k, v in saved.items() if k != "params"})
            for pname, entry in layout["state"].items():
                st = self.optimizer.state[by_name[pname]]
                for k, spec in entry.items():
                    if "value" in spec:
                        st[k] = spec["value"]
        raw = self._global_blob(res, "lr_scheduler")
        if self.scheduler is not None and raw is not None:
            self.scheduler.load_state_dict(json.loads(raw))
        raw = self._global_blob(res, "train_state")
        self.extra = json.loads(raw) if raw is not None else None
        if res["rank_state_restored"]:
            rng = self._m.get_blob("rng")
            if rng is not None:
                rng = json.loads(rng)
                torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
                n = rng["numpy"]
                np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
                py = rng["python"]
                random.setstate((py[0], tuple(py[1]), py[2]))

    def close(self):
        if self._m is not None:
            self._m.close()
            self._m = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
