"""The compiled path of the dependency-tree block store (CPU float64): zero-copy numpy views of the store's
tensors and the hash table that holds the image of a difference of two points (the kernels are those of
:mod:`ssvm_torch.oracles.tree_kernels`). A mixin of :class:`~ssvm_torch.stores.tree.TreeDual`."""
from __future__ import annotations

import numpy as np

from ..oracles.tree_kernels import nb_apply, nb_block_oracle, nb_clear, nb_delta, nb_image, nb_support_nnz, nb_theta


class TreeHostPath:
    """The numba half of :class:`~ssvm_torch.stores.tree.TreeDual`."""

    def _bind_numpy(self):
        self._h = {name: t.numpy() for name, t in (("offsets", self.offsets), ("arc_off", self.arc_off),
                                                   ("ptr", self.ptr), ("ids", self.ids), ("tptr", self.tptr),
                                                   ("tids", self.tids), ("gold", self.gold), ("lgold", self.lgold),
                                                   ("w", self.w), ("M", self.M), ("costs", self.costs),
                                                   ("ell_i", self.ell_i), ("ell", self._ell),
                                                   ("gold_ok", self.gold_ok))}
        nmax = int(self.lengths.max())
        self._table(1 << 12)
        self._tick = 0
        self._theta_buf = np.empty(nmax * nmax)
        self._D = np.empty(nmax * nmax)
        self._S = np.empty((nmax + 1, nmax + 1))
        self._no_heads = np.zeros(1, dtype=np.int64)

    def _t0(self, i: int) -> int:
        """Block i's first token (its root) in the token design."""
        return int(self._h["offsets"][i]) + i

    def _block(self, i: int) -> tuple[int, int, int]:
        """(n_i, the block's first arc, its first word)."""
        h = self._h
        return int(h["offsets"][i + 1] - h["offsets"][i]), int(h["arc_off"][i]), int(h["offsets"][i])

    def _np_theta(self, i: int):
        n, base, _ = self._block(i)
        theta = self._theta_buf[:n * n]
        nb_theta(base, n, self._h["ptr"], self._h["ids"], self._t0(i), self._h["tptr"], self._h["tids"], self._h["w"],
                 theta)
        return theta

    def _np_oracle(self, i: int, theta):
        """(heads (n_i,), <S(y*), theta>, <G, theta>, wrong heads) of the loss-augmented tree of block i."""
        n, _, g0 = self._block(i)
        heads = np.empty(n, dtype=np.int64)
        score, gold_score, wrong = nb_block_oracle(theta, n, self._h["gold"], self._h["lgold"], g0,
                                                   float(self._h["costs"][i]),
                                                   self.model.projective, self.model.multiroot,
                                                   bool(self._h["gold_ok"][i]), self._S, heads)
        return heads, score, gold_score, wrong

    def _table(self, size: int):
        """The image's hash table (keys -1 = empty, values, the used slots), ``size`` a power of two."""
        self._keys = np.full(size, -1, dtype=np.int64)
        self._vals = np.zeros(size)
        self._used = np.empty(size, dtype=np.int64)
        self._nu = 0

    def _np_image(self, blocks) -> int:
        """The image v = sum over (i, P, Q) in ``blocks`` of sum_a D_a f_a into the hash table (the previous
        image cleared); returns the number of its features."""
        self._tick += 1
        nb_clear(self._keys, self._used, self._nu)
        self._nu = 0
        Ds = []
        need = 0
        for i, P, Q in blocks:
            n, base, _ = self._block(i)
            D = self._D[:n * n] if len(blocks) == 1 else np.empty(n * n)
            self._np_delta(i, P, Q, D)
            need += nb_support_nnz(D, n, base, self._h["ptr"], self._t0(i), self._h["tptr"])
            Ds.append((n, base, self._t0(i), D))
        if 2 * need > self._keys.shape[0]:
            self._table(1 << int(2 * need).bit_length())
        nu = 0
        for n, base, t0, D in Ds:
            nu = nb_image(D, n, base, self._h["ptr"], self._h["ids"], t0, self._h["tptr"], self._h["tids"], self._keys,
                          self._vals, self._used, nu)
        self._nu = nu
        return nu

    def _np_delta(self, i: int, P, Q, D):
        """D = S(P) - S(Q) over block i's arcs; a point is None (the block's marginals), a labeling (heads), or
        arc marginals (``.mu``: a point of the arborescence polytope, EG's moves)."""
        n, base, _ = self._block(i)
        if hasattr(P, "mu") or hasattr(Q, "mu"):
            def point(X, out):
                if X is None:
                    out[:] = self._h["M"][base:base + n * n]
                elif hasattr(X, "mu"):
                    out[:] = X.mu.numpy()
                else:
                    y, m = np.asarray(X, dtype=np.int64), np.arange(1, n + 1)
                    out[:] = 0.0
                    out[(m - 1) * n + np.where(y < m, y, y - 1)] = 1.0
            q = np.empty(n * n)
            point(P, D)
            point(Q, q)
            D -= q
            return
        nb_delta(P is None, self._no_heads if P is None else P, Q is None, self._no_heads if Q is None else Q,
                 self._h["M"], base, n, D)

    def _np_move_block(self, i: int, P, Q, gamma: float):
        """M_i += gamma (S(P) - S(Q)) (the image already in the scratch was built from the same points)."""
        n, base, _ = self._block(i)
        D = self._D[:n * n]
        self._np_delta(i, P, Q, D)
        self._h["M"][base:base + n * n] += gamma * D

    def _np_apply(self, nt: int, scale: float):
        """w += scale v (and the shadow, for weighted averaging) on the image's features."""
        shadow = self.shadow.numpy() if self.shadow is not None else self._vals
        nb_apply(self._keys, self._vals, self._used, nt, self._h["w"], scale, shadow,
                 scale * self.shadow_coef if self.shadow is not None else 0.0)

