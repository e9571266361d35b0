"""shardsafe.CheckpointManager: the library's checkpoint manager
(shs_manager) for a single-process training loop in Python.

    m = CheckpointManager(model={"w": w}, optimizer={"exp_avg.w": m1},
                          config={"save_path": "/ckpt", "save_interleaved_steps": 100})
    progress, result = m.load({"global_batch_size": 32})   # resume, in place
    while progress["global_step"] < total:
        train_one_step()
        progress["global_step"] += 1
        m.set_blob("rng", rng_state_bytes)
        m.step(progress)                                     # saves when due
    m.finish(progress)
    m.close()

Configuration uses the C config field names (MindSpore Transformers' and
torchtitan's: save_path, save_interleaved_steps, save_max, keep_latest_k,
async_save, incremental, load_path, no_load_optim, ...; README.md
"Configuration fields"), given as a dict and/or the `checkpoint:` section
of a YAML file.  The registered arrays/tensors stay the caller's memory:
saves read them, loads write into them in place.
"""

from . import _C
from ._errors import InvalidArgumentError
from ._frameworks import framework
from .dist import Shard

__all__ = ["CheckpointManager"]

PROGRESS_KEYS = ("epoch_num", "step_num", "global_step", "loss_scale", "global_batch_size",
                 "consumed_samples", "ckpt_status")


def _config_text(key, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if value is None:
        return ""
    return str(value)


def _framework_of(t):
    mod = type(t).__module__
    return framework("pt" if mod.startswith("torch") else "np")


def _entry(name, kind, t, master_of):
    gshape = goff = None
    if not isinstance(t, Shard) and Shard.is_sharded_tensor(t):
        t = Shard.from_sharded_tensor(name, t)
    if isinstance(t, Shard):
        t.check(name)
        gshape, goff, t = t.global_shape, t.offsets, t.tensor
    fw = _framework_of(t)
    dname, shape, buf = fw.inplace_bytes(name, t)
    return (name, kind, dname, tuple(shape), buf, master_of, gshape, goff)


def _agree(comm, error):
    """Every rank learns whether one failed before the collective create
    (so no rank waits in a collective for a rank that raised)."""
    msg = b"" if error is None else str(error).encode()[:255]
    got = comm.allgather(bytes([error is not None]) + msg.ljust(255, b"\0"))
    for r in range(comm.size):
        chunk = got[r * 256:(r + 1) * 256]
        if chunk[0] and r != comm.rank:
            if error is not None:
                raise error
            why = chunk[1:].rstrip(b"\0").decode(errors="replace")
            raise InvalidArgumentError(f"rank {r} could not register its state: {why}")
    if error is not None:
        raise error


def _async_comm_of(comm):
    """The factory _C.Manager calls, on every rank, once the config is
    read: wants is 1 with async_save.  The ranks first agree on it (a rank
    that alone asked for a new channel would wait for the others forever)."""
    def make(wants):
        got = comm.allgather(bytes([wants]))
        if len(set(got)) > 1:
            on = [r for r in range(comm.size) if got[r]]
            raise InvalidArgumentError(f"async_save is on for ranks {on} only: every rank "
                                       f"must use the same checkpoint config")
        if not wants:
            return None
        ac = comm.for_async()
        return None if ac is None else _C.Comm(ac, ac.rank, ac.size)
    return make


class CheckpointManager:
    """shs_manager over caller-owned numpy arrays or CPU torch tensors.

    model, optimizer: dicts name -> array/tensor (C-contiguous, writable).
    master_of: dict optimizer name -> model name, for fp32 master copies
    refreshed from the model weights when loading with no_load_optim.
    config: dict of C config field names -> values (bool, int, str, list).
    yaml: a YAML file whose `checkpoint:` section is read first.
    A value may be a shardsafe.Shard (this rank's chunk of a global tensor).
    comm: None (one process) or a communicator (shardsafe.dist.TorchComm,
    MPIComm, or any PyComm): every rank creates and calls the manager
    collectively.  With async_save the manager runs its collectives on
    comm.for_async() (a channel of its own); a comm without one saves
    synchronously (RuntimeWarning).
    """

    def __init__(self, model, optimizer=None, config=None, yaml=None, master_of=None, comm=None):
        master_of = master_of or {}
        entries = []
        error = None
        try:
            for kind, group in ((0, model or {}), (1, optimizer or {})):
                if not isinstance(group, dict):
                    raise InvalidArgumentError("model and optimizer must be dicts of name -> tensor")
                for name, t in group.items():
                    entries.append(_entry(name, kind, t, master_of.get(name) if kind else None))
            items = [(k, _config_text(k, v)) for k, v in (config or {}).items()]
        except Exception as e:  # noqa: BLE001 - re-raised on every rank below
            error = e
        ccomm = async_comm = None
        if comm is not None:
            _agree(comm, error)
            ccomm = _C.Comm(comm, comm.rank, comm.size)
            async_comm = _async_comm_of(comm)
        elif error is not None:
            raise error
        self.comm = comm
        self._m = _C.Manager(items, yaml, entries, ccomm, async_comm)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @staticmethod
    def _progress(p):
        if p is None:
            return {}
        if not isinstance(p, dict):
            raise InvalidArgumentError("progress must be a dict")
        unknown = set(p) - set(PROGRESS_KEYS)
        if unknown:
            raise InvalidArgumentError(f"progress: unknown keys {sorted(unknown)}; "
                                       f"known: {', '.join(PROGRESS_KEYS)}")
        return p

    def load(self, progress=None):
        """Resume per the config (save_path, then load_path, then
        initial_load_path).  Returns (progress, result): the progress to
        continue from and what was loaded (result["loaded"], ["source"],
        ["step"], ["path"], ["message"], ...)."""
        return self._m.load(self._progress(progress))

    def step(self, progress, defer_snapshot=False):
        """After each optimizer step: saves when global_step is a multiple
        of save_interleaved_steps.  Returns True when a save started.
        defer_snapshot (async_save only): that save returns before the
        state is copied; call fence() before changing it."""
        if defer_snapshot:
            return self._m.call(1, self._progress(progress), 1 | 4)  # DEFER | IF_DUE
        return self._m.call(0, self._progress(progress))

    def save(self, progress, model_only=False, defer_snapshot=False):
        """Save now.  defer_snapshot (async_save only): return before the
        state is copied; call fence() before changing it."""
        flags = (2 if model_only else 0) | (1 if defer_snapshot else 0)
        self._m.call(1, self._progress(progress), flags)

    def finish(self, progress):
        """The final save (unless this step was just saved), then wait."""
        self._m.call(2, self._progress(progress))

    def wait(self):
        """Wait until the save in flight is committed (its error, if any)."""
        self._m.wait(False)

    def fence(self):
        """Wait until the snapshot of the save in flight was taken."""
        self._m.wait(True)

    def set_blob(self, name, data):
        """Set a blob saved with the next checkpoint (rng, dataloader...)."""
        self._m.set_blob(name, bytes(data))

    def get_blob(self, name):
        """A blob's bytes (set, or restored by load), or None."""
        return self._m.get_blob(name)

    def last_save(self):
        """Statistics of the last committed save (dict), or None."""
        return self._m.last_save()

    def close(self):
        """Wait for a save in flight, free the manager, release the save
        path's lock."""
        self._m.close()
