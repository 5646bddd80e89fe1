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
only take its own NULL column, French j only its own NULL row): :func:`~ssvm_torch.oracles.assignment.assign`.
Data: :class:`~ssvm_torch.data.examples.PairData`.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.examples import PairData
from ..devices import from_host, to_host
from ..errors import check
from ..oracles.assignment import assign
from .base import StructuredModel

PAD = -2


class MatchingModel(StructuredModel):
    """Data-free matching model over ``Fe`` edge and ``Fn`` NULL features; d = Fe + 2 Fn. Batched
    labelings are (B, max m) padded with -2; scores are a list of (S_edge, s_nullE, s_nullF)."""

    kind = "matching"

    def __init__(self, n_edge_features: int, n_null_features: int):
        check(int(n_edge_features) >= 1, "n_edge_features", "an int >= 1", n_edge_features)
        check(int(n_null_features) >= 1, "n_null_features", "an int >= 1", n_null_features)
        self.Fe, self.Fn = int(n_edge_features), int(n_null_features)
        self.d = self.Fe + 2 * self.Fn

    @classmethod
    def for_data(cls, data: PairData) -> "MatchingModel":
        return cls(data.Fe, data.Fn)

    def check_data(self, data, field: str = "data") -> None:
        check(isinstance(data, PairData), field, "a PairData", type(data).__name__)
        check((data.Fe, data.Fn) == (self.Fe, self.Fn), f"{field}.features",
              f"{self.Fe} edge and {self.Fn} NULL features", (data.Fe, data.Fn))

    # -- features and loss -----------------------------------------------------------------------
    def _phi_one(self, data: PairData, k: int, a: torch.Tensor) -> torch.Tensor:
        X, ne, nf = data.X[k], data.Ne[k], data.Nf[k]
        m, n = X.shape[:2]
        a = a[:m].to(data.device)
        on = a >= 0
        aligned_f = torch.zeros(n, dtype=torch.bool, device=data.device)
        aligned_f[a[on]] = True
        return torch.cat([X[on.nonzero().reshape(-1), a[on]].sum(0), ne[~on].sum(0), nf[~aligned_f].sum(0)]) / (m + n)

    @staticmethod
    def _rows(idx, labels):
        idx = torch.as_tensor(idx).reshape(-1).tolist()
        labels = torch.as_tensor(labels).reshape(len(idx), -1)
        return idx, labels

    def phi(self, data: PairData, idx, labels) -> torch.Tensor:
        idx, labels = self._rows(idx, labels)
        return torch.stack([self._phi_one(data, k, y) for k, y in zip(idx, labels)])

    @staticmethod
    def _loss_one(data: PairData, k, a) -> float:
        m, n = data.X[k].shape[:2]
        a, t = a[:m].to(data.device), data.A[k]
        wrong = int(((a != t) & (a >= 0)).sum()) + int(((a != t) & (t >= 0)).sum())
        return wrong / (m + n)

    def loss(self, data: PairData, idx, labels) -> torch.Tensor:
        idx, labels = self._rows(idx, labels)
        return torch.tensor([self._loss_one(data, k, y) for k, y in zip(idx, labels)], dtype=data.dtype,
                            device=data.device)

    def gt(self, data: PairData, i: int) -> torch.Tensor:
        return data.A[i].clone()

    def gt_batch(self, data: PairData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx).reshape(-1).tolist()
        out = torch.full((len(idx), max(data.X[k].shape[0] for k in idx)), PAD, dtype=torch.int64, device=data.device)
        for r, k in enumerate(idx):
            out[r, :data.A[k].shape[0]] = data.A[k]
        return out

    @staticmethod
    def key(labeling):
        flat = labeling.reshape(-1).tolist() if torch.is_tensor(labeling) else np.asarray(labeling).reshape(-1).tolist()
        return tuple(int(v) for v in flat if int(v) != PAD)

    # -- decoding --------------------------------------------------------------------------------
    def scores(self, w, data: PairData, idx) -> list:
        """Edge (m, n), NULL(e) (m,) and NULL(f) (n,) scores of every example of ``idx`` at w."""
        w = torch.as_tensor(w).to(data.device, data.dtype)
        check(w.shape == (self.d,), "w", f"shape ({self.d},)", tuple(w.shape))
        we, wne, wnf = w[:self.Fe], w[self.Fe:self.Fe + self.Fn], w[self.Fe + self.Fn:]
        out = []
        for k in torch.as_tensor(idx).reshape(-1).tolist():
            X = data.X[k]
            Z = X.shape[0] + X.shape[1]
            out.append((X @ we / Z, data.Ne[k] @ wne / Z, data.Nf[k] @ wnf / Z))
        return out

    def augment(self, scores, data: PairData, idx) -> list:
        """The edge Hamming loss decomposes over edges: + (1 - 2 [a*_i = j]) / Z on the edge scores."""
        out = []
        for (S, se, sf), k in zip(scores, torch.as_tensor(idx).reshape(-1).tolist()):
            m, n = S.shape
            gold = torch.zeros(m, n, dtype=S.dtype, device=S.device)
            t = data.A[k]
            on = t >= 0
            gold[on.nonzero().reshape(-1), t[on]] = 1.0
            out.append((S + (1.0 - 2.0 * gold) / (m + n), se, sf))
        return out

    def decode(self, scores, data: PairData, idx) -> torch.Tensor:
        """One assignment problem per example; (B, max m) padded with -2."""
        # one host transfer for the whole batch: the assignments run in scipy on the host
        host = to_host(torch.cat([torch.cat([S.reshape(-1), se, sf]) for S, se, sf in scores]))
        out = np.full((len(scores), max(S.shape[0] for S, _, _ in scores)), PAD, dtype=np.int64)
        start = 0
        for r, (S, _, _) in enumerate(scores):
            m, n = S.shape
            block = host[start:start + m * n + m + n]
            start += m * n + m + n
            a = assign(block[:m * n].reshape(m, n), block[m * n:m * n + m], block[m * n + m:])
            out[r, :len(a)] = a
        return from_host(out, data.device)

    def links(self, w, data: PairData) -> list[set]:
        """Predicted alignment links {(i, j)} of every example (NULL omitted)."""
        pred = self.predict(w, data)
        return [{(i, int(j)) for i, j in enumerate(pred[k, :data.X[k].shape[0]].tolist()) if j >= 0}
                for k in range(data.n)]

    def metrics(self, w, data: PairData) -> dict:
        """Mean loss of the prediction (the edge Hamming distance / Z); AER needs the gold S/P links
        and is computed by the task (:func:`~ssvm_torch.data.hansards.aer`)."""
        idx = torch.arange(data.n, device=data.device)
        return {"error": float(self.loss(data, idx, self.predict(w, data, idx)).mean())}
