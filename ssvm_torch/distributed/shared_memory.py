"""Asynchronous BCFW on one machine's shared memory (``--exchange shared``): the P processes of one
machine run BCFW steps on their own blocks against one w that all of them read and write, with no
collective between two gap checks (the lock-free "wild" scheme of PASSCoDe, Hsieh et al., ICML 2015,
for the SVM dual; the asynchronous BCFW of Wang et al., ICML 2016, for structured SVMs).

Rank k owns the round-robin shard of n_k blocks (:func:`~ssvm_torch.distributed.collectives.shard_of`)
in an ordinary store of the whole problem's units (objective n), whose w is a view of one shared
memory file mapped by every rank: each step reads the current w (the other ranks' steps included, a
step or so stale) for its oracle and its line search gamma = g_i / (lam ||w_i - w_s||^2) (eq. (6) of
Osokin et al. 2016), and adds its move to the shared w. Two ranks adding to one coordinate at the same
instant can lose one of the additions (no locks), so the shared w drifts from w(alpha) = sum_i w_i;
each rank also adds its moves to a mirror row of its own in the same file, which nobody else writes,
so sum_k mirror_k = w(alpha) exactly (up to the rounding one process's w has too, cleared by the
recomputation every ``recompute_every`` passes); with ``SSVM_SHARED_MIRROR=rebuild`` the moves go to w alone
and each rank rebuilds its mirror from its blocks at every check instead. At every gap check the ranks
stop, w is set to the mirrors' sum (each rank sums a share of the coordinates and copies it into a snapshot
row of the same file, which nobody writes between checks) that the records, the best point and model.pt read, and the
exact gap pass runs as the rounds exchange's: each rank's blocks at that w, gathered. Gaps, duals and
model.pt are therefore exact; the trajectory between checks depends on the timing of the ranks (two runs
differ), as with any asynchronous solver.
One process runs plain BCFW, step for step (its mirror receives the same additions as w). The stores
that can share their w (``shares_w``: the chain store without edge features and the dependency-tree
store, compiled kernels) run it.

The rounds exchange's loop (:class:`~ssvm_torch.distributed.rounds.RoundsSolver`) drives it: a round
sums the ranks' ell changes (one scalar all-reduce) and w needs no exchange.
"""
from __future__ import annotations

import os
import tempfile
import time
import uuid
import warnings

import numpy as np
import torch
import torch.distributed as dist

from ..errors import SSVMInputError, check, env_choice
from ..solvers.loop import Solver
from ..stores.base import BlockDual
from .affinity import pin_rank
from .collectives import Collectives, collective, shard_of, world
from .rounds import RoundsDual


PAGE_FLOATS = 512            # rows start on 4 KiB boundaries: no cache line holds two ranks' rows
ROUND_ENV = "SSVM_SHARED_ROUND"
MIRROR_ENV = "SSVM_SHARED_MIRROR"


def mirror_choice() -> str:
    """How each rank keeps its mirror (``SSVM_SHARED_MIRROR``): ``steps`` (the default: every move also added to
    it) or ``rebuild`` (no second write per move; rebuilt from the rank's blocks at every check, the
    store's ``recompute(out=)``)."""
    return env_choice(MIRROR_ENV, ("steps", "rebuild"), "steps")


def shares_rounds() -> bool:
    """Whether the ranks share each round's steps (``SSVM_SHARED_ROUND``: ``shared``, the default, or ``fixed``,
    every rank its own share, the exchange before round sharing, kept for side-by-side measurement)."""
    return env_choice(ROUND_ENV, ("shared", "fixed"), "shared") == "shared"


def _reserve(nbytes: int) -> tuple[str, str]:
    """(path, "") of a new file of ``nbytes`` zeros reserved in shared memory (``/dev/shm``), else in the
    temporary directory; ("", why) when neither has the room. The space is allocated now
    (posix_fallocate), so touching a page later cannot fail (a too-small /dev/shm, e.g. a container's
    64 MB default, would otherwise kill the run with SIGBUS mid-training)."""
    tried = []
    for root in ("/dev/shm", tempfile.gettempdir()):
        if not os.path.isdir(root):
            continue
        path = os.path.join(root, f"ssvm_torch_shared_{uuid.uuid4().hex}")
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.posix_fallocate(fd, 0, nbytes)
            finally:
                os.close(fd)
            return path, ""
        except OSError as e:
            tried.append(f"{root}: {e.strerror or e}")
            if os.path.exists(path):
                os.unlink(path)
    return "", (f"exchange: 'shared' needs {nbytes / 1e6:.1f} MB of shared memory (w, its snapshot and one mirror "
                f"per rank), which could not be reserved ({'; '.join(tried)}); give the machine more (a container: "
                "--shm-size) or use --exchange columns / rounds")


def _shared_rows(rows: int, d: int) -> torch.Tensor:
    """A (rows, d) float64 tensor in a file of shared memory mapped by every rank of this machine:
    rank 0 reserves it, every rank maps it, rank 0 unlinks the name (the mappings stay; nothing is left
    behind whatever happens to the run)."""
    rank, size = world()
    stride = -(-d // PAGE_FLOATS) * PAGE_FLOATS
    made = list(_reserve(rows * stride * 8)) if rank == 0 else ["", ""]
    if size > 1:
        collective(dist.broadcast_object_list, made, src=0)
    path, why = made
    if why:
        raise SSVMInputError(why)
    ok = torch.tensor([1 if os.path.exists(path) else 0], dtype=torch.int64)
    if size > 1:
        collective(dist.all_reduce, ok, op=dist.ReduceOp.MIN)
    if not int(ok[0]):
        if rank == 0:
            os.unlink(path)
        raise SSVMInputError("exchange: 'shared' needs every rank on one machine (the ranks map one file of shared "
                             f"memory, {path}, which a rank could not open); across machines use --exchange rounds")
    array = np.memmap(path, dtype=np.float64, mode="r+", shape=(rows, stride))
    if size > 1:
        collective(dist.barrier)
    if rank == 0:
        os.unlink(path)
    return torch.from_numpy(array)[:, :d]


class SharedDual(RoundsDual):
    """This rank's shard in a store of the whole problem's units whose w is the machine's shared w (module
    docstring), presented as the store of all n blocks: the exact point (the mirrors' sum) at every gap
    check, the gap pass gathered, checkpoints as the rounds exchange writes them."""

    exchange = "shared"

    def __init__(self, local: BlockDual, n: int, cpus: list[int] | None = None):
        rank, size = world()
        self.cpus = cpus                           # the CPUs this rank was pinned to (affinity.py), None: not pinned
        check(local.shares_w and getattr(local, "kernels", None) == "numba", "exchange",
              "'shared' for the chain (without edge features) and dependency-tree stores with compiled kernels "
              "(CPU float64: ocr-small, ocr-large, conll2000 with features sha-pereira or rich, ud-ewt)",
              f"a {type(local).__name__}" + (f" with kernels {local.kernels!r}" if local.shares_w else ""))
        check(local.n == len(shard_of(n, size, rank)), "shard", f"{len(shard_of(n, size, rank))} blocks "
              f"(rank {rank} of {size})", local.n)
        check(local.N == n, "n_objective", f"the whole problem's n = {n}", local.N)
        self.local, self.rank, self.size = local, rank, size
        self.n = self.N = n
        self.lam, self.device = local.lam, local.device
        self.scale = 1.0                           # the local store is in the whole problem's units
        d = local.w.numel()
        self.coll = Collectives(rank, size, self.device, narrow_ints=d < 2 ** 31 and n < 2 ** 31)
        rows = _shared_rows(2 + size, d)
        # the exact point of the last check (_w, the snapshot) is one row for all ranks, each writing its share
        # of it: one copy of w a check on the machine, not one a rank (the 16-core profile in docs/distributed.md)
        self.shared, self._w, self.mirror = rows[0], rows[1], rows[2 + rank]
        self._mirrors = rows[2:]
        bounds = [d * k // size for k in range(size + 1)]
        self._mine = slice(bounds[rank], bounds[rank + 1])      # the coordinates this rank sums at a sync
        local.share_w(self.shared)
        # every rank's BCFW steps so far, each on a page of its own: a round ends when the machine's sum reaches
        # its target (round_draws), and _round_base is that sum at the round's start
        self._counts = _shared_rows(size, 1).numpy()[:, 0]
        self._round_base = self._round_mine = 0
        self.share_rounds = shares_rounds()
        self.rebuild_mirror = mirror_choice() == "rebuild"
        self._ell = 0.0
        self._timers()
        self.steps_exchanged = 0
        self.recompute()

    def profile(self) -> dict:
        return {**super().profile(), "cpus": self.cpus, "mirror": "rebuild" if self.rebuild_mirror else "steps"}

    def attach(self, local_solver: Solver) -> None:
        """Every move of the local solver also goes to this rank's mirror (the store's shadow vector,
        coefficient 1): built after the solver, which clears the shadow it does not use. With
        ``SSVM_SHARED_MIRROR=rebuild`` the moves go to w alone and each check rebuilds the mirror."""
        if not self.rebuild_mirror:
            self.local.shadow, self.local.shadow_coef = self.mirror, 1.0

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        if w is not self._w:
            raise SSVMInputError("set_point: the shared exchange's point is the sum of its blocks (it cannot be set "
                                 "to another w)")
        self._ell = float(ell)

    def round_draws(self, draws, planned: int | None, draw):
        """This rank's draws of a round whose steps the ranks share: every rank steps, ``draws`` first and then
        ``draw()``'s while the machine's steps fall short, until they reach P x ``planned`` this round. A
        round of fixed shares ended at its slowest rank, and every other rank waited for it in the
        round's all-reduce (the 16-core profile in docs/distributed.md). One process takes ``draws`` as
        given."""
        if self.size == 1 or planned is None or not self.share_rounds:
            return draws
        return self._shared_draws(iter(draws), self._round_base + self.size * planned, draw)

    def _shared_draws(self, draws, target: int, draw):
        counts, rank = self._counts, self.rank
        ahead = 0                               # steps before the next look at the sum (each look reads P pages)
        while True:
            if ahead <= 0:
                left = target - int(counts.sum())
                if left <= 0:
                    return
                ahead = max(1, left // (2 * self.size))   # half an equal share of what is left: a few steps over
            i = next(draws, None)
            counts[rank] += 1
            self._round_mine += 1
            ahead -= 1
            yield draw() if i is None else i

    def combine(self, ell_local_start: float) -> None:
        """A round's end: the ranks' ell changes and steps summed (w needs no exchange: every move is in the
        shared w)."""
        t = torch.tensor([float(self.local.ell) - ell_local_start, self._round_mine], dtype=torch.float64)
        if self.size > 1:
            t = self.coll.all_reduce(t)
        self._ell += float(t[0])
        self._round_base += int(t[1])
        self._round_mine = 0
        self.steps_exchanged += 1

    def _point_to_local(self, rebuilt: bool = False) -> None:
        """The exact point into the shared w and the snapshot: every rank stops (having rebuilt its mirror from
        its blocks first with ``SSVM_SHARED_MIRROR=rebuild``, unless ``rebuilt``), sums its share of the
        coordinates over the mirrors into both, and waits for the others before the gap pass reads w."""
        t0 = time.perf_counter()
        if self.rebuild_mirror and not rebuilt:
            self.local.recompute(out=self.mirror)
        if self.size > 1:
            self.sync_s += time.perf_counter() - t0
            self.barrier()
            t0 = time.perf_counter()
        mine = self._mine
        torch.sum(self._mirrors[:, mine], 0, out=self.shared[mine])
        self._w[mine].copy_(self.shared[mine])
        self.sync_s += time.perf_counter() - t0
        if self.size > 1:
            self.barrier()

    def recompute(self) -> None:
        """Each mirror exactly from its rank's blocks, ell likewise; then the exact point."""
        self.local.recompute(out=self.mirror)
        self._ell = self._summed(float(self.local.ell))
        self._point_to_local(rebuilt=True)

    def _restore_point(self, state: dict) -> None:
        """The exact point from the blocks just loaded (the local load's copy of w into the shared w is
        overwritten: recompute's all-reduce waits for every rank's load first)."""
        self.recompute()
        self._ell = float(state["ell"])


def shared_store(task, lam: float, device=None, dtype=torch.float64, kernels: str = "auto") -> SharedDual:
    """This rank's :class:`SharedDual`: the ordinary store of its round-robin shard of ``task`` in the
    whole problem's units."""
    from ..stores import make_store
    rank, size = world()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    check(local_world == size, "exchange", "'shared' with every rank on one machine (LOCAL_WORLD_SIZE = WORLD_SIZE); "
          "across machines use --exchange rounds", f"{local_world} of {size} ranks on this machine")
    # pinned before the store exists, so the pages its tensors first touch are the pinned CPU's memory's
    cpus, why_not = pin_rank(int(os.environ.get("LOCAL_RANK", rank)), size, torch.get_num_threads())
    if why_not and rank == 0:
        warnings.warn(f"SSVM_SHARED_PIN: the ranks are not pinned ({why_not})", stacklevel=2)
    shard = shard_of(task.n_train, size, rank)
    local = make_store(task.model, task.train.subset(shard), lam, device=device, dtype=dtype, kernels=kernels,
                       n_objective=task.n_train)
    return SharedDual(local, task.n_train, cpus)
