"""One example at a time on the host: the batch-1 oracle, sparse phi and loss of each dense structure,
for the compiled block step (stores/dense_compiled.py). CPU float64 only; the batched torch models
(ssvm_torch.models) stay the reference and the path every other device runs, and the tests hold these
to them (same labelings, features and losses).

A structure exposes, for block i and a labeling y in its block-level form (numpy):
    corner(w, i) -> (y*, cols, vals, L_i(y*))   loss-augmented decoding y* = argmax L_i(y) + <w, phi(x_i, y)>
    features(i, y) -> (cols, vals)               phi(x_i, y) as distinct coordinates and values
    loss(i, y) -> L_i(y)                         the task loss (not divided by n)
    gt(i)                                        the ground-truth labeling
    stack(labelings)                             the batched labelings container of the torch model
Sparse where the structure is (multiclass: the label's row; multi-label: the active labels' rows and
one state per pair); the graph cut, pose and matching features have d <= a few dozen and are dense.
The libraries stay where they are the oracle: PyMaxflow's min cut and scipy's assignment solver run
on host arrays built by numba, without tensors.
"""
from __future__ import annotations

from ..models.flat import MulticlassModel, MultiLabelModel
from ..models.graph_crf import GraphCRFModel
from ..models.graphcut import GraphCutModel
from ..models.matching import MatchingModel
from ..models.pose import TreePoseModel
from .host_flat import MulticlassHost, MultiLabelHost
from .host_graph_crf import GraphCRFHost
from .host_graphs import GraphCutHost, MatchingHost, TreePoseHost

HOSTS = {MulticlassModel: MulticlassHost, MultiLabelModel: MultiLabelHost, GraphCutModel: GraphCutHost,
         TreePoseModel: TreePoseHost, MatchingModel: MatchingHost, GraphCRFModel: GraphCRFHost}


def host_structure(model, data):
    """The host structure of ``model`` on ``data`` (CPU copies of its arrays), or None when the
    structure has none (the dense store then runs the torch model)."""
    cls = HOSTS.get(type(model))
    return None if cls is None else cls(model, data)
