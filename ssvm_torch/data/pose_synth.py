"""Seeded synthetic articulated stick figures for tree-structured pose estimation.

LSP (Osokin et al. 2016, App. I.4) cannot be downloaded here, so this generator provides the same
kind of problem: images of a person-like figure, 11 joints on a tree of limbs, and per-joint score
maps from a simple detector.

* Skeleton (11 parts, root = pelvis): pelvis -> chest -> head; chest -> elbow -> hand (x2);
  pelvis -> knee -> foot (x2). Limb lengths (grid cells): torso 7, neck 3.5, upper arm 5,
  forearm 4.5, thigh 6, shin 5.5, each scaled by one per-figure factor U(0.85, 1.15).
* Pose: torso tilt N(0, 0.25) rad; upper arms at U(-2.6, 2.6) rad from hanging down, elbows bent
  U(-1.6, 1.6); thighs U(-0.7, 0.7) from vertical, knees U(-0.2, 1.3); the figure is placed
  uniformly where it fits. Joints are rounded to the G x G grid (G = 32).
* Image (2G x 2G): limbs drawn as lines of width ~2 px, joints as discs; Gaussian noise sigma 0.35,
  one random occluder (a box of noise) with probability 0.5, three clutter segments.
* Detector: per part, the zero-mean unit-norm mean 9 x 9 patch around that joint over the training
  images (a template), correlated with each image at stride 2 (torch conv2d), then z-scored per
  image and part: the unary score maps S (J, G, G). Hands, feet, elbows and knees look alike to it,
  so the tree's deformation terms carry the structure.

Each image k of split s is drawn from ``numpy.random.default_rng([seed, s, k])``: examples do not
depend on how many others are drawn.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

PARTS = ("pelvis", "chest", "head", "l_elbow", "l_hand", "r_elbow", "r_hand", "l_knee", "l_foot", "r_knee",
         "r_foot")
PARENTS = (-1, 0, 1, 1, 3, 1, 5, 0, 7, 0, 9)
GRID = 32
PATCH = 9


@dataclass
class PoseSet:
    """images (n, 2G, 2G) float32, joints (n, J, 2) int64 (row, col) on the G x G grid,
    scores (n, J, G, G) float64 detector maps."""

    images: torch.Tensor
    joints: torch.Tensor
    scores: torch.Tensor

    @property
    def n(self) -> int:
        return self.joints.shape[0]

    def subset(self, k: int) -> "PoseSet":
        return PoseSet(self.images[:k], self.joints[:k], self.scores[:k])


def _pose(rng) -> np.ndarray:
    s = rng.uniform(0.85, 1.15)
    L = {"torso": 7 * s, "neck": 3.5 * s, "upper": 5 * s, "fore": 4.5 * s, "thigh": 6 * s, "shin": 5.5 * s}
    up = np.pi + rng.normal(0, 0.25)                 # direction angle; 0 = down (+row), pi = up
    J = np.zeros((11, 2))

    def at(p, angle, length):
        return J[p] + length * np.array([np.cos(angle), np.sin(angle)])
    J[1] = at(0, up, L["torso"])
    J[2] = at(1, up + rng.normal(0, 0.2), L["neck"])
    for elbow, hand in ((3, 4), (5, 6)):
        a = rng.uniform(-2.6, 2.6)
        J[elbow] = at(1, a, L["upper"])
        J[hand] = at(elbow, a + rng.uniform(-1.6, 1.6), L["fore"])
    for side, (knee, foot) in ((1, (7, 8)), (-1, (9, 10))):
        a = side * rng.uniform(-0.2, 0.7)
        J[knee] = at(0, a, L["thigh"])
        J[foot] = at(knee, a - side * rng.uniform(-0.2, 1.3), L["shin"])
    lo, hi = J.min(0), J.max(0)
    span = hi - lo
    if (span > GRID - 3).any():
        return None
    offset = np.array([rng.uniform(1 - lo[0], GRID - 2 - hi[0]), rng.uniform(1 - lo[1], GRID - 2 - hi[1])])
    return np.clip(np.rint(J + offset), 0, GRID - 1).astype(np.int64)


def _segment(img, p, q, width, value=1.0):
    H, W = img.shape
    rr, cc = np.mgrid[0:H, 0:W]
    d = q - p
    t = np.clip(((rr - p[0]) * d[0] + (cc - p[1]) * d[1]) / max(float(d @ d), 1e-9), 0, 1)
    dist = np.hypot(rr - (p[0] + t * d[0]), cc - (p[1] + t * d[1]))
    np.maximum(img, value * (dist <= width), out=img)


def _render(rng, joints) -> np.ndarray:
    S = 2 * GRID
    img = np.zeros((S, S))
    pts = 2.0 * joints + 0.5
    for j, p in enumerate(PARENTS):
        if p >= 0:
            _segment(img, pts[p], pts[j], 1.0)
    for j in range(len(PARTS)):
        _segment(img, pts[j], pts[j], 1.6 if j != 2 else 3.0)          # joints as discs, a bigger head
    for _ in range(3):                                                   # clutter
        a, b = rng.uniform(0, S, 2), rng.uniform(0, S, 2)
        _segment(img, a, a + (b - a) * rng.uniform(0.1, 0.3), 1.0, 0.8)
    if rng.random() < 0.5:                                               # occluder
        r, c = rng.integers(0, S - 16, 2)
        h, w = rng.integers(8, 17, 2)
        img[r:r + h, c:c + w] = rng.uniform(0, 1, (h, w))
    return img + rng.normal(0, 0.35, img.shape)


def _draw(seed, split, n):
    images, joints = [], []
    for k in range(n):
        rng = np.random.default_rng([seed, split, k])
        J = None
        while J is None:
            J = _pose(rng)
        joints.append(J)
        images.append(_render(rng, J))
    return torch.tensor(np.stack(images), dtype=torch.float32), torch.tensor(np.stack(joints))


def templates(images: torch.Tensor, joints: torch.Tensor) -> torch.Tensor:
    """(J, PATCH, PATCH): zero-mean unit-norm mean patch around every joint of the training images."""
    r = PATCH // 2
    padded = F.pad(images.double(), (r, r, r, r))
    T = torch.zeros(joints.shape[1], PATCH, PATCH, dtype=torch.float64)
    for j in range(joints.shape[1]):
        for i in range(images.shape[0]):
            y, x = 2 * int(joints[i, j, 0]) + r, 2 * int(joints[i, j, 1]) + r      # image centre of the cell
            T[j] += padded[i, y - r:y + r + 1, x - r:x + r + 1]
    T -= T.mean(dim=(1, 2), keepdim=True)
    return T / T.flatten(1).norm(dim=1)[:, None, None]


def detect(images: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Template correlation at stride 2 (one score per grid cell), z-scored per image and part."""
    x = images.double()[:, None]
    s = F.conv2d(F.pad(x, (PATCH // 2,) * 4), T[:, None], stride=2)          # (n, J, G, G)
    s = s - s.mean(dim=(2, 3), keepdim=True)
    return s / s.std(dim=(2, 3), keepdim=True).clamp_min(1e-12)


def make_pose_synth(n_train: int = 200, n_test: int = 200, seed: int = 0) -> tuple[PoseSet, PoseSet]:
    """(train, test) stick-figure sets; the detector's templates come from the training images only."""
    tr_img, tr_j = _draw(seed, 0, n_train)
    te_img, te_j = _draw(seed, 1, n_test)
    T = templates(tr_img, tr_j)
    return PoseSet(tr_img, tr_j, detect(tr_img, T)), PoseSet(te_img, te_j, detect(te_img, T))
