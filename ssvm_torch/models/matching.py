"""Word alignment as a bipartite matching with NULL (Taskar, Lacoste-Julien & Klein 2005), solved
exactly by an assignment problem (scipy's ``linear_sum_assignment``).

An example is an English sentence (m words) and a French one (n words) with edge features
X (m, n, Fe) and NULL features Ne (m, Fn), Nf (n, Fn). A labeling is a vector a (m,) with a_i = j
(English word i aligned to French word j) or -1 (NULL); at most one English word per French word
(one-to-one); French words no one aligns to are NULL. With Z = m + n,
    phi(x, a) = 1/Z [ sum_{i: a_i >= 0} X[i, a_i]  ;  sum_{i: a_i = -1} Ne[i]  ;  sum_{j unaligned} Nf[j] ].
Loss: edge Hamming distance to the target alignment a*, divided by Z:
    L(a) = 1/Z sum_{i, j} [a_i = j] xor [a*_i = j],
decomposable over edges, so loss augmentation adds (1 - 2 [a*_i = j]) / Z to the edge scores (and
the constant |a*| / Z). Gold alignments are not one-to-one (Sure/Probable links); the training
target a* is their best one-to-one projection (max-weight matching, weight 2 per Sure and 1 per
Probable link), for which L(a*) = 0. AER is computed against the original S/P sets.

Oracle: maximize over one-to-one partial matchings = a perfect assignment on the (m + n) x (n + m)
matrix [[S_edge, diag(S_nullE)], [diag(S_nullF), 0]] with -inf off the two diagonals (English i may
only take its own NULL column, French j only its own NULL row).
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from ..errors import check
from .dense import DecodingModel

PAD = -2


def best_one_to_one(m: int, n: int, sure: set, probable: set) -> np.ndarray:
    """Max-weight one-to-one subset of the gold links (2 per Sure, 1 per Probable-only); a (m,)."""
    W = np.zeros((m, n))
    for i, j in probable:
        W[i, j] = 1.0
    for i, j in sure:
        W[i, j] = 2.0
    a = np.full(m, -1, dtype=np.int64)
    r, c = linear_sum_assignment(W, maximize=True)
    keep = W[r, c] > 0
    a[r[keep]] = c[keep]
    return a


def assign(S_edge: np.ndarray, s_null_e: np.ndarray, s_null_f: np.ndarray) -> np.ndarray:
    """argmax over one-to-one alignments with NULL of sum of chosen edge / NULL scores; a (m,)."""
    m, n = S_edge.shape
    M = np.full((m + n, n + m), -np.inf)
    M[:m, :n] = S_edge
    M[np.arange(m), n + np.arange(m)] = s_null_e
    M[m + np.arange(n), np.arange(n)] = s_null_f
    M[m:, n:] = 0.0
    rows, cols = linear_sum_assignment(M, maximize=True)
    a = np.full(m, -1, dtype=np.int64)
    real = (rows < m) & (cols < n)
    a[rows[real]] = cols[real]
    return a


class MatchingModel(DecodingModel):
    def __init__(self, edge_features: list, null_e: list, null_f: list, targets: list, dtype=torch.float64,
                 device=None):
        self.n = len(edge_features)
        check(self.n >= 1 and len(null_e) == self.n and len(null_f) == self.n and len(targets) == self.n,
              "examples", "equally many edge features, NULL features and targets (>= 1)",
              (len(edge_features), len(null_e), len(null_f), len(targets)))
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.Fe, self.Fn = edge_features[0].shape[2], null_e[0].shape[1]
        self.X, self.Ne, self.Nf, self.A = [], [], [], []
        for k, (X, ne, nf, a) in enumerate(zip(edge_features, null_e, null_f, targets)):
            X = torch.as_tensor(X)
            m, n = X.shape[:2]
            check(X.dim() == 3 and X.shape[2] == self.Fe and m >= 1 and n >= 1, f"edge_features[{k}]",
                  f"an (m, n, {self.Fe}) tensor with m, n >= 1", tuple(X.shape))
            check(tuple(torch.as_tensor(ne).shape) == (m, self.Fn), f"null_e[{k}]", f"shape ({m}, {self.Fn})",
                  tuple(torch.as_tensor(ne).shape))
            check(tuple(torch.as_tensor(nf).shape) == (n, self.Fn), f"null_f[{k}]", f"shape ({n}, {self.Fn})",
                  tuple(torch.as_tensor(nf).shape))
            a = torch.as_tensor(a, dtype=torch.int64)
            check(a.shape == (m,) and bool((a >= -1).all() and (a < n).all()), f"targets[{k}]",
                  f"an (m,) = ({m},) vector with values in -1..{n - 1}", tuple(a.shape))
            used = a[a >= 0]
            check(torch.unique(used).numel() == used.numel(), f"targets[{k}]", "a one-to-one alignment",
                  "a French word aligned twice")
            for lst, t in ((self.X, X), (self.Ne, ne), (self.Nf, nf)):
                t = torch.as_tensor(t).to(self.device, dtype)
                check(bool(torch.isfinite(t).all()), f"features of example {k}", "finite values", "NaN or inf")
                lst.append(t)
            self.A.append(a.to(self.device))
        self.d = self.Fe + 2 * self.Fn
        self.phi_gt = torch.stack([self._phi_one(k, self.A[k]) for k in range(self.n)])

    # -- features and loss -----------------------------------------------------------------------
    def _phi_one(self, k: int, a: torch.Tensor) -> torch.Tensor:
        X, ne, nf = self.X[k], self.Ne[k], self.Nf[k]
        m, n = X.shape[:2]
        a = a[:m].to(self.device)
        on = a >= 0
        aligned_f = torch.zeros(n, dtype=torch.bool, device=self.device)
        aligned_f[a[on]] = True
        return torch.cat([X[on.nonzero().reshape(-1), a[on]].sum(0), ne[~on].sum(0), nf[~aligned_f].sum(0)]) / (m + n)

    def _rows(self, idx, labels):
        idx = torch.as_tensor(idx).reshape(-1).tolist()
        labels = torch.as_tensor(labels).reshape(len(idx), -1)
        return idx, labels

    def phi(self, idx, labels) -> torch.Tensor:
        idx, labels = self._rows(idx, labels)
        return torch.stack([self._phi_one(k, y) for k, y in zip(idx, labels)])

    def psi(self, idx, labels) -> torch.Tensor:
        idx, labels = self._rows(idx, labels)
        return self.phi_gt[idx] - self.phi(idx, labels)

    def _loss_one(self, k, a) -> float:
        m, n = self.X[k].shape[:2]
        a, t = a[:m].to(self.device), self.A[k]
        wrong = int(((a != t) & (a >= 0)).sum()) + int(((a != t) & (t >= 0)).sum())
        return wrong / (m + n)

    def loss(self, idx, labels) -> torch.Tensor:
        idx, labels = self._rows(idx, labels)
        return torch.tensor([self._loss_one(k, y) for k, y in zip(idx, labels)], dtype=self.dtype, device=self.device)

    def gt(self, i: int) -> torch.Tensor:
        return self.A[i].clone()

    @staticmethod
    def key(labeling):
        return tuple(int(v) for v in torch.as_tensor(labeling).reshape(-1) if int(v) != PAD)

    # -- decoding --------------------------------------------------------------------------------
    def scores(self, w, k: int, augment: bool = False):
        """Edge, NULL(e) and NULL(f) scores of example k at w (+ the loss augmentation)."""
        w = torch.as_tensor(w).to(self.device, self.dtype)
        check(w.shape == (self.d,), "w", f"shape ({self.d},)", tuple(w.shape))
        X = self.X[k]
        m, n = X.shape[:2]
        we, wne, wnf = w[:self.Fe], w[self.Fe:self.Fe + self.Fn], w[self.Fe + self.Fn:]
        S = X @ we / (m + n)
        if augment:
            gold = torch.zeros(m, n, dtype=self.dtype, device=self.device)
            t = self.A[k]
            on = t >= 0
            gold[on.nonzero().reshape(-1), t[on]] = 1.0
            S = S + (1.0 - 2.0 * gold) / (m + n)
        return S, self.Ne[k] @ wne / (m + n), self.Nf[k] @ wnf / (m + n)

    def decode(self, w, idx, augment: bool = False) -> torch.Tensor:
        """One assignment problem per example; (B, max m) padded with -2."""
        idx = torch.as_tensor(idx).reshape(-1).tolist()
        out = torch.full((len(idx), max(self.X[k].shape[0] for k in idx)), PAD, dtype=torch.int64)
        for r, k in enumerate(idx):
            S, se, sf = (t.detach().cpu().numpy() for t in self.scores(w, k, augment))
            a = assign(S, se, sf)
            out[r, :len(a)] = torch.from_numpy(a)
        return out.to(self.device)


    def links(self, w) -> list[set]:
        """Predicted alignment links {(i, j)} of every example (NULL omitted)."""
        pred = self.predict(w)
        return [{(i, int(j)) for i, j in enumerate(pred[k, :self.X[k].shape[0]].tolist()) if j >= 0}
                for k in range(self.n)]


    @classmethod
    def from_pairs(cls, pairs, dtype=torch.float64, device=None) -> "MatchingModel":
        """From featurized :class:`~ssvm_torch.alignment.SentencePair` objects, targets = the best
        one-to-one projection of their gold links."""
        targets = [best_one_to_one(len(p.e), len(p.f), p.sure, p.probable) for p in pairs]
        return cls([p.edge for p in pairs], [p.null_e for p in pairs], [p.null_f for p in pairs], targets,
                   dtype=dtype, device=device)
