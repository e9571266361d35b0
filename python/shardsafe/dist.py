"""shardsafe.dist: distributed checkpoints from Python.

    from shardsafe.dist import Shard, TorchComm, MPIComm

`Shard(tensor, global_shape, offsets)` is one rank's chunk of a global
tensor; pass it instead of a tensor to `CheckpointManager`.  `TorchComm()`
(over an initialised torch.distributed process group, gloo) and
`MPIComm()` (over an mpi4py communicator) carry the library's
collectives: the C library calls their methods back with the GIL held.
With async_save the manager asks the communicator for a channel of its
own (`for_async()`: a new gloo process group, a duplicated MPI
communicator), so that the library's background thread never issues
collectives on the training loop's group; a communicator without one
(`for_async()` returning None) saves synchronously, with a warning.
"""

from ._errors import InvalidArgumentError

__all__ = ["Shard", "TorchComm", "MPIComm", "PyComm"]


class Shard:
    """One rank's chunk of a global tensor: `tensor` (numpy array or CPU
    torch tensor, C-contiguous, writable) at `offsets` in a tensor of
    `global_shape`."""

    __slots__ = ("tensor", "global_shape", "offsets")

    def __init__(self, tensor, global_shape, offsets):
        self.tensor = tensor
        self.global_shape = tuple(int(d) for d in global_shape)
        self.offsets = tuple(int(o) for o in offsets)

    def check(self, name):
        """Raise InvalidArgumentError when the chunk does not fit."""
        shape = tuple(self.tensor.shape)
        if len(self.global_shape) != len(shape) or len(self.offsets) != len(shape):
            raise InvalidArgumentError(
                f"shard '{name}': shape {list(shape)}, global_shape {list(self.global_shape)} "
                f"and offsets {list(self.offsets)} must have the same number of dimensions")
        for d, (n, g, o) in enumerate(zip(shape, self.global_shape, self.offsets)):
            if o < 0 or g < 0 or o + n > g:
                raise InvalidArgumentError(
                    f"shard '{name}' does not fit its global shape: dimension {d} covers "
                    f"[{o}, {o + n}) of {g} (shape {list(shape)}, offsets {list(self.offsets)}, "
                    f"global_shape {list(self.global_shape)})")

    @classmethod
    def from_sharded_tensor(cls, name, st):
        """This rank's part of a torch ShardedTensor (any object with
        local_shards() and metadata().size, as torch.distributed._shard's):
        exactly one local shard per rank.  (Debian 12's torch 1.13 cannot
        import that module under Python 3.11 -- a dataclass error -- so the
        class is taken by its interface, not imported.)"""
        shards = list(st.local_shards())
        if len(shards) != 1:
            raise InvalidArgumentError(
                f"ShardedTensor '{name}': this rank holds {len(shards)} local shards; a rank "
                f"saves exactly one chunk of a tensor (one Shard per rank)")
        s = shards[0]
        return cls(s.tensor, tuple(st.metadata().size), tuple(s.metadata.shard_offsets))

    @staticmethod
    def is_sharded_tensor(obj):
        return callable(getattr(obj, "local_shards", None)) and callable(
            getattr(obj, "metadata", None))

    def __repr__(self):
        return (f"Shard(shape={list(self.tensor.shape)}, global_shape={list(self.global_shape)}, "
                f"offsets={list(self.offsets)})")


class PyComm:
    """Base of the Python communicators: `rank`, `size` and the six
    collectives the library needs, on bytes.  Every rank makes the same
    calls in the same order."""

    rank = 0
    size = 1

    def for_async(self):
        """A communicator over a channel of its own, which the library's
        async-save thread may use while the training loop keeps using this
        one; None when there is none (saves then stay synchronous).
        Collective: every rank calls it, in the same order."""
        return None

    def barrier(self):
        raise NotImplementedError

    def broadcast(self, data, length, root):
        """root passes bytes, the others None; every rank returns the bytes."""
        raise NotImplementedError

    def allgather(self, data):
        """Every rank passes len(data) bytes (the same length everywhere);
        returns all ranks' bytes concatenated in rank order."""
        raise NotImplementedError

    def gatherv(self, data, lens, root):
        """Rank i passes lens[i] bytes; root returns them concatenated."""
        raise NotImplementedError

    def send(self, data, dest, tag):
        raise NotImplementedError

    def recv(self, length, src, tag):
        raise NotImplementedError


class TorchComm(PyComm):
    """Collectives over torch.distributed (CPU uint8 tensors, so the gloo
    backend), on `group` (None: the default group)."""

    def __init__(self, group=None):
        import torch
        import torch.distributed as dist
        if not dist.is_initialized():
            raise InvalidArgumentError("TorchComm: torch.distributed is not initialised "
                                       "(call torch.distributed.init_process_group first)")
        self._torch, self._dist, self._group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    def for_async(self):
        """A new gloo process group over all ranks (for the default group
        only: torch.distributed.new_group must be called by every process,
        which a sub-group's communicator cannot promise; None then)."""
        if self._group is not None:
            return None
        return TorchComm(self._dist.new_group(backend="gloo"))

    def _t(self, data):
        return self._torch.frombuffer(bytearray(data), dtype=self._torch.uint8)

    def _empty(self, n):
        return self._torch.empty(n, dtype=self._torch.uint8)

    def _global(self, r):
        if self._group is None:
            return r
        return self._dist.distributed_c10d._get_global_rank(self._group, r)

    def barrier(self):
        self._dist.barrier(group=self._group)

    def broadcast(self, data, length, root):
        if length == 0:
            return b""
        t = self._t(data) if self.rank == root else self._empty(length)
        self._dist.broadcast(t, self._global(root), group=self._group)
        return t.numpy().tobytes()

    def allgather(self, data):
        if len(data) == 0:
            return b""
        out = [self._empty(len(data)) for _ in range(self.size)]
        self._dist.all_gather(out, self._t(data), group=self._group)
        return b"".join(t.numpy().tobytes() for t in out)

    def gatherv(self, data, lens, root):
        width = max(lens)
        if width == 0:
            return b"" if self.rank == root else None
        mine = self._empty(width)
        mine[:len(data)] = self._t(data) if data else mine[:0]
        out = [self._empty(width) for _ in range(self.size)] if self.rank == root else None
        self._dist.gather(mine, out, dst=self._global(root), group=self._group)
        if self.rank != root:
            return None
        return b"".join(t[:n].numpy().tobytes() for t, n in zip(out, lens))

    def send(self, data, dest, tag):
        if data:
            self._dist.send(self._t(data), self._global(dest), group=self._group, tag=tag)

    def recv(self, length, src, tag):
        if length == 0:
            return b""
        t = self._empty(length)
        self._dist.recv(t, self._global(src), group=self._group, tag=tag)
        return t.numpy().tobytes()


class MPIComm(PyComm):
    """Collectives over an mpi4py communicator (default MPI.COMM_WORLD),
    with mpi4py's buffer (upper-case) methods."""

    def __init__(self, comm=None):
        from mpi4py import MPI
        self._MPI = MPI
        self._c = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self._c.Get_rank()
        self.size = self._c.Get_size()

    def for_async(self):
        """A duplicate of the communicator (MPI_Comm_dup), when MPI runs
        with MPI_THREAD_MULTIPLE (mpi4py asks for it by default); else None."""
        if self._MPI.Query_thread() < self._MPI.THREAD_MULTIPLE:
            return None
        return MPIComm(self._c.Dup())

    def barrier(self):
        self._c.Barrier()

    def broadcast(self, data, length, root):
        buf = bytearray(data) if self.rank == root else bytearray(length)
        if length:
            self._c.Bcast([buf, self._MPI.BYTE], root=root)
        return bytes(buf)

    def allgather(self, data):
        out = bytearray(len(data) * self.size)
        if data:
            self._c.Allgather([data, self._MPI.BYTE], [out, self._MPI.BYTE])
        return bytes(out)

    def gatherv(self, data, lens, root):
        total = sum(lens)
        out = bytearray(total) if self.rank == root else None
        displs = [sum(lens[:i]) for i in range(len(lens))]
        recv = [out, (list(lens), displs), self._MPI.BYTE] if self.rank == root else None
        self._c.Gatherv([data, self._MPI.BYTE], recv, root=root)
        return bytes(out) if self.rank == root else None

    def send(self, data, dest, tag):
        self._c.Send([data, self._MPI.BYTE], dest=dest, tag=tag)

    def recv(self, length, src, tag):
        buf = bytearray(length)
        self._c.Recv([buf, self._MPI.BYTE], source=src, tag=tag)
        return bytes(buf)
