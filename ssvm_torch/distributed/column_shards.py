"""Coordinate-sharded mini-batch BCFW for the chain store on torch.distributed (the ``columns``
exchange of ``ssvm-train`` under torchrun): every rank holds the (read-only) training set and the
compact block statistics of every block (Mu, Mt, ell_i: O(N K), :mod:`ssvm_torch.stores.chain`),
but keeps only its share of w's feature columns current (about 1/P of the stored feature
entries each, :func:`column_owners`), in a compact (F_r, K) array of its own (the kernels' layout,
:mod:`ssvm_torch.oracles.chain_column_kernels`); the first / last / transition weights (K^2 + 2K
numbers) are replicated. No rank ever builds or receives a whole
direction dw. One step of tau blocks (Wang et al., ICML 2016, with the exact line search of
:class:`~ssvm_torch.solvers.steps.MiniBatchStep`):

1. each rank scores the batch's positions with its columns only (partial unaries, 1/P of X W^T);
   rank r decodes a contiguous range of the batch's entries (about 1/P of its positions), so one
   all-to-all brings it the other ranks' partial unaries of its rows, which it sums;
2. each rank decodes its entries (loss-augmented Viterbi and the terms of the block gap, eq. (6) of
   Osokin et al. 2016) and one all-to-all of [labels, L(y*), dot] gives every rank every decoded
   labeling: the per-position statistics D_b = S(y*_b) - M_b, a few bytes per position instead of
   the positions' feature entries;
3. each rank builds its column share of dw = -sum_b A_b(D_b) / (lam n) in a scratch (every
   coordinate sums its entries in the order one process does, so the direction's values are one
   process's bits), measures ||dw_r||^2 there, and one scalar all-reduce gives ||dw||^2 for the line
   search (the block gaps came with step 2);
4. each rank moves its columns of w, the replicated first / last / transition weights and the
   replicated block statistics of all tau blocks.

The partial unaries are summed in another order than one process's walk over each position's
features, so the unaries (and rarely, through an argmax tie, a labeling) differ from one process's
in the last bits: the run follows one process's gap curve to within rounding, not bit for bit
(docs/distributed.md measures how far). w is whole on every rank only after :meth:`sync_w` (the
column shares broadcast by their ranks), which the exact gap pass (rank r then scores and decodes a
range of the blocks with the whole w), the objective values of a history record, recomputation and
checkpoints call: between two syncs w's emission columns are stale on every rank.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from .collectives import Collectives, world
from ..devices import to_host
from .rank_store import RankStore
from ..errors import SSVMInputError, check
from ..oracles.chain_column_kernels import (nb_apply_share, nb_balanced_owners, nb_blocks_gap_terms, nb_decode_rows,
                                           nb_move_blocks, nb_rows_unary, nb_share_direction, nb_tail_direction)
from ..stores.base import BatchCorners, GapPass
from ..stores.chain import ChainDual


def column_owners(fidx: np.ndarray, F: int, size: int) -> np.ndarray:
    """The rank that keeps each of the F feature columns (:func:`~ssvm_torch.oracles.chain_column_kernels.
    nb_balanced_owners`: about 1/P of the stored entries each; ties broken by column index)."""
    counts = np.bincount(fidx, minlength=F).astype(np.int64)
    return nb_balanced_owners(counts, np.argsort(-counts, kind="stable").astype(np.int64), size)


def column_csr(fptr: np.ndarray, fidx: np.ndarray, fval: np.ndarray, columns: np.ndarray, F: int):
    """The CSR rows restricted to the feature columns ``columns`` (sorted), their column numbers
    local to that share (column columns[c] is c)."""
    local = np.full(F, -1, dtype=np.int64)
    local[columns] = np.arange(len(columns))
    keep = local[fidx] >= 0
    kept = np.concatenate([[0], np.cumsum(keep)])
    return (kept[fptr].astype(fptr.dtype), np.ascontiguousarray(local[fidx[keep]].astype(fidx.dtype)),
            np.ascontiguousarray(fval[keep]))


def batch_rows(offsets: np.ndarray, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the positions of ``blocks`` concatenated in batch order, their starts (tau + 1,) in it)."""
    start = offsets[blocks]
    lengths = offsets[blocks + 1] - start
    starts = np.concatenate([[0], np.cumsum(lengths)])
    rows = np.repeat(start - starts[:-1], lengths) + np.arange(starts[-1])
    return rows.astype(np.int64), starts.astype(np.int64)


def w_tail(store: ChainDual) -> slice:
    """Where w's replicated chain weights lie: first (K), last (K), transitions (K, K), after the
    emission weights (an edge model's edge block follows them)."""
    K = store.model.K
    start = K * store.model.F
    return slice(start, start + 2 * K + K * K)


class ColumnShardedChain(RankStore):
    """One rank of the coordinate-sharded chain store (module docstring); ``local`` is a
    :class:`~ssvm_torch.stores.chain.ChainDual` of the whole training set with numba kernels (CPU,
    float64). Runs mini-batch BCFW (any batch size) and exact gap passes; one process (P = 1) runs
    the same kernels without collectives."""

    supports_averaging = False        # the averages read w at every step; here it is whole only at sync points
    exchange = "columns"
    store_type = ChainDual            # the local store this class shards (the edge store: column_shards_edges.py)

    def __init__(self, local: ChainDual):
        if type(local) is not self.store_type:
            raise SSVMInputError(f"exchange 'columns': {type(self).__name__} runs the {self.store_type.__name__} store, "
                                 f"got {local.description or type(local).__name__}")
        if local.partial:
            raise SSVMInputError("exchange 'columns': needs every training label observed (its kernels count the "
                                 "loss at every position); use --exchange gather or allreduce")
        if local.kernels != "numba":
            raise SSVMInputError("exchange 'columns': runs the numba kernels (CPU, float64 state, --kernels auto or "
                                 "numba); use --exchange gather or allreduce on other devices")
        rank, size = world()
        check(size <= local.model.F, "world_size", f"at most F = {local.model.F} ranks (one column each)", size)
        self.local, self.rank, self.size = local, rank, size
        self.n = self.N = local.n
        check(local.N == local.n, "n_objective", f"the whole training set's n = {local.n}", local.N)
        self.lam, self.device = local.lam, local.device
        self.coll = Collectives(rank, size, self.device, narrow_ints=True)
        fptr, fidx, fval = local.host[:3]
        F = local.model.F
        owner = column_owners(fidx, F, size)
        self.columns = [torch.from_numpy(np.flatnonzero(owner == q)) for q in range(size)]   # each rank's, sorted
        own = self.columns[rank]
        self.csr = column_csr(fptr, fidx, fval, own.numpy(), F)
        self._tw = local.tw.numpy()                            # the loss of one wrong position of each block
        K = local.model.K
        self.Wr = torch.empty(len(own), K, dtype=local.w.dtype)   # this rank's columns of w, compact (F_r, K)
        self._Wr = self.Wr.numpy()
        self._S = np.zeros((len(own), K))                      # this rank's share of dw, zero between steps
        self._mark = np.zeros(len(own), dtype=np.bool_)
        self._touched = np.empty(len(own), dtype=np.int64)
        self._pending = 0                                      # touched columns of a direction not yet applied
        self._load_share()
        self.shard_s = self.joint_s = 0.0                      # own decoding and gap terms / own share of dw
        self.steps_exchanged = 0

    # -- w whole on every rank ------------------------------------------------------------------
    def _columns_view(self) -> torch.Tensor:
        """w's emission weights as (F, K): row f holds column f's K weights (a view of w)."""
        return self.local.model.split(self.local.w)[0].T

    def _whole_columns(self) -> np.ndarray:
        """w's emission weights as a C-contiguous (F, K) array (a view when w stores them feature-major,
        else a copy); call after :meth:`sync_w`."""
        return np.ascontiguousarray(self._columns_view().numpy())

    def _load_share(self) -> None:
        """The compact share from w (after w was set or recomputed whole); w is whole and current."""
        self.Wr.copy_(self._columns_view()[self.columns[self.rank]])
        self._stale = False

    def _drop_pending(self) -> None:
        """Clear the scratch of a direction the line search did not take (gamma = 0)."""
        if self._pending:
            nb_apply_share(self._Wr, self._S, self._mark, self._touched, self._pending, 0.0)
            self._pending = 0

    def sync_w(self) -> None:
        """w whole and current on every rank: every rank's compact columns written into every rank's
        w (a collective: every rank calls it at the same point of the run); the replicated weights
        are current everywhere already."""
        self._drop_pending()
        if not self._stale:
            return
        Wf = self._columns_view()
        if self.size == 1:
            Wf[self.columns[0]] = self.Wr
        else:
            most = max(len(c) for c in self.columns)
            mine = torch.zeros(most, self.Wr.shape[1], dtype=self.Wr.dtype)
            mine[:len(self.Wr)] = self.Wr
            for q, part in enumerate(self.coll.all_gather(mine)):
                Wf[self.columns[q]] = part[:len(self.columns[q])]
        self._stale = False

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        self._drop_pending()
        self.local.set_point(w, ell)
        self._load_share()

    def primal(self, H: torch.Tensor) -> float:
        self.sync_w()
        return self.local.primal(H)

    def dual(self) -> float:
        self.sync_w()
        return self.local.dual()

    # -- the exchanges --------------------------------------------------------------------------
    def _ranges(self, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cut, at): rank q takes the entries cut[q]..cut[q+1] of a batch whose entry b has the rows
        starts[b]..starts[b+1] (contiguous, about 1/P of the rows each), i.e. the rows at[q]..at[q+1]."""
        m = len(starts) - 1
        cut = np.searchsorted(starts, np.arange(self.size + 1) * starts[-1] / self.size).astype(np.int64)
        cut[0], cut[-1] = 0, m
        cut = np.maximum.accumulate(cut)
        return cut, starts[cut]

    def _unaries(self, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The unaries X W^T of this rank's rows rows[at[r]:at[r+1]]: every rank scores every row
        with its own columns (the partial unaries, 1/P of the work), one all-to-all brings each
        rank the others' partial scores of its rows, summed in rank order."""
        W, K = self._Wr, self.local.model.K
        t0 = time.perf_counter()
        if self.size == 1:
            U = np.empty((len(rows), K))
            nb_rows_unary(rows, *self.csr, W, U)
            self.joint_s += time.perf_counter() - t0
            return U
        most = int(np.diff(at).max()) or 1
        parts = np.empty((self.size * most, K))         # rank q's rows padded to ``most``; padding is never read
        for q in range(self.size):
            nb_rows_unary(rows[at[q]:at[q + 1]], *self.csr, W, parts[q * most:q * most + at[q + 1] - at[q]])
        self.joint_s += time.perf_counter() - t0
        got = self.coll.all_to_all(torch.empty(self.size * most, K, dtype=torch.float64), torch.from_numpy(parts))
        r = self.rank
        return got.view(self.size, most, K)[:, :at[r + 1] - at[r]].sum(0).numpy()

    def _share_ranges(self, arrays: list) -> list:
        """Every rank's range of each (array, bounds) pair (rank q owns array[bounds[q]:bounds[q+1]],
        float64) in every rank's array: one all-to-all of the concatenated ranges."""
        r, P = self.rank, self.size
        sizes = [sum(int(b[q + 1] - b[q]) for _, b in arrays) for q in range(P)]
        own = np.concatenate([a[b[r]:b[r + 1]] for a, b in arrays])
        got = self.coll.all_to_all(torch.empty(sum(sizes), dtype=torch.float64), torch.from_numpy(np.tile(own, P)),
                                   sizes, [len(own)] * P)
        for q, seg in enumerate(torch.split(got, sizes)):
            seg, used = seg.numpy(), 0
            for a, b in arrays:
                n = int(b[q + 1] - b[q])
                a[b[q]:b[q + 1]] = seg[used:used + n]
                used += n
        return [a for a, _ in arrays]

    # -- mini-batch BCFW -------------------------------------------------------------------------
    def batch_corners(self, idx, with_direction: bool = True) -> BatchCorners:
        """Steps 1-3 of the module docstring: the tau blocks' corners, their gaps and this rank's
        share of the joint direction (kept in the scratch; ``dw`` is None, ``sqnorm`` the joint
        ||dw||^2)."""
        self._drop_pending()
        L = self.local
        h = L.host
        off, Mu, Mt = h.offsets, h.Mu, h.Mt
        blocks = np.ascontiguousarray(to_host(torch.as_tensor(idx)).reshape(-1), dtype=np.int64)
        tau = len(blocks)
        rows, starts = batch_rows(off, blocks)
        npos = len(rows)
        # 1-2: rank q decodes the entries [cut[q], cut[q+1]) (contiguous, about npos / P positions each)
        cut, at = self._ranges(starts)
        U = self._unaries(rows, at)
        t0 = time.perf_counter()
        r = self.rank
        mine = np.arange(cut[r], cut[r + 1], dtype=np.int64)
        labels, loss, dot = np.empty(npos), np.empty(tau), np.empty(tau)
        self._decode(mine, blocks, starts, at[r], U, labels, loss, dot)
        self.shard_s += time.perf_counter() - t0
        if self.size > 1:                                      # every rank's [labels, L(y*), dot] to every rank
            labels, loss, dot = self._share_ranges([(labels, at), (loss, cut), (dot, cut)])
        t0 = time.perf_counter()
        labels = labels.astype(np.int64)
        coef = -1.0 / (self.lam * self.N)
        n_cols, sq = nb_share_direction(rows, labels, Mu, coef, *self.csr, self._S, self._mark, self._touched)
        self._pending = n_cols                                 # 3. this rank's share of dw, in the scratch
        K = L.model.K
        tail = np.empty(2 * K + K * K)                        # the replicated first / last / transition part
        nb_tail_direction(blocks, starts, rows, labels, Mu, Mt, coef, tail)
        sq_replicated = float(tail @ tail) + self._replicated_direction(blocks, starts, labels, coef)
        self.joint_s += time.perf_counter() - t0
        if self.size > 1:
            sq = float(self.coll.all_reduce(torch.tensor([sq], dtype=torch.float64))[0])
        self.steps_exchanged += 1
        idx_t = torch.from_numpy(blocks)
        loss = torch.from_numpy(loss) / self.N
        ell_b = L.ell_i[idx_t]
        gaps = torch.from_numpy(dot) / self.N - ell_b + loss
        return BatchCorners(idx_t, loss, gaps, None, float((loss - ell_b).sum()),
                            moves=(blocks, starts, rows, labels, tail), sqnorm=sq + sq_replicated)

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        """Step 4: this rank's columns of w, the replicated weights and every block of the batch."""
        L = self.local
        blocks, starts, rows, labels, tail = corners.moves
        t0 = time.perf_counter()
        nb_apply_share(self._Wr, self._S, self._mark, self._touched, self._pending, gamma)
        self._pending = 0
        L.w[w_tail(L)].add_(torch.from_numpy(tail), alpha=gamma)
        self._replicated_move(blocks, starts, labels, gamma)
        nb_move_blocks(blocks, starts, rows, labels, L.host.Mu, L.host.Mt, gamma)     # in place: Mu, Mt
        idx = corners.idx
        L.ell_i.index_put_((idx,), gamma * (corners.loss - L.ell_i[idx]), accumulate=True)
        L.shift_ell(gamma * corners.dell)
        self.joint_s += time.perf_counter() - t0
        self._stale = True                                     # w's emission columns are behind the shares

    # -- what an edge model adds (column_shards_edges.py) ---------------------------------------
    def _decode(self, mine, blocks, starts, shift, U, labels, loss, dot) -> None:
        """Loss-augmented Viterbi of the batch entries ``mine`` and their block-gap terms."""
        h = self.local.host
        nb_decode_rows(mine, blocks, starts, shift, h.offsets, h.Y, U, h.first, h.last, h.trans, h.Mu, h.Mt, self._tw,
                       self.local.model.pen_host, labels, loss, dot)

    def _replicated_direction(self, blocks, starts, labels, coef: float) -> float:
        """The direction of replicated weights beyond the chain's tail (none here); returns its ||.||^2."""
        return 0.0

    def _replicated_move(self, blocks, starts, labels, gamma: float) -> None:
        """Move what :meth:`_replicated_direction` built (nothing here)."""

    def _gap_terms(self, cut: np.ndarray, at: np.ndarray, U: np.ndarray):
        """(aug, <M_i, theta_i>, ground-truth score, wrong positions) of this rank's blocks
        cut[r]..cut[r+1], whose unaries are U (their positions, in order)."""
        h, r = self.local.host, self.rank
        mine = np.arange(cut[r], cut[r + 1], dtype=np.int64)
        m = len(mine)
        aug, m_theta, gt, wrong = np.empty(m), np.empty(m), np.empty(m), np.empty(m)
        nb_blocks_gap_terms(mine, h.offsets[cut[r]:], at[r], h.offsets, h.Y, U, h.first, h.last, h.trans, h.Mu, h.Mt,
                            self._tw, self.local.model.pen_host, aug, m_theta, gt, wrong)
        return aug, m_theta, gt, wrong

    # -- exact gap pass and recomputation -------------------------------------------------------
    def gap_pass(self) -> GapPass:
        """The exact gap pass (eq. (6) for every block): w is made whole first (:meth:`sync_w`; the
        history record that follows the pass needs it anyway), then rank r scores and decodes a
        contiguous range of the blocks (about N / P positions) with the whole w -- no exchange of
        partial unaries, which would move N K numbers -- and their block gaps, H_i and L_i / n go to
        every rank."""
        self.sync_w()
        L = self.local
        h = L.host
        off = h.offsets
        cut, at = self._ranges(off)
        r = self.rank
        t0 = time.perf_counter()
        U = np.empty((int(at[r + 1] - at[r]), L.model.K))
        if self.size == 1:                                     # the share is all of w's columns
            nb_rows_unary(np.arange(at[0], at[1], dtype=np.int64), *self.csr, self._Wr, U)
        else:
            nb_rows_unary(np.arange(at[r], at[r + 1], dtype=np.int64), h.fptr, h.fidx, h.fval, self._whole_columns(), U)
        self.joint_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        aug, m_theta, gt, wrong = self._gap_terms(cut, at, U)
        gaps, H, loss = np.zeros(self.n), np.zeros(self.n), np.zeros(self.n)
        own = slice(cut[r], cut[r + 1])
        gaps[own] = (aug - m_theta) / self.N - L.ell_i.numpy()[own]
        H[own] = aug - gt
        loss[own] = wrong * self._tw[own] / self.N
        self.shard_s += time.perf_counter() - t0
        if self.size > 1:
            gaps, H, loss = self._share_ranges([(gaps, cut), (H, cut), (loss, cut)])
        return GapPass(labels=None, loss=torch.from_numpy(loss), H=torch.from_numpy(H),
                       block_gaps=torch.from_numpy(gaps))

    def recompute(self) -> None:
        """w and ell exactly from the (replicated) statistics, on every rank alike: w is whole after it."""
        self._drop_pending()
        self.local.recompute()
        self._load_share()

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The chain store's state (w gathered first: a collective; the statistics are replicated),
        tagged with the number of processes and the exchange."""
        self.sync_w()
        return {**self.local.state_dict(), "world_size": self.size, "exchange": self.exchange}

    def load_state_dict(self, state: dict) -> None:
        """A checkpoint of this exchange on the same number of processes, or of the chain store in
        one process (the same state) when this run has one process."""
        size, exchange = state.get("world_size", 1), state.get("exchange", "columns" if "Mu" in state else None)
        if size != self.size or exchange != self.exchange:
            raise SSVMInputError(f"checkpoint: written by {size} process(es) with exchange {exchange!r}, this run "
                                 f"has {self.size} with {self.exchange!r}; resume with the same number of processes "
                                 "and exchange")
        self._drop_pending()
        self.local.load_state_dict(state)
        self._load_share()

    def direction(self, parts: dict) -> torch.Tensor:
        raise SSVMInputError("direction: the coordinate-sharded store never builds a whole direction")
