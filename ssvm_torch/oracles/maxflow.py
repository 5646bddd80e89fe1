"""Exact binary labeling of a pairwise submodular energy by one min cut (Boykov & Kolmogorov 2004,
PyMaxflow): argmax_y sum_v y_v gain_v + sum_{e=(a,b)} theta_e [y_a == y_b] with theta_e >= 0."""
from __future__ import annotations

import numpy as np
import torch

from ..devices import from_host, to_host


def binary_cut(gain: torch.Tensor, edges: torch.Tensor | None = None, theta: torch.Tensor | None = None) -> torch.Tensor:
    """gain (N,) score of y_v = 1 over y_v = 0; edges (E, 2) node indices, theta (E,) >= 0 agreement
    rewards. Returns y (N,) int64 on gain's device. The cut itself runs on the host (one transfer
    per batch)."""
    import maxflow
    g_np = to_host(gain)
    g = maxflow.Graph[float]()
    ids = g.add_nodes(len(g_np))
    # node in the sink segment <=> y_v = 1, which cuts its source edge: cost of y_v = 1 on the
    # source capacity, cost of y_v = 0 on the sink capacity (shifted to be >= 0).
    g.add_grid_tedges(ids, np.maximum(-g_np, 0.0), np.maximum(g_np, 0.0))
    if edges is not None and len(edges):
        th, e = to_host(theta), to_host(edges)
        g.add_edges(e[:, 0], e[:, 1], th, th)
    g.maxflow()
    return from_host(g.get_grid_segments(ids).astype(np.int64), gain.device)
