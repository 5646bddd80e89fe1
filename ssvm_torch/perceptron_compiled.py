"""The perceptron's compiled epochs (ssvm_torch/perceptron.py's loop at batch size 1, one compiled call per epoch)
for the models whose steps the kernels of :mod:`ssvm_torch.oracles.chain_perceptron`,
:mod:`ssvm_torch.oracles.tree_perceptron`, :mod:`ssvm_torch.stores.sibling_perceptron`,
:mod:`ssvm_torch.oracles.span_perceptron` and :mod:`ssvm_torch.stores.segment_perceptron` take exactly: the host
views those kernels read, built once per run.
Models are matched by their exact type (a subclass may add its own parts to psi, as the second-order trees add
their sibling parts to the first-order model's), so anything else runs the loop."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .devices import to_host
from .models.base import TIE, StructuredModel
from .models.chain import ChainModel
from .models.chain_edges import EdgeChainModel
from .models.constituency import ConstituencyModel
from .models.dependency import DependencyModel
from .models.semimarkov import SemiMarkovModel
from .models.sibling_dependency import SiblingDependencyModel
from .oracles.chain_perceptron import nb_perceptron_epoch
from .oracles.span_perceptron import nb_span_perceptron_epoch
from .oracles.tree_perceptron import nb_tree_perceptron_epoch
from .stores.segment_perceptron import nb_segment_perceptron_epoch
from .stores.sibling_perceptron import nb_sibling_perceptron_epoch


def compiled_epoch(model: StructuredModel, data, w: torch.Tensor, lagged: torch.Tensor, cfg,
                   nonnegative) -> Callable[[np.ndarray, float, int], tuple] | None:
    """A function (order, eta, steps) -> (mistakes, summed loss, steps after) taking an epoch's steps in one
    compiled call (the module docstring's kernels; w and ``lagged`` updated in place through views), plain or
    loss-augmented, or None where the loop of :func:`~ssvm_torch.perceptron.train_perceptron` runs: a model other
    than ChainModel, EdgeChainModel, DependencyModel, SiblingDependencyModel, ConstituencyModel and SemiMarkovModel
    themselves (a subclass may add its own parts to psi), other kernels, device or precision (``compiled``),
    batches of several examples or a box (``nonnegative``). The edge-feature chain's loss-augmented epochs exist
    only here (its model has no padded oracle for the loop). ``cfg``: the run's
    :class:`~ssvm_torch.perceptron.PerceptronConfig` (not imported here: perceptron.py imports this module)."""
    if cfg.batch_size != 1 or nonnegative is not None or not model.compiled(w):
        return None
    build = _EPOCHS.get(type(model))
    return None if build is None else build(model, data, w, lagged, cfg)


def _chain_epoch(model: ChainModel, data, w: torch.Tensor, lagged: torch.Tensor, cfg) -> Callable:
    """The epoch of a chain or edge-feature chain (exact types), plain or loss-augmented."""
    edges = type(model) is EdgeChainModel
    fptr, fidx, fval = (to_host(t) for t in model.features_csr(data, torch.float64))
    off = np.ascontiguousarray(to_host(data.offsets), dtype=np.int64)
    Y = np.ascontiguousarray(to_host(data.Y), dtype=np.int64)
    token_w = to_host(model.token_loss(data.lengths))
    views = [t.numpy() for t in model.split(w)] + [t.numpy() for t in model.split(lagged)]
    if edges:
        pairs = to_host(model.pairs)
        edge_args = (model.edge_weights(w).numpy(), model.edge_weights(lagged).numpy(), *model.edge_csr(data),
                     np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1]), model.pair_of)
    else:                                       # not read: typed as the edge arrays are
        none_f, none_i = np.zeros((0, 0)), np.zeros(1, dtype=np.int64)
        edge_args = (none_f, none_f, none_i, none_i, np.zeros(0), none_i, none_i, np.zeros((0, 0), dtype=np.int64))

    def epoch(order: np.ndarray, eta: float, steps: int) -> tuple:
        return nb_perceptron_epoch(np.ascontiguousarray(order, dtype=np.int64), fptr, fidx, fval, off, Y, token_w,
                                   *views, model.pen_host, cfg.loss_augmented, eta, steps, cfg.average, TIE, edges,
                                   *edge_args)
    return epoch


def _gold_ok(model: DependencyModel, data, cfg) -> np.ndarray:
    """Whether each sentence's gold tree lies in the model's decoder's space (``DependencyModel.gold_in_space``):
    where not, the loss-augmented oracle may return it as it is (plain decoding never reads it)."""
    if not cfg.loss_augmented:
        return np.ones(data.n, dtype=np.bool_)
    return np.ascontiguousarray(to_host(model.gold_in_space(data)))


def _tree_epoch(model: DependencyModel, data, w: torch.Tensor, lagged: torch.Tensor, cfg) -> Callable:
    """The epoch of the first-order dependency model (exact type), plain or loss-augmented."""
    cost = to_host(model.costs(data.lengths))
    gold_ok = _gold_ok(model, data, cfg)
    host = [np.ascontiguousarray(to_host(t)) for t in (data.offsets, data.arc_off, data.heads, data.ptr, data.ids,
                                                         data.tok_ptr, data.tok_ids)]

    def tree_epoch(order: np.ndarray, eta: float, steps: int) -> tuple:
        return nb_tree_perceptron_epoch(np.ascontiguousarray(order, dtype=np.int64), *host, w.numpy(),
                                        lagged.numpy(), cost, model.projective, model.multiroot, eta, steps,
                                        cfg.average, cfg.loss_augmented, gold_ok, TIE)
    return tree_epoch


def _sibling_epoch(model: SiblingDependencyModel, data, w: torch.Tensor, lagged: torch.Tensor, cfg) -> Callable:
    """The epoch of the second-order dependency model (exact type), plain or loss-augmented."""
    cost = to_host(model.costs(data.lengths))
    gold_ok = _gold_ok(model, data, cfg)
    ades = tuple(np.ascontiguousarray(to_host(t)) for t in (data.offsets, data.arc_off, data.ptr, data.ids,
                                                             data.tok_ptr, data.tok_ids))
    sdes, heads = data.sib.host(), np.ascontiguousarray(to_host(data.heads))

    def sibling_epoch(order: np.ndarray, eta: float, steps: int) -> tuple:
        return nb_sibling_perceptron_epoch(np.ascontiguousarray(order, dtype=np.int64), ades, sdes, heads, w.numpy(),
                                           lagged.numpy(), cost, model.multiroot, eta, steps, cfg.average,
                                           cfg.loss_augmented, gold_ok, TIE)
    return sibling_epoch


def _span_epoch(model: ConstituencyModel, data, w: torch.Tensor, lagged: torch.Tensor, cfg) -> Callable:
    """The epoch of the constituency model (exact type), plain or loss-augmented."""
    host = [np.ascontiguousarray(to_host(t), dtype=np.int64) for t in (data.offsets, data.fptr, data.fidx, data.spans,
                                                                        data.span_offsets)]
    views = [t.numpy() for t in model.split(w)] + [t.numpy() for t in model.split(lagged)]
    cost = np.ascontiguousarray(to_host(model.costs(data.lengths)))
    buckets = np.asarray(model.buckets, dtype=np.int64)

    def span_epoch(order: np.ndarray, eta: float, steps: int) -> tuple:
        return nb_span_perceptron_epoch(np.ascontiguousarray(order, dtype=np.int64), *host, *views, cost, buckets,
                                        model.inside, eta, steps, cfg.average, cfg.loss_augmented, TIE)
    return span_epoch


def _segment_epoch(model: SemiMarkovModel, data, w: torch.Tensor, lagged: torch.Tensor, cfg) -> Callable:
    """The epoch of the semi-Markov model (exact type), plain or loss-augmented."""
    fptr, fidx, fval = (np.ascontiguousarray(to_host(t)) for t in model.features_csr(data, torch.float64))
    off = np.ascontiguousarray(to_host(data.offsets), dtype=np.int64)
    Y = np.ascontiguousarray(to_host(data.Y), dtype=np.int64)
    cost = np.ascontiguousarray(to_host(model.token_loss(data.lengths)))
    views = [t.numpy() for t in model.split(w)] + [w[model.e:].numpy()]
    lag = [model.split(lagged)[0].numpy(), lagged[model.e:].numpy()]
    outside = -1 if model.outside is None else int(model.outside)

    def segment_epoch(order: np.ndarray, eta: float, steps: int) -> tuple:
        return nb_segment_perceptron_epoch(np.ascontiguousarray(order, dtype=np.int64), off, fptr, fidx, fval, Y,
                                           *views, *lag, cost, outside, eta, steps, cfg.average, cfg.loss_augmented,
                                           TIE)
    return segment_epoch


#: the epoch builder of each model type served, plain and loss-augmented (exact types: a subclass may add its own
#: parts to psi)
_EPOCHS = {ChainModel: _chain_epoch, EdgeChainModel: _chain_epoch, DependencyModel: _tree_epoch,
           SiblingDependencyModel: _sibling_epoch, ConstituencyModel: _span_epoch, SemiMarkovModel: _segment_epoch}
