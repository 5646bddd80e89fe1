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

Examples are stored ragged (:class:`~ssvm_torch.data.examples.GraphData`). A batch of labelings
is a (B, max N) int64 tensor padded with -1; block-level labelings are unpadded (N_i,) vectors.
Scores are (gain (nodes,), theta (edges,)) of the batch's nodes and edges; max-flow runs on the
CPU (PyMaxflow) and the whole batch is cut as one graph (a disjoint union of the examples' graphs).
"""
from __future__ import annotations

import torch

from ..data.examples import GraphData, check_nonnegative_edge_features
from ..errors import SSVMInputError, check
from ..oracles.maxflow import binary_cut
from .base import StructuredModel


class GraphCutModel(StructuredModel):
    """Structured model for binary segmentation of graphs (see the module docstring).
    ``pairwise=False`` drops the Potts features (d = F + 1): the unaries-only baseline."""

    kind = "graphcut"

    def __init__(self, n_features: int, n_edge_features: int, pairwise: bool = True):
        check(int(n_features) >= 1, "n_features", "an int >= 1", n_features)
        check(int(n_edge_features) >= 0, "n_edge_features", "an int >= 0", n_edge_features)
        self.pairwise = bool(pairwise)
        self.F, self.P = int(n_features) + 1, int(n_edge_features)
        self.d_unary = self.F
        self.d = self.F + (self.P if self.pairwise else 0)

    @classmethod
    def for_data(cls, data: GraphData, pairwise: bool = True) -> "GraphCutModel":
        return cls(data.n_features, data.n_edge_features, pairwise)

    def check_data(self, data, field: str = "data") -> None:
        check(isinstance(data, GraphData), field, "a GraphData", type(data).__name__)
        check(data.n_states == 2, f"{field}.n_states", "2 (binary segmentation; GraphCRFModel takes more states)",
              data.n_states)
        check(data.n_features == self.F - 1, f"{field}.X", f"{self.F - 1} node features", data.n_features)
        check(data.n_edge_features == self.P, f"{field}.edge_features", f"{self.P} edge features",
              data.n_edge_features)
        check_nonnegative_edge_features(data, field)

    def describe(self) -> dict:
        return {"kind": "GraphCutModel", "d": self.d, "unary": [0, self.d_unary],
                "pairwise": [self.d_unary, self.d] if self.pairwise else None}

    @property
    def pairwise_index(self) -> torch.Tensor:
        """Coordinates of w that must stay >= 0 (the Potts weights)."""
        return torch.arange(self.d_unary, self.d)

    def _flat_labels(self, data: GraphData, idx, labels):
        """Labels of every node of ``idx`` (global order of ``nodes``) from a (B, >= N_i) batch."""
        nodes, rows, local = data.nodes(idx)
        labels = torch.as_tensor(labels, device=data.device).reshape(len(torch.as_tensor(idx, device=data.device).reshape(-1)), -1)
        flat = labels[rows, local]
        if bool((flat < 0).any()) or bool((flat > 1).any()):
            raise SSVMInputError("labels: expected 0/1 labels for every node of the example (padding only past N_i)")
        return nodes, rows, flat

    def phi(self, data: GraphData, idx, labels) -> torch.Tensor:
        """Joint features phi(x_i, y) for a batch, (B, d)."""
        B = len(torch.as_tensor(idx, device=data.device).reshape(-1))
        nodes, rows, flat = self._flat_labels(data, idx, labels)
        out = torch.zeros(B, self.d, dtype=data.dtype, device=data.device)
        on = flat[:, None].to(data.dtype)
        out[:, :self.F - 1].index_add_(0, rows, on * data.X[nodes])
        out[:, self.F - 1].index_add_(0, rows, on[:, 0])
        if self.pairwise:
            # agreement read per batch row: a batch may hold the same example several times
            eids, erows = data.edges(idx)
            labels = torch.as_tensor(labels, device=data.device).reshape(B, -1)
            ends = data.edges_local[eids]
            agree = (labels[erows, ends[:, 0]] == labels[erows, ends[:, 1]]).to(data.dtype)
            out[:, self.F:].index_add_(0, erows, agree[:, None] * data.Fe[eids])
        return out * data.inv_size[torch.as_tensor(idx, device=data.device).reshape(-1)][:, None]

    def loss(self, data: GraphData, idx, labels) -> torch.Tensor:
        """Class-balanced Hamming loss per example, (B,)."""
        B = len(torch.as_tensor(idx, device=data.device).reshape(-1))
        nodes, rows, flat = self._flat_labels(data, idx, labels)
        wrong = (flat != data.y[nodes]).to(data.dtype) * data.cw[nodes]
        return torch.zeros(B, dtype=data.dtype, device=data.device).index_add_(0, rows, wrong)

    def gt_batch(self, data: GraphData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        nodes, rows, local = data.nodes(idx)
        M = int(data.sizes[idx.to(data.sizes.device)].max())
        out = torch.full((len(idx), M), -1, dtype=torch.int64, device=data.device)
        out[rows, local] = data.y[nodes]
        return out

    def gt(self, data: GraphData, i: int) -> torch.Tensor:
        return data.y[data.node_off[i]:data.node_off[i + 1]].clone()

    @staticmethod
    def key(labeling):
        return tuple(int(v) for v in (labeling.tolist() if torch.is_tensor(labeling) else labeling) if int(v) >= 0)

    def _w_parts(self, w, data: GraphData):
        w = torch.as_tensor(w).to(data.device, data.dtype)
        check(w.shape == (self.d,), "w", f"shape ({self.d},)", tuple(w.shape))
        wp = w[self.F:]
        if self.pairwise and bool((wp < 0).any()):
            raise SSVMInputError("w: the pairwise (Potts) weights must be >= 0 for an exact graph cut "
                                 f"(got min {float(wp.min()):.3g}); train with the box constraint w_pairwise >= 0")
        return w[:self.F], wp

    def scores(self, w, data: GraphData, idx):
        """(gain (nodes of the batch,), theta (edges of the batch,)): the score of y_v = 1 over
        y_v = 0, and the agreement reward of each edge (>= 0)."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        wu, wp = self._w_parts(w, data)
        nodes, _, _ = data.nodes(idx)
        gain = (data.X[nodes] @ wu[:-1] + wu[-1]) * data.inv_size[data.node_graph[nodes]]
        theta = None
        if self.pairwise:
            eids, _ = data.edges(idx)
            theta = (data.Fe[eids] @ wp) * data.inv_size[data.edge_graph[eids]]
        return gain, theta

    def augment(self, scores, data: GraphData, idx):
        """The class-balanced Hamming loss decomposes over nodes: +c_v for y_v != y*_v."""
        gain, theta = scores
        nodes, _, _ = data.nodes(idx)
        yv = data.y[nodes]
        return gain + torch.where(yv == 0, data.cw[nodes], -data.cw[nodes]), theta

    def decode(self, scores, data: GraphData, idx) -> torch.Tensor:
        """One min cut on the disjoint union of the batch's graphs; (B, max N) padded with -1."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        gain, theta = scores
        _, rows, local = data.nodes(idx)
        edges = None
        if self.pairwise:
            eids, erows = data.edges(idx)
            # the cut graph numbers the batch's nodes example after example
            sizes = data.sizes[idx.to(data.sizes.device)]
            row_start = (torch.cumsum(sizes, 0) - sizes).to(data.device)
            edges = data.edges_local[eids] + row_start[erows][:, None]
        seg = binary_cut(gain, edges, theta)
        M = int(data.sizes[idx.to(data.sizes.device)].max())
        out = torch.full((len(idx), M), -1, dtype=torch.int64, device=data.device)
        out[rows, local] = seg
        return out

    def metrics(self, w, data: GraphData) -> dict:
        """Mean class-balanced Hamming loss and plain per-node error of the prediction at w."""
        idx = torch.arange(data.n, device=data.device)
        labels = self.predict(w, data, idx)
        nodes, rows, flat = self._flat_labels(data, idx, labels)
        return {"error": float(self.loss(data, idx, labels).mean()),
                "node_error": float((flat != data.y[nodes]).to(data.dtype).mean())}
