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
    has_edges = edges is not None and len(edges)
    seg = binary_cut_host(to_host(gain), to_host(edges) if has_edges else None, to_host(theta) if has_edges else None)
    return from_host(seg, gain.device)


def binary_cut_host(gain: np.ndarray, edges: np.ndarray | None = None, theta: np.ndarray | None = None) -> np.ndarray:
    """:func:`binary_cut` on host arrays (the compiled block step's call, no tensors)."""
    import maxflow
    g = maxflow.Graph[float]()
    ids = g.add_nodes(len(gain))
    # node in the sink segment <=> y_v = 1, which cuts its source edge: cost of y_v = 1 on the
    # source capacity, cost of y_v = 0 on the sink capacity (shifted to be >= 0).
    g.add_grid_tedges(ids, np.maximum(-gain, 0.0), np.maximum(gain, 0.0))
    if edges is not None and len(edges):
        g.add_edges(edges[:, 0], edges[:, 1], theta, theta)
    g.maxflow()
    return g.get_grid_segments(ids).astype(np.int64)
