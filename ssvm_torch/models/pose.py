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

import torch

from ..errors import SSVMInputError, check
from ..oracles.distance_transform import tree_max_sum
from .dense import DecodingModel


class TreePoseModel(DecodingModel):
    def __init__(self, scores: torch.Tensor, joints: torch.Tensor, parents, rest: torch.Tensor | None = None,
                 scale: float = 4.0, radius: int = 1, pairwise: bool = True, dtype=torch.float64, device=None):
        check(scores.dim() == 4 and scores.shape[2] >= 1 and scores.shape[3] >= 1, "scores", "an (n, J, H, W) tensor",
              tuple(scores.shape))
        n, J, H, W = scores.shape
        check(joints.shape == (n, J, 2), "joints", f"shape ({n}, {J}, 2)", tuple(joints.shape))
        check(bool(torch.isfinite(scores).all()), "scores", "finite values", "NaN or inf")
        check(bool((joints[..., 0] >= 0).all() and (joints[..., 0] < H).all() and (joints[..., 1] >= 0).all()
                   and (joints[..., 1] < W).all()), "joints", f"cells inside the {H} x {W} grid", "out of range")
        parents = [int(p) for p in parents]
        check(len(parents) == J and parents[0] == -1 and all(0 <= parents[j] < j for j in range(1, J)),
              "parents", f"{J} ints with parents[0] = -1 and 0 <= parents[j] < j", parents)
        check(scale > 0, "scale", "a number > 0", scale)
        check(isinstance(radius, int) and radius >= 0, "radius", "an int >= 0", radius)
        self.device = torch.device(device) if device is not None else scores.device
        self.dtype = dtype
        self.S = scores.to(self.device, dtype)
        self.Y = joints.to(self.device, torch.int64)
        self.parents, self.scale, self.radius, self.pairwise = parents, float(scale), radius, pairwise
        self.n, self.J, self.H, self.W = n, J, H, W
        if rest is None:            # mean child - parent offset (x = col, y = row)
            off = (self.Y[:, 1:] - self.Y[:, parents[1:]]).to(dtype)
            rest = torch.cat([torch.zeros(1, 2, dtype=dtype, device=self.device), off.mean(0).flip(-1)])
        self.rest = torch.as_tensor(rest, dtype=dtype, device=self.device)
        check(self.rest.shape == (J, 2), "rest", f"shape ({J}, 2)", tuple(self.rest.shape))
        self.d = J + (4 * (J - 1) if pairwise else 0)
        self.phi_gt = self.phi(torch.arange(n), self.Y)

    @property
    def pairwise_index(self) -> torch.Tensor:
        """Coordinates of w holding the weights of -dx^2 and -dy^2 (kept >= 0)."""
        base = self.J + 4 * torch.arange(self.J - 1)
        return torch.stack([base + 1, base + 3], 1).reshape(-1)

    def _idx(self, idx):
        return torch.as_tensor(idx, device=self.device).reshape(-1)

    def phi(self, idx, labels) -> torch.Tensor:
        idx = self._idx(idx)
        labels = torch.as_tensor(labels, device=self.device).reshape(len(idx), self.J, 2)
        parts = torch.arange(self.J, device=self.device)
        unary = self.S[idx[:, None], parts[None, :], labels[..., 0], labels[..., 1]]          # (B, J)
        if not self.pairwise:
            return unary
        child, parent = labels[:, 1:].to(self.dtype), labels[:, self.parents[1:]].to(self.dtype)
        dx = (child[..., 1] - parent[..., 1] - self.rest[1:, 0]) / self.scale
        dy = (child[..., 0] - parent[..., 0] - self.rest[1:, 1]) / self.scale
        pair = torch.stack([dx, -dx * dx, dy, -dy * dy], -1)                                  # (B, J-1, 4)
        return torch.cat([unary, pair.reshape(len(idx), -1)], 1)

    def psi(self, idx, labels) -> torch.Tensor:
        return self.phi_gt[self._idx(idx)] - self.phi(idx, labels)

    def _far(self, idx, labels) -> torch.Tensor:
        diff = (torch.as_tensor(labels, device=self.device).reshape(-1, self.J, 2) - self.Y[self._idx(idx)]).abs()
        return (diff.max(-1).values > self.radius).to(self.dtype)

    def loss(self, idx, labels) -> torch.Tensor:
        return self._far(idx, labels).mean(1)

    def gt(self, i: int) -> torch.Tensor:
        return self.Y[i].clone()

    @staticmethod
    def key(labeling):
        return tuple(int(v) for v in torch.as_tensor(labeling).reshape(-1))

    def _w_parts(self, w):
        w = torch.as_tensor(w).to(self.device, self.dtype)
        check(w.shape == (self.d,), "w", f"shape ({self.d},)", tuple(w.shape))
        w_pair = torch.zeros(self.J, 4, dtype=self.dtype, device=self.device)
        if self.pairwise:
            w_pair[1:] = w[self.J:].reshape(self.J - 1, 4)
            if bool((w_pair[:, [1, 3]] < 0).any()):
                raise SSVMInputError("w: the quadratic deformation weights must be >= 0 for the distance transform "
                                     f"(got min {float(w_pair[:, [1, 3]].min()):.3g}); train with the box constraint")
        return w[:self.J], w_pair

    def decode(self, w, idx, augment: bool = False) -> torch.Tensor:
        """argmax_y <w, phi(x_i, y)> (+ L_i(y) if ``augment``) by max-sum with distance transforms; (B, J, 2)."""
        idx = self._idx(idx)
        wu, w_pair = self._w_parts(w)
        unary = self.S[idx] * wu[None, :, None, None]
        if augment:
            rows = torch.arange(self.H, device=self.device)[:, None]
            cols = torch.arange(self.W, device=self.device)[None, :]
            gt = self.Y[idx]
            cheb = torch.maximum((rows - gt[..., 0, None, None]).abs(), (cols - gt[..., 1, None, None]).abs())
            unary = unary + (cheb > self.radius).to(self.dtype) / self.J
        loc, _ = tree_max_sum(unary, self.parents, w_pair, self.rest, self.scale)
        return loc


    def errors(self, w) -> dict:
        idx = torch.arange(self.n)
        pred = self.predict(w, idx)
        dist = (pred - self.Y).to(self.dtype).norm(dim=-1)
        return {"error": float(dist.mean()), "pck": float(1.0 - self._far(idx, pred).mean()),
                "loss": float(self.loss(idx, pred).mean())}
