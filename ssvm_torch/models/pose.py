"""Tree-structured pose estimation (pictorial structures; the LSP model of Osokin et al. 2016,
App. I.4, after Chen & Yuille 2014) with quadratic deformation terms.

Parts j = 0..J-1 on a tree (parents[j] < j, root 0), each at a cell y_j = (row, col) of a G x G grid.
    phi(x, y) = [ S_j(y_j) for every part  ;  for every edge (j, p = parents[j]):
                  (dx, -dx^2, dy, -dy^2) ],   dx = (col_j - col_p - mu_x,j) / s,  dy likewise on rows,
S_j the part's detector score map, mu_j the rest offset of part j from its parent (the mean offset
over the training figures: one cluster), s = ``scale`` grid cells. With the weights of -dx^2, -dy^2
kept >= 0 (box constraints, App. H) the deformation score is a concave quadratic, so every max-sum
message is a generalized distance transform (FH 2005): O(G^2) per message instead of O(G^4).

Loss (decomposable per joint, so loss augmentation only adds to the unaries):
    L(y) = 1/J sum_j [ max(|row_j - row*_j|, |col_j - col*_j|) > radius ],
the fraction of joints off by more than ``radius`` cells (radius 1 by default: the detector works at
stride 2, so one cell is 2 image pixels). Reported errors: ``error`` = mean joint error in grid cells
(Euclidean), ``pck`` = share of joints within ``radius`` (Chebyshev), ``loss`` = mean L.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.examples import PoseData
from ..errors import SSVMInputError, check
from ..oracles.distance_transform import dt1d, torch_dt1d, tree_max_sum
from .base import StructuredModel


class TreePoseModel(StructuredModel):
    """Data-free tree model: ``J`` parts on a tree (``parents``), rest offsets ``rest`` (J, 2) as
    (x, y), deformation ``scale`` and loss ``radius`` (see the module docstring). Data:
    :class:`~ssvm_torch.data.examples.PoseData`; labelings are (B, J, 2) cells."""

    kind = "pose"

    def __init__(self, parents, rest: torch.Tensor, scale: float = 4.0, radius: int = 1, pairwise: bool = True):
        parents = [int(p) for p in parents]
        J = len(parents)
        check(J >= 1 and parents[0] == -1 and all(0 <= parents[j] < j for j in range(1, J)),
              "parents", f"{J} ints with parents[0] = -1 and 0 <= parents[j] < j", parents)
        check(scale > 0, "scale", "a number > 0", scale)
        check(isinstance(radius, int) and radius >= 0, "radius", "an int >= 0", radius)
        self.rest = torch.as_tensor(rest, dtype=torch.float64)
        check(self.rest.shape == (J, 2), "rest", f"shape ({J}, 2)", tuple(self.rest.shape))
        self.parents, self.scale, self.radius, self.pairwise = parents, float(scale), radius, bool(pairwise)
        self.J = J
        self.d = J + (4 * (J - 1) if pairwise else 0)

    @classmethod
    def for_data(cls, data: PoseData, parents, scale: float = 4.0, radius: int = 1,
                 pairwise: bool = True) -> "TreePoseModel":
        """Rest offsets = the mean child - parent offset (x = col, y = row) over ``data``."""
        parents = [int(p) for p in parents]
        check(len(parents) == data.J, "parents", f"{data.J} parents (one per part of the data)", len(parents))
        check(parents[0] == -1 and all(0 <= parents[j] < j for j in range(1, data.J)),
              "parents", f"{data.J} ints with parents[0] = -1 and 0 <= parents[j] < j", parents)
        off = (data.Y[:, 1:] - data.Y[:, parents[1:]]).to(torch.float64)
        rest = torch.cat([torch.zeros(1, 2, dtype=torch.float64), off.mean(0).flip(-1).cpu()])
        return cls(parents, rest, scale, radius, pairwise)

    def check_data(self, data, field: str = "data") -> None:
        check(isinstance(data, PoseData), field, "a PoseData", type(data).__name__)
        check(data.J == self.J, f"{field}.scores", f"{self.J} part maps", data.J)

    def describe(self) -> dict:
        return {"kind": "TreePoseModel", "d": self.d, "unary": [0, self.J],
                "pairwise": [self.J, self.d] if self.pairwise else None, "parents": list(self.parents),
                "rest": self.rest.tolist(), "scale": self.scale, "radius": self.radius}

    @property
    def pairwise_index(self) -> torch.Tensor:
        """Coordinates of w holding the weights of -dx^2 and -dy^2 (kept >= 0)."""
        base = self.J + 4 * torch.arange(self.J - 1)
        return torch.stack([base + 1, base + 3], 1).reshape(-1)

    @staticmethod
    def _idx(data, idx):
        return torch.as_tensor(idx, device=data.S.device).reshape(-1)

    def phi(self, data: PoseData, idx, labels) -> torch.Tensor:
        idx = self._idx(data, idx)
        dev, dtype = data.S.device, data.S.dtype
        labels = torch.as_tensor(labels, device=dev).reshape(len(idx), self.J, 2)
        parts = torch.arange(self.J, device=dev)
        unary = data.S[idx[:, None], parts[None, :], labels[..., 0], labels[..., 1]]          # (B, J)
        if not self.pairwise:
            return unary
        rest = self.rest.to(dev, dtype)
        child, parent = labels[:, 1:].to(dtype), labels[:, self.parents[1:]].to(dtype)
        dx = (child[..., 1] - parent[..., 1] - rest[1:, 0]) / self.scale
        dy = (child[..., 0] - parent[..., 0] - rest[1:, 1]) / self.scale
        pair = torch.stack([dx, -dx * dx, dy, -dy * dy], -1)                                  # (B, J-1, 4)
        return torch.cat([unary, pair.reshape(len(idx), -1)], 1)

    def _far(self, data: PoseData, idx, labels) -> torch.Tensor:
        diff = (torch.as_tensor(labels, device=data.S.device).reshape(-1, self.J, 2) - data.Y[self._idx(data, idx)]).abs()
        return (diff.max(-1).values > self.radius).to(data.S.dtype)

    def loss(self, data: PoseData, idx, labels) -> torch.Tensor:
        return self._far(data, idx, labels).mean(1)

    def gt(self, data: PoseData, i: int) -> torch.Tensor:
        return data.Y[i].clone()

    def gt_batch(self, data: PoseData, idx) -> torch.Tensor:
        return data.Y[self._idx(data, idx)]

    @staticmethod
    def key(labeling):
        flat = labeling.reshape(-1).tolist() if torch.is_tensor(labeling) else np.asarray(labeling).reshape(-1).tolist()
        return tuple(int(v) for v in flat)

    def _w_parts(self, w, data: PoseData):
        w = torch.as_tensor(w).to(data.S.device, data.S.dtype)
        check(w.shape == (self.d,), "w", f"shape ({self.d},)", tuple(w.shape))
        w_pair = torch.zeros(self.J, 4, dtype=w.dtype, device=w.device)
        if self.pairwise:
            w_pair[1:] = w[self.J:].reshape(self.J - 1, 4)
            if bool((w_pair[:, [1, 3]] < 0).any()):
                raise SSVMInputError("w: the quadratic deformation weights must be >= 0 for the distance transform "
                                     f"(got min {float(w_pair[:, [1, 3]].min()):.3g}); train with the box constraint")
        return w[:self.J], w_pair

    def scores(self, w, data: PoseData, idx):
        """(unary maps (B, J, H, W) = w_j S_j, deformation weights (J, 4) per part, row 0 unused)."""
        idx = self._idx(data, idx)
        wu, w_pair = self._w_parts(w, data)
        return data.S[idx] * wu[None, :, None, None], w_pair

    def augment(self, scores, data: PoseData, idx):
        """The loss decomposes over joints: + 1/J where a cell is more than ``radius`` off."""
        unary, w_pair = scores
        dev = unary.device
        rows = torch.arange(data.H, device=dev)[:, None]
        cols = torch.arange(data.W, device=dev)[None, :]
        gt = data.Y[self._idx(data, idx)]
        cheb = torch.maximum((rows - gt[..., 0, None, None]).abs(), (cols - gt[..., 1, None, None]).abs())
        return unary + (cheb > self.radius).to(unary.dtype) / self.J, w_pair

    def decode(self, scores, data: PoseData, idx) -> torch.Tensor:
        """Max-sum on the tree with generalized distance transforms; (B, J, 2)."""
        unary, w_pair = scores
        dt = dt1d if self.compiled(unary) else torch_dt1d
        loc, _ = tree_max_sum(unary, self.parents, w_pair, self.rest.to(unary.device, unary.dtype), self.scale, dt)
        return loc

    def metrics(self, w, data: PoseData) -> dict:
        """Mean joint error in cells (Euclidean), PCK within ``radius`` and the mean loss."""
        idx = torch.arange(data.n, device=data.S.device)
        pred = self.predict(w, data, idx)
        dist = (pred - data.Y).to(data.S.dtype).norm(dim=-1)
        return {"error": float(dist.mean()), "pck": float(1.0 - self._far(data, idx, pred).mean()),
                "loss": float(self.loss(data, idx, pred).mean())}
