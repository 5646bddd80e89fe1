"""Binary segmentation on graphs with a submodular Potts model (the HorseSeg model of
Osokin et al. 2016, App. I.3), solved exactly by max-flow / min-cut.

An example is a graph (nodes = superpixels, undirected edges) with node features x_v (F) and
non-negative edge features f_e (P). For a labeling y in {0, 1}^N
    phi(x, y) = 1/N [ sum_v y_v [x_v, 1]  ;  sum_{e = (a, b)} [y_a == y_b] f_e ],   d = F + 1 + P,
(the 1/N keeps ||phi|| independent of the graph's size, so one lambda suits graphs of any size
and the loss in [0, 1] and the score live on the same scale), so the score <w, phi> rewards agreeing neighbours by <w_p, f_e>. With w_p >= 0 and f_e >= 0 that
reward is >= 0, the (loss-augmented) energy is submodular and one min cut finds the exact
maximizer (Boykov & Kolmogorov 2004, PyMaxflow). The solver keeps w_p >= 0 with box constraints
(App. H, :class:`~ssvm_torch.solvers.box.BoxedDual`).

Loss: class-balanced Hamming loss L(y) = sum_v c_{y*_v} [y_v != y*_v] with c_k = 1 / (2 N_k)
(N_k nodes of ground-truth class k; 1 / N when only one class is present), so 0 <= L <= 1
and both classes weigh the same. It decomposes over nodes, so loss augmentation only changes
the unary capacities.

Examples are stored ragged (concatenated nodes and edges with offsets). A batch of labelings
is a (B, max N) int64 tensor padded with -1; block-level labelings are unpadded (N_i,) vectors.
Max-flow runs on the CPU (PyMaxflow); the potentials are computed with torch on the model's
device and the whole batch is cut as one graph (a disjoint union of the examples' graphs).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import SSVMInputError, check
from .dense import DecodingModel


@dataclass
class GraphExample:
    """One segmentation example: node features (N, F), edges (E, 2) of node indices, edge
    features (E, P) >= 0 and ground-truth labels (N,) in {0, 1}."""

    X: np.ndarray
    edges: np.ndarray
    edge_features: np.ndarray
    y: np.ndarray


def _check_example(k: int, ex: GraphExample, F: int, P: int) -> None:
    N = ex.X.shape[0] if ex.X.ndim == 2 else -1
    check(ex.X.ndim == 2 and ex.X.shape[1] == F and N >= 1, f"graphs[{k}].X", f"an (N, {F}) array", ex.X.shape)
    check(ex.y.shape == (N,), f"graphs[{k}].y", f"shape ({N},)", ex.y.shape)
    check(bool(np.isin(ex.y, (0, 1)).all()), f"graphs[{k}].y", "labels in {0, 1}", "other values")
    check(ex.edges.ndim == 2 and ex.edges.shape[1] == 2, f"graphs[{k}].edges", "an (E, 2) array", ex.edges.shape)
    E = ex.edges.shape[0]
    if E:
        check(int(ex.edges.min()) >= 0 and int(ex.edges.max()) < N, f"graphs[{k}].edges",
              f"node indices in [0, {N - 1}]", f"range [{int(ex.edges.min())}, {int(ex.edges.max())}]")
        check(bool((ex.edges[:, 0] != ex.edges[:, 1]).all()), f"graphs[{k}].edges", "no self-loops", "a self-loop")
    check(ex.edge_features.shape == (E, P), f"graphs[{k}].edge_features", f"shape ({E}, {P})", ex.edge_features.shape)
    check(bool(np.isfinite(ex.X).all()), f"graphs[{k}].X", "finite values", "NaN or inf")
    check(bool(np.isfinite(ex.edge_features).all()) and bool((ex.edge_features >= 0).all()),
          f"graphs[{k}].edge_features", "finite values >= 0 (submodularity needs f_e >= 0)", "negative/NaN/inf")


class GraphCutModel(DecodingModel):
    """Structured model for binary segmentation of graphs (see the module docstring).

    ``pairwise=False`` drops the Potts features (d = F + 1): the unaries-only baseline."""

    def __init__(self, graphs: list[GraphExample], pairwise: bool = True, dtype=torch.float64, device=None):
        check(len(graphs) >= 1, "graphs", "at least one example", 0)
        F, P = graphs[0].X.shape[1], graphs[0].edge_features.shape[1]
        for k, ex in enumerate(graphs):
            _check_example(k, ex, F, P)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype, self.pairwise = dtype, bool(pairwise)
        self.n, self.F, self.P = len(graphs), F + 1, P
        self.d_unary = self.F
        self.d = self.F + (P if pairwise else 0)
        sizes = np.array([ex.X.shape[0] for ex in graphs])
        esizes = np.array([ex.edges.shape[0] for ex in graphs])
        self.node_off = np.concatenate([[0], np.cumsum(sizes)])
        self.edge_off = np.concatenate([[0], np.cumsum(esizes)])
        X = np.concatenate([np.hstack([ex.X, np.ones((ex.X.shape[0], 1))]) for ex in graphs])
        y = np.concatenate([ex.y for ex in graphs]).astype(np.int64)
        ef = np.concatenate([ex.edge_features for ex in graphs])
        self.X = torch.as_tensor(X, dtype=dtype, device=self.device)
        self.y = torch.as_tensor(y, device=self.device)
        # edge endpoints numbered within their example
        self.edges_local = torch.as_tensor(np.concatenate([ex.edges for ex in graphs]).astype(np.int64), device=self.device)
        self.Fe = torch.as_tensor(ef, dtype=dtype, device=self.device)
        # class-balanced per-node loss weight c_{y*_v}
        cw = np.empty(len(y))
        for i in range(self.n):
            yi = y[self.node_off[i]:self.node_off[i + 1]]
            n1 = int(yi.sum())
            n0 = len(yi) - n1
            both = n0 > 0 and n1 > 0
            cw[self.node_off[i]:self.node_off[i + 1]] = np.where(
                yi == 1, 1.0 / (2 * n1) if both else 1.0 / len(yi), 1.0 / (2 * n0) if both else 1.0 / len(yi))
        self.cw = torch.as_tensor(cw, dtype=dtype, device=self.device)
        self.node_graph = torch.as_tensor(np.repeat(np.arange(self.n), sizes), device=self.device)
        self.edge_graph = torch.as_tensor(np.repeat(np.arange(self.n), esizes), device=self.device)
        self.sizes = torch.as_tensor(sizes, device=self.device)
        self.inv_size = torch.as_tensor(1.0 / sizes, dtype=dtype, device=self.device)
        all_idx = torch.arange(self.n)
        self.phi_gt = self.phi(all_idx, self.gt_batch(all_idx))       # phi(x_i, y_i), (n, d)

    @property
    def pairwise_index(self) -> torch.Tensor:
        """Coordinates of w that must stay >= 0 (the Potts weights)."""
        return torch.arange(self.d_unary, self.d)

    # -- ragged helpers --------------------------------------------------------------------------
    def _ranges(self, off: np.ndarray, idx):
        """Expand the ranges off[i]:off[i+1] of the examples ``idx`` (in batch order): global ids,
        batch row and position within the example."""
        idx = torch.as_tensor(idx).reshape(-1).cpu().numpy()
        dev = self.device
        if len(idx) == 1:                        # the block step's case: one contiguous range
            lo, hi = int(off[idx[0]]), int(off[idx[0] + 1])
            local = torch.arange(hi - lo, device=dev)
            return local + lo, torch.zeros_like(local), local
        lo, hi = off[idx], off[idx + 1]
        rows = np.repeat(np.arange(len(idx)), hi - lo)
        local = np.arange(rows.shape[0]) - np.repeat(np.cumsum(hi - lo) - (hi - lo), hi - lo)
        ids = np.repeat(lo, hi - lo) + local
        return torch.as_tensor(ids, device=dev), torch.as_tensor(rows, device=dev), torch.as_tensor(local, device=dev)

    def _nodes(self, idx):
        return self._ranges(self.node_off, idx)

    def _edges(self, idx):
        eids, rows, _ = self._ranges(self.edge_off, idx)
        return eids, rows

    def _flat_labels(self, idx, labels):
        """Labels of every node of ``idx`` (global order of ``_nodes``) from a (B, >= N_i) batch."""
        nodes, rows, local = self._nodes(idx)
        labels = torch.as_tensor(labels, device=self.device).reshape(len(torch.as_tensor(idx).reshape(-1)), -1)
        flat = labels[rows, local]
        if bool((flat < 0).any()) or bool((flat > 1).any()):
            raise SSVMInputError("labels: expected 0/1 labels for every node of the example (padding only past N_i)")
        return nodes, rows, flat

    # -- the DenseDual model interface -----------------------------------------------------------
    def phi(self, idx, labels) -> torch.Tensor:
        """Joint features phi(x_i, y) for a batch, (B, d)."""
        B = len(torch.as_tensor(idx).reshape(-1))
        nodes, rows, flat = self._flat_labels(idx, labels)
        out = torch.zeros(B, self.d, dtype=self.dtype, device=self.device)
        out[:, :self.F].index_add_(0, rows, flat[:, None].to(self.dtype) * self.X[nodes])
        if self.pairwise:
            # agreement read per batch row: a batch may hold the same example several times
            eids, erows = self._edges(idx)
            labels = torch.as_tensor(labels, device=self.device).reshape(B, -1)
            ends = self.edges_local[eids]
            agree = (labels[erows, ends[:, 0]] == labels[erows, ends[:, 1]]).to(self.dtype)
            out[:, self.F:].index_add_(0, erows, agree[:, None] * self.Fe[eids])
        return out * self.inv_size[torch.as_tensor(idx, device=self.device).reshape(-1)][:, None]

    def psi(self, idx, labels) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=self.device).reshape(-1)
        return self.phi_gt[idx] - self.phi(idx, labels)

    def loss(self, idx, labels) -> torch.Tensor:
        """Class-balanced Hamming loss per example, (B,)."""
        B = len(torch.as_tensor(idx).reshape(-1))
        nodes, rows, flat = self._flat_labels(idx, labels)
        wrong = (flat != self.y[nodes]).to(self.dtype) * self.cw[nodes]
        return torch.zeros(B, dtype=self.dtype, device=self.device).index_add_(0, rows, wrong)

    def gt_batch(self, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx).reshape(-1)
        nodes, rows, local = self._nodes(idx)
        M = int(self.sizes[idx.to(self.sizes.device)].max())
        out = torch.full((len(idx), M), -1, dtype=torch.int64, device=self.device)
        out[rows, local] = self.y[nodes]
        return out

    def gt(self, i: int) -> torch.Tensor:
        return self.y[self.node_off[i]:self.node_off[i + 1]].clone()

    @staticmethod
    def key(labeling):
        return tuple(int(v) for v in labeling if int(v) >= 0)

    def _w_parts(self, w):
        w = torch.as_tensor(w).to(self.device, self.dtype)
        check(w.shape == (self.d,), "w", f"shape ({self.d},)", tuple(w.shape))
        wp = w[self.F:]
        if self.pairwise and bool((wp < 0).any()):
            raise SSVMInputError("w: the pairwise (Potts) weights must be >= 0 for an exact graph cut "
                                 f"(got min {float(wp.min()):.3g}); train with the box constraint w_pairwise >= 0")
        return w[:self.F], wp

    def decode(self, w, idx, augment: bool = False) -> torch.Tensor:
        """argmax_y <w, phi(x_i, y)> (+ L_i(y) if ``augment``) for every example of ``idx`` by one
        min cut on the disjoint union of their graphs; (B, max N) padded with -1."""
        import maxflow

        idx = torch.as_tensor(idx).reshape(-1)
        wu, wp = self._w_parts(w)
        nodes, rows, local = self._nodes(idx)
        scale = self.inv_size[self.node_graph[nodes]]
        gain = (self.X[nodes] @ wu) * scale             # score of y_v = 1 over y_v = 0
        if augment:
            yv = self.y[nodes]
            gain = gain + torch.where(yv == 0, self.cw[nodes], -self.cw[nodes])
        gain = gain.cpu().numpy()
        g = maxflow.Graph[float]()
        ids = g.add_nodes(len(gain))
        # node in the sink segment <=> y_v = 1, which cuts its source edge: cost of y_v = 1 on the
        # source capacity, cost of y_v = 0 on the sink capacity (shifted to be >= 0).
        g.add_grid_tedges(ids, np.maximum(-gain, 0.0), np.maximum(gain, 0.0))
        if self.pairwise:
            eids, erows = self._edges(idx)
            if len(eids):
                theta = ((self.Fe[eids] @ wp) * self.inv_size[self.edge_graph[eids]]).cpu().numpy()
                # the cut graph numbers the batch's nodes example after example
                sizes = self.sizes[idx.to(self.sizes.device)]
                row_start = (torch.cumsum(sizes, 0) - sizes).to(self.device)
                e = (self.edges_local[eids] + row_start[erows][:, None]).cpu().numpy()
                g.add_edges(e[:, 0], e[:, 1], theta, theta)
        g.maxflow()
        seg = torch.as_tensor(g.get_grid_segments(ids).astype(np.int64), device=self.device)
        M = int(self.sizes[idx.to(self.sizes.device)].max())
        out = torch.full((len(idx), M), -1, dtype=torch.int64, device=self.device)
        out[rows, local] = seg
        return out


    def errors(self, w) -> dict:
        """Mean class-balanced Hamming loss and plain per-node error of the prediction at w."""
        idx = torch.arange(self.n)
        labels = self.predict(w, idx)
        nodes, rows, flat = self._flat_labels(idx, labels)
        return {"error": float(self.loss(idx, labels).mean()),
                "node_error": float((flat != self.y[nodes]).to(self.dtype).mean())}
