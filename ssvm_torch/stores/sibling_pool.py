"""The sparse part marginals of the second-order tree store (:class:`~ssvm_torch.stores.sibling_tree.SiblingTreeDual`,
a mixin that reads its ``ades`` / ``gold`` / ``n``): one pool of (part key, value) entries, block i owning
``pkeys[pstart[i]:pstart[i] + pcap[i]]`` of which the first ``pcount[i]`` are used, sorted by key. A block that
outgrows its slot moves to the pool's end with twice the room (the pool doubles when full); the slot it leaves is
not reused, so the pool holds at most about twice the entries in use. Checkpoints keep the used entries only."""
from __future__ import annotations

import numpy as np
import torch

from ..errors import SSVMInputError, check
from .sibling_kernels import merge, tree_parts
from .state import check_like, state_ell


class PartPool:
    """Block i's sparse point M_i in a shared pool (module docstring)."""

    def _init_pool(self) -> None:
        """alpha_i = delta(y_i) at the start: M_i = the gold tree's parts (value 1), w_i = 0, ell_i = 0."""
        offsets = self.ades[0]
        lengths = np.diff(offsets)
        self.pcap = (4 * (lengths + 1)).astype(np.int64)
        self.pstart = np.concatenate([[0], np.cumsum(self.pcap)[:-1]]).astype(np.int64)
        self.pcount = np.zeros(self.n, dtype=np.int64)
        self.ptail = int(self.pcap.sum())
        self.pkeys = np.zeros(self.ptail, dtype=np.int64)
        self.pvals = np.zeros(self.ptail)
        for i in range(self.n):
            keys, k = self._tree(i, self.gold[offsets[i]:offsets[i + 1]])
            s = int(self.pstart[i])
            self.pkeys[s:s + k], self.pvals[s:s + k] = keys[:k], 1.0
            self.pcount[i] = k

    def _place(self, i: int, keys: np.ndarray, vals: np.ndarray, k: int) -> None:
        """Block i's point := the k entries (keys, vals), moving its slot to the pool's end if it is too small."""
        if k > self.pcap[i]:
            cap = 2 * k
            if self.ptail + cap > self.pkeys.shape[0]:
                size = max(2 * self.pkeys.shape[0], self.ptail + cap)
                self.pkeys = np.concatenate([self.pkeys, np.zeros(size - self.pkeys.shape[0], dtype=np.int64)])
                self.pvals = np.concatenate([self.pvals, np.zeros(size - self.pvals.shape[0])])
            self.pstart[i], self.pcap[i] = self.ptail, cap
            self.ptail += cap
        s = int(self.pstart[i])
        self.pkeys[s:s + k], self.pvals[s:s + k] = keys[:k], vals[:k]
        self.pcount[i] = k

    def _axpy(self, i: int, keys: np.ndarray, vals: np.ndarray, k: int, gamma: float) -> None:
        """M_i <- M_i + gamma D for a sparse D (keys, vals)[:k] over block i's parts."""
        cnt = int(self.pcount[i])
        ok, ov = np.empty(cnt + k, dtype=np.int64), np.empty(cnt + k)
        c = merge(self.pkeys, self.pvals, int(self.pstart[i]), cnt, keys, vals, 0, k, gamma, ok, ov)
        self._place(i, ok, ov, c)

    def _used_entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, vals) of every block's used entries, in block order."""
        take = np.concatenate([np.arange(s, s + c) for s, c in zip(self.pstart.tolist(), self.pcount.tolist())])
        return self.pkeys[take], self.pvals[take]

    def state_dict(self) -> dict:
        keys, vals = self._used_entries()
        return {"w": self.w.clone(), "ell_i": self.ell_i.clone(), "ell": self._ell.clone(), "lam": self.lam,
                "part_count": torch.from_numpy(self.pcount.copy()), "part_keys": torch.from_numpy(keys),
                "part_vals": torch.from_numpy(vals)}

    def _load_pool(self, state: dict) -> None:
        """Restore the blocks from ``state``, every field checked before anything is copied (stores/state.py)."""
        for key in ("w", "ell_i", "ell", "lam", "part_count", "part_keys", "part_vals"):
            if key not in state:
                raise SSVMInputError(f"state[{key!r}]: missing (a checkpoint of another structure? this store is "
                                     f"{type(self).__name__}, which keeps w, ell_i and the part marginals)")
        check_like("state['w']", state["w"], self.w)
        check_like("state['ell_i']", state["ell_i"], self.ell_i)
        check_like("state['part_count']", state["part_count"], torch.from_numpy(self.pcount), "entries per block")
        count = state["part_count"].numpy().astype(np.int64)
        keys, vals = state["part_keys"], state["part_vals"]
        total = int(count.sum()) if count.size else 0
        check(bool((count >= 0).all()) and isinstance(keys, torch.Tensor) and isinstance(vals, torch.Tensor)
              and tuple(keys.shape) == (total,) and tuple(vals.shape) == (total,), "state['part_keys']",
              f"{total} part keys and values (the sum of part_count)", tuple(getattr(keys, "shape", ())))
        keys, vals = keys.numpy().astype(np.int64), vals.numpy().astype(np.float64)
        block = np.repeat(np.arange(self.n), count)
        N1 = np.diff(self.ades[0])[block] + 1
        ok = (keys >= N1) & (keys < N1 * N1 + N1 ** 3) & np.isfinite(vals)
        same = block[1:] == block[:-1]
        if not bool(ok.all()) or bool((same & (keys[1:] <= keys[:-1])).any()):
            raise SSVMInputError("state['part_keys']: expected each block's part keys sorted, distinct and within its "
                                 "sentence's parts, with finite values (a damaged checkpoint, or another dataset's)")
        if float(state["lam"]) != self.lam:
            raise SSVMInputError(f"state['lam']: expected {self.lam} (this store's lam), got {state['lam']}")
        self.w.copy_(state["w"])
        self.ell_i.copy_(state["ell_i"])
        self._ell.fill_(state_ell(state))
        starts = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
        self.pcap = np.maximum(2 * count, 4 * (np.diff(self.ades[0]) + 1)).astype(np.int64)
        self.pstart = np.concatenate([[0], np.cumsum(self.pcap)[:-1]]).astype(np.int64)
        self.ptail = int(self.pcap.sum())
        self.pkeys, self.pvals = np.zeros(self.ptail, dtype=np.int64), np.zeros(self.ptail)
        self.pcount = np.zeros(self.n, dtype=np.int64)
        for i in range(self.n):
            self._place(i, keys[starts[i]:starts[i + 1]], vals[starts[i]:starts[i + 1]], int(count[i]))


__all__ = ["PartPool", "tree_parts"]
