"""The structured hinge of the tree-structured pose model (pictorial structures with quadratic
deformations, :mod:`ssvm_torch.models.pose`) as a differentiable torch function, so that a heat-map
network can be trained through the distance-transform oracle.

Scores of a placement y = (y_0..y_{J-1}) of the parts on an H x W grid:
    s(y) = sum_j U[j, y_j] + sum_{j >= 1} w_j . (dx, -dx^2, dy, -dy^2),
    dx = (col_j - col_p - rest_x,j) / scale,  dy likewise on rows,  p = parents[j],
with the quadratic weights w_j2, w_j4 >= 0 (a concave deformation score: every max-sum message is
a generalized distance transform, Felzenszwalb & Huttenlocher 2005). The hinge
    H_i = max_y [Delta(y, y_i) + s_i(y)] - s_i(y_i),
Delta = the share of joints more than ``radius`` cells off (Chebyshev), the pose model's loss.
y* comes from the batched tree max-sum (:func:`ssvm_torch.oracles.distance_transform.tree_max_sum`,
numba on CPU float64, torch elsewhere); H is rebuilt from differentiable gathers, so its gradient
is the subgradient: +1 at U[j, y*_j], -1 at U[j, y_i,j], and the displacement features' difference
for the deformation weights.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import check
from ..oracles.distance_transform import dt1d, torch_dt1d, tree_max_sum


def _check_tree(unary, parents, w_pair, rest, labels=None) -> None:
    check(torch.is_tensor(unary) and unary.dim() == 4 and unary.is_floating_point(), "unary",
          "a float tensor (B, J, H, W)", getattr(unary, "shape", type(unary)))
    B, J, H, W = unary.shape
    check(len(parents) == J, "parents", f"{J} parents (one per part map)", len(parents))
    check(torch.is_tensor(w_pair) and tuple(w_pair.shape) == (J, 4), "w_pair", f"a tensor of shape ({J}, 4)",
          getattr(w_pair, "shape", type(w_pair)))
    if not bool((w_pair[1:, [1, 3]] >= 0).all()):                    # the minimum is read only to report it
        check(False, "w_pair", "quadratic weights (columns 1 and 3) >= 0", float(w_pair[1:, [1, 3]].min()))
    check(torch.is_tensor(rest) and tuple(rest.shape) == (J, 2), "rest", f"a tensor of shape ({J}, 2)",
          getattr(rest, "shape", type(rest)))
    if labels is not None:
        check(torch.is_tensor(labels) and labels.shape == (B, J, 2) and not labels.is_floating_point(), "gt",
              f"an integer tensor of shape ({B}, {J}, 2)", getattr(labels, "shape", type(labels)))
        inside = (labels[..., 0] >= 0) & (labels[..., 0] < H) & (labels[..., 1] >= 0) & (labels[..., 1] < W)
        check(bool(inside.all()), "gt", f"cells inside the {H} x {W} grid", "a cell outside")


def tree_score(unary, labels, w_pair, parents, rest, scale: float) -> torch.Tensor:
    """s_i(y) of placements ``labels`` (B, J, 2) as (row, col): (B,), differentiable w.r.t.
    ``unary`` and ``w_pair``."""
    B, J, H, W = unary.shape
    b = torch.arange(B, device=unary.device)[:, None]
    j = torch.arange(J, device=unary.device)[None, :]
    s = unary[b, j, labels[..., 0], labels[..., 1]].sum(1)
    if J == 1:
        return s
    par = list(parents[1:])
    child, parent = labels[:, 1:].to(unary.dtype), labels[:, par].to(unary.dtype)
    rest = rest.to(unary)
    dx = (child[..., 1] - parent[..., 1] - rest[1:, 0]) / scale
    dy = (child[..., 0] - parent[..., 0] - rest[1:, 1]) / scale
    feats = torch.stack([dx, -dx * dx, dy, -dy * dy], -1)                     # (B, J-1, 4)
    return s + (feats * w_pair[1:]).sum((1, 2))


def far_joints(labels, gt, radius: int) -> torch.Tensor:
    """[joint more than ``radius`` cells off (Chebyshev)]: (B, J) bool."""
    return (labels - gt).abs().max(-1).values > radius


def tree_decode(unary, w_pair, parents, rest, scale: float, gt=None, radius: int = 1) -> torch.Tensor:
    """Max-scoring placements (B, J, 2); loss-augmented against ``gt`` if given. No gradient."""
    _check_tree(unary, parents, w_pair, rest, gt)
    B, J, H, W = unary.shape
    with torch.no_grad():
        U = unary.detach()
        if gt is not None:
            rows = torch.arange(H, device=U.device)[:, None]
            cols = torch.arange(W, device=U.device)[None, :]
            cheb = torch.maximum((rows - gt[..., 0, None, None]).abs(), (cols - gt[..., 1, None, None]).abs())
            U = U + (cheb > radius).to(U.dtype) / J
        compiled = U.device.type == "cpu" and U.dtype == torch.float64
        loc, _ = tree_max_sum(U, list(parents), w_pair.detach().to(U), rest.to(U), scale,
                              dt1d if compiled else torch_dt1d)
    return loc


def tree_hinge(unary, gt, w_pair, parents, rest, scale: float = 4.0, radius: int = 1) -> torch.Tensor:
    """Per-example structured hinge H_i (B,) of the tree model (module docstring), differentiable
    w.r.t. ``unary`` (B, J, H, W) and ``w_pair`` (J, 4)."""
    y_star = tree_decode(unary, w_pair, parents, rest, scale, gt, radius)
    delta = far_joints(y_star, gt, radius).to(unary.dtype).mean(1)
    return delta + tree_score(unary, y_star, w_pair, parents, rest, scale) - tree_score(
        unary, gt, w_pair, parents, rest, scale)


class TreeSSVMHead(nn.Module):
    """The deformation part of the pose model as a module: per-part unary weights (J,) scaling the
    network's heat maps, and per-edge (w1, w2, w3, w4) with the quadratic weights w2 = softplus(a2),
    w4 = softplus(a4) > 0 (always a valid distance transform). ``forward(maps, gt)`` gives H_i;
    :meth:`decode` predicts; :meth:`to_w` is the :class:`~ssvm_torch.models.pose.TreePoseModel`
    weight vector [unary weights ; (w1, w2, w3, w4) per edge]."""

    def __init__(self, parents, rest, scale: float = 4.0, radius: int = 1):
        super().__init__()
        self.parents = [int(p) for p in parents]
        J = len(self.parents)
        check(J >= 1 and self.parents[0] == -1 and all(0 <= self.parents[j] < j for j in range(1, J)),
              "parents", f"{J} ints with parents[0] = -1 and 0 <= parents[j] < j", self.parents)
        self.register_buffer("rest", torch.as_tensor(rest, dtype=torch.float32).reshape(J, 2).clone())
        self.scale, self.radius = float(scale), int(radius)
        self.unary_weight = nn.Parameter(torch.ones(J))
        self.linear = nn.Parameter(torch.zeros(J, 2))                   # w1, w3
        self.quad_raw = nn.Parameter(torch.full((J, 2), -2.0))          # softplus(-2) = 0.127

    def w_pair(self) -> torch.Tensor:
        q = nn.functional.softplus(self.quad_raw)
        return torch.stack([self.linear[:, 0], q[:, 0], self.linear[:, 1], q[:, 1]], 1)

    def _unary(self, maps):
        return maps * self.unary_weight[None, :, None, None].to(maps)

    def forward(self, maps, gt) -> torch.Tensor:
        return tree_hinge(self._unary(maps), gt, self.w_pair().to(maps), self.parents, self.rest, self.scale,
                          self.radius)

    def decode(self, maps) -> torch.Tensor:
        return tree_decode(self._unary(maps), self.w_pair().to(maps), self.parents, self.rest, self.scale)

    def weights(self) -> torch.Tensor:
        """The TreePoseModel weight vector [unary weights ; (w1, w2, w3, w4) per edge], differentiable."""
        return torch.cat([self.unary_weight, self.w_pair()[1:].reshape(-1)])

    def sq_norm(self) -> torch.Tensor:
        """||w||^2 (the regularizer lam/2 ||w||^2 of objective (1))."""
        return (self.weights() ** 2).sum()

    def to_w(self) -> torch.Tensor:
        return self.weights().detach()
