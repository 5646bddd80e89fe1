"""``segmentation-synth``: a seeded synthetic stand-in for HorseSeg (Osokin et al. 2016, App. I.3).

HorseSeg (superpixel graphs of horse images) is not reachable offline, so this generator builds
data with the same shape and the same difficulty structure:

* **Superpixel-like graphs.** N ~ U[min_nodes, max_nodes] superpixel centres in the unit square,
  drawn as a jittered grid (superpixels tile the image) and connected by their Delaunay
  triangulation (scipy), i.e. irregular planar graphs with ~3N edges.
* **Objects.** The foreground is a union of 2-4 random ellipses ("body", "limbs") around a random
  centre; a node is foreground when its centre lies inside. Foreground covers ~15-45% of nodes.
* **Unary features (F = 8)**, what a bag-of-words/colour-histogram unary sees:
  - 6 appearance channels ``mu[y] + image shift + spatially correlated noise + iid noise``:
    class means ``mu`` are shared by the dataset (drawn from ``seed``); every image adds a global
    illumination shift; the correlated part is a smooth random field (sum of Gaussian bumps) that
    makes whole regions look like the other class; the iid part flips isolated superpixels;
  - distance to the image centre (objects tend to be central) and superpixel area (from the jitter).
  Unaries alone are therefore wrong on isolated nodes, which neighbours can fix.
* **Edge features (P = 3, all >= 0)**, the Potts features of App. I.3: a constant, a colour-contrast
  similarity exp(-||c_a - c_b||^2 / (2 beta)) (beta = mean squared contrast of the image, as in
  GrabCut), where the per-image colours ``c`` of object and background differ (so contrast marks
  object boundaries, but colour itself carries no class information across images), and the
  appearance similarity exp(-||x_a - x_b||^2 / (2 beta')).

Every image is generated from ``numpy.random.default_rng([seed, split_id, index])``, so example k
of a split does not depend on how many examples are asked for. Defaults: 200 train / 200 test
images, 60-140 nodes each.
"""
from __future__ import annotations

import numpy as np

from ..errors import check
from .examples import GraphExample

N_APPEARANCE = 6


def _class_means(seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 7919])
    mu = rng.normal(size=(2, N_APPEARANCE))
    # a fixed, moderate separation between the classes' mean appearance
    diff = mu[1] - mu[0]
    mu[1] = mu[0] + 1.2 * diff / np.linalg.norm(diff)
    return mu


def _smooth_field(rng, pts, n_bumps=6, width=0.18, dim=N_APPEARANCE):
    centres = rng.uniform(size=(n_bumps, 2))
    amp = rng.normal(size=(n_bumps, dim))
    k = np.exp(-((pts[:, None, :] - centres[None]) ** 2).sum(-1) / (2 * width ** 2))
    return k @ amp


def make_image(seed: int, split_id: int, index: int, mu: np.ndarray, min_nodes: int, max_nodes: int,
               iid_noise: float, field_noise: float) -> GraphExample:
    rng = np.random.default_rng([seed, split_id, index])
    N_target = int(rng.integers(min_nodes, max_nodes + 1))
    side = int(np.ceil(np.sqrt(N_target)))
    gx, gy = np.meshgrid((np.arange(side) + 0.5) / side, (np.arange(side) + 0.5) / side)
    pts = np.stack([gx.ravel(), gy.ravel()], 1)[rng.permutation(side * side)[:N_target]]
    jitter = rng.uniform(-0.35, 0.35, size=pts.shape) / side
    pts = np.clip(pts + jitter, 0.0, 1.0)
    N = pts.shape[0]
    from scipy.spatial import Delaunay
    tri = Delaunay(pts)
    s = tri.simplices
    e = np.concatenate([s[:, [0, 1]], s[:, [1, 2]], s[:, [0, 2]]])
    e = np.unique(np.sort(e, axis=1), axis=0)

    centre = rng.uniform(0.35, 0.65, size=2)
    inside = np.zeros(N, dtype=bool)
    for j in range(int(rng.integers(2, 5))):
        c = centre + (rng.normal(scale=0.12, size=2) if j else 0.0)
        a, b = rng.uniform(0.15, 0.32), rng.uniform(0.1, 0.2)
        t = rng.uniform(0, np.pi)
        R = np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]])
        q = (pts - c) @ R.T
        inside |= (q[:, 0] / a) ** 2 + (q[:, 1] / b) ** 2 <= 1.0
    y = inside.astype(np.int64)

    shift = rng.normal(scale=0.3, size=N_APPEARANCE)
    app = (mu[y] + shift + field_noise * _smooth_field(rng, pts)
           + iid_noise * rng.normal(size=(N, N_APPEARANCE)))
    dist = np.linalg.norm(pts - 0.5, axis=1, keepdims=True)
    area = ((1.0 + jitter[:, :1] * side) * (1.0 + jitter[:, 1:] * side))   # jitter-dependent size proxy
    X = np.hstack([app, dist, area])

    colours = rng.uniform(size=(2, 3))
    col = colours[y] + 0.15 * rng.normal(size=(N, 3))
    dc = ((col[e[:, 0]] - col[e[:, 1]]) ** 2).sum(1)
    dx = ((app[e[:, 0]] - app[e[:, 1]]) ** 2).sum(1)
    ef = np.stack([np.ones(len(e)), np.exp(-dc / (2 * dc.mean())), np.exp(-dx / (2 * dx.mean()))], 1)
    return GraphExample(X=X, edges=e.astype(np.int64), edge_features=ef, y=y)


def make_segmentation_synth(n_train: int = 200, n_test: int = 200, seed: int = 0, min_nodes: int = 60,
                            max_nodes: int = 140, iid_noise: float = 1.0, field_noise: float = 0.5):
    """(train, test) lists of :class:`GraphExample` (see the module docstring)."""
    check(int(n_train) >= 1 and int(n_test) >= 1, "n_train/n_test", "ints >= 1", (n_train, n_test))
    check(4 <= int(min_nodes) <= int(max_nodes), "min_nodes/max_nodes", "4 <= min_nodes <= max_nodes",
          (min_nodes, max_nodes))
    check(iid_noise >= 0 and field_noise >= 0, "iid_noise/field_noise", "values >= 0", (iid_noise, field_noise))
    mu = _class_means(seed)
    args = (mu, int(min_nodes), int(max_nodes), float(iid_noise), float(field_noise))
    train = [make_image(seed, 0, k, *args) for k in range(int(n_train))]
    test = [make_image(seed, 1, k, *args) for k in range(int(n_test))]
    return train, test
