"""SSVM with explicitly enumerated outputs (:class:`~ssvm_torch.data.examples.ExplicitData`): block i
has m_i candidate labelings given by psi_i(y) = phi(x_i, y_i) - phi(x_i, y) and losses L_i(y).

Small but complete: the oracle is exhaustive enumeration, the dual blocks are stored densely. Used
as the brute-force reference for solvers and for toy problems such as Appendix C of Osokin et al.
2016. Since only differences to the ground truth are given, phi(x_i, y) := -psi_i(y) (phi of the
ground truth is 0); a labeling is the index of a candidate.
"""
from __future__ import annotations

import torch

from ..data.examples import ExplicitData
from ..errors import check
from .base import StructuredModel


class ExplicitModel(StructuredModel):
    kind = "explicit"

    def __init__(self, d: int):
        check(int(d) >= 1, "d", "an int >= 1", d)
        self.d = int(d)

    @classmethod
    def for_data(cls, data: ExplicitData) -> "ExplicitModel":
        return cls(data.d)

    def check_data(self, data, field: str = "data") -> None:
        check(isinstance(data, ExplicitData), field, "an ExplicitData", type(data).__name__)
        check(data.d == self.d, f"{field}.psi", f"rows of length d = {self.d}", data.d)

    def scores(self, w, data, idx):
        """<w, phi(x_i, y)> = -<w, psi_i(y)> of every candidate, -inf for the padding: (B, m)."""
        vals = -(data.psi_table[idx] @ w.to(data.psi_table))
        return vals.masked_fill(torch.isinf(data.losses[idx]), float("-inf"))

    def augment(self, scores, data, idx):
        return scores + data.losses[idx]

    def decode(self, scores, data, idx):
        return scores.argmax(dim=-1)

    def oracle(self, w, data, idx, phi_gt=None):
        H, y = self.augment(self.scores(w, data, idx), data, idx).max(dim=-1)
        return y, H

    def phi(self, data, idx, labels):
        return -data.psi_table[idx, torch.as_tensor(labels, device=data.psi_table.device).reshape(-1)]

    def loss(self, data, idx, labels):
        return data.losses[idx, torch.as_tensor(labels, device=data.losses.device).reshape(-1)]

    def gt(self, data, i):
        return data.gt_index[i]

    def gt_batch(self, data, idx):
        return torch.as_tensor([data.gt_index[int(i)] for i in torch.as_tensor(idx).reshape(-1)],
                               device=data.psi_table.device)

    @staticmethod
    def key(labeling):
        return int(labeling)

    def metrics(self, w, data) -> dict:
        idx = torch.arange(data.n, device=data.psi_table.device)
        return {"error": float(self.loss(data, idx, self.predict(w, data, idx)).mean())}
