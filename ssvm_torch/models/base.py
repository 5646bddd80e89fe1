"""The one interface every structure implements: a data-free model on a scores-level oracle.

A model knows its joint feature map phi, its task loss L and its decoder; it owns no examples.
Examples live in a typed container (``ssvm_torch.data``) and a batch is named by indices ``idx``
into it, so one call serves batch size 1 (a block step) and n (a gap pass, evaluation, batch FW).

The max oracle of the SSVM (loss-augmented decoding, objective (1) of Osokin et al. 2016)
    y*_i = argmax_y  L_i(y) + <w, phi(x_i, y)>
is split in three pure steps so that anything upstream (a network, a GPU batch) can feed it:

    s  = scores(w, data, idx)        potentials <w, phi(x_i, .)> in the structure's own factor form
    s' = augment(s, data, idx)       the loss offsets added (every loss here decomposes over factors)
    y* = decode(s', data, idx)       the exact argmax of the factor scores (Viterbi, min cut, ...)

and H_i(w) = max_y L_i(y) - <w, psi_i(y)> with psi_i(y) = phi(x_i, y_i) - phi(x_i, y).
"""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any

import torch

from ..devices import KERNELS
from ..errors import check_choice


#: values within TIE (relative to their scale) of the best are ties, decided for the lowest index: exact
#: ties occur (labelings or corners whose differing parts score alike) and the compiled and the torch
#: paths (and CPU and CUDA) sum in different orders, so a tie must not depend on the last bits
#: (models/flat.py's oracles, the away and cache corners of solvers/steps.py)
TIE = 1e-12


class StructuredModel(ABC):
    """Data-free structure: feature map, loss, scores-level decoding. ``d`` is the length of w."""

    d: int
    #: name of the structure in the conformance registry and in run outputs
    kind: str = "structure"
    #: which implementation of the decoder runs: ``auto`` (compiled CPU kernels on CPU float64, pure
    #: torch elsewhere), ``numba`` or ``torch`` (the code CUDA runs, also on CPU: see ssvm_torch.devices)
    kernels: str = "auto"

    def with_kernels(self, kernels: str) -> "StructuredModel":
        """A copy of this model whose decoders use ``kernels`` (the model itself is not changed)."""
        check_choice(kernels, "kernels", KERNELS)
        model = copy.copy(self)
        model.kernels = kernels
        return model

    def compiled(self, t: torch.Tensor) -> bool:
        """Whether the compiled CPU kernels serve a decoder on ``t`` under this model's ``kernels``."""
        return self.kernels != "torch" and t.device.type == "cpu" and t.dtype == torch.float64

    # -- the structure ------------------------------------------------------------------------
    @abstractmethod
    def check_data(self, data, field: str = "data") -> None:
        """Raise :class:`~ssvm_torch.errors.SSVMInputError` naming ``field`` if ``data`` does not fit."""

    @abstractmethod
    def scores(self, w: torch.Tensor, data, idx: torch.Tensor) -> Any:
        """Factor potentials of the examples ``idx`` at ``w``: <w, phi(x_i, y)> = sum of factor scores."""

    @abstractmethod
    def augment(self, scores, data, idx: torch.Tensor) -> Any:
        """``scores`` plus the loss offsets, so that decode(augment(s)) is the loss-augmented argmax."""

    @abstractmethod
    def decode(self, scores, data, idx: torch.Tensor):
        """Exact argmax labeling of every example of the batch (a batched labelings container)."""

    @abstractmethod
    def phi(self, data, idx: torch.Tensor, labels) -> torch.Tensor:
        """Joint feature map phi(x_i, y) of a batch of labelings: (B, d)."""

    @abstractmethod
    def loss(self, data, idx: torch.Tensor, labels) -> torch.Tensor:
        """Task loss L_i(y) of a batch of labelings: (B,)."""

    @abstractmethod
    def gt(self, data, i: int):
        """The ground-truth labeling of example i (block-level form, as ``key`` accepts it)."""

    @abstractmethod
    def gt_batch(self, data, idx: torch.Tensor):
        """The ground-truth labelings of a batch, in the batched form of ``decode``."""

    @staticmethod
    @abstractmethod
    def key(labeling):
        """A hashable key of one block-level labeling (active sets and caches store labelings)."""

    @abstractmethod
    def metrics(self, w: torch.Tensor, data) -> dict:
        """Named evaluation metrics of the prediction at ``w``; ``error`` (the task's error) first."""

    def describe(self) -> dict:
        """The feature layout recorded in run outputs."""
        return {"kind": type(self).__name__, "d": self.d}

    # -- shared ---------------------------------------------------------------------------------
    def predict(self, w: torch.Tensor, data, idx: torch.Tensor | None = None):
        """Plain decoding argmax_y <w, phi(x_i, y)> of the examples ``idx`` (default: all)."""
        dev = data.device
        idx = torch.arange(data.n, device=dev) if idx is None else torch.as_tensor(idx, device=dev).reshape(-1)
        return self.decode(self.scores(w, data, idx), data, idx)

    def psi(self, data, idx: torch.Tensor, labels) -> torch.Tensor:
        """psi_i(y) = phi(x_i, y_i) - phi(x_i, y): (B, d)."""
        return self.phi(data, idx, self.gt_batch(data, idx)) - self.phi(data, idx, labels)

    def add_psi(self, targets, data, idx: torch.Tensor, labels, coefs) -> None:
        """targets[j] += sum_b coefs[j][b] psi_b(labels_b) in place for each j (the perceptron's update of w and
        of its lagged sum: one psi for both; ``coefs[j]`` (B,)). Through the dense psi of the batch here; a model
        whose features are sparse overrides it (ChainModel)."""
        psi = self.psi(data, idx, labels)
        for t, c in zip(targets, coefs):
            t += c.to(device=t.device, dtype=t.dtype) @ psi.to(t.dtype)

    def labeling_scores(self, scores, data, idx: torch.Tensor, labels) -> torch.Tensor | None:
        """<w, phi(x_b, labels_b)> (B,) from the ``scores`` that :meth:`scores` gave at w (the sum of the
        labeling's part scores), or None where the model has no such sum (the oracle then builds phi)."""
        return None

    def oracle(self, w: torch.Tensor, data, idx: torch.Tensor, phi_gt: torch.Tensor | None = None):
        """Loss-augmented decoding y* = decode(augment(scores)) and H_i(w) = L_i(y*) - <w, psi_i(y*)>
        evaluated exactly at y*: without ``phi_gt``, as L_i(y*) + s(y*) - s(y_i) from the decoder's scores where
        the model sums a labeling's part scores (:meth:`labeling_scores`; a (B, d) phi on a treebank's millions of
        features cost the perceptron's loss-augmented steps seconds each), else through phi; ``phi_gt`` (B, d), if
        given, are the batch's phi(x_i, y_i)."""
        scores = self.scores(w, data, idx)
        labels = self.decode(self.augment(scores, data, idx), data, idx)
        if phi_gt is None:
            best = self.labeling_scores(scores, data, idx, labels)
            if best is not None:
                gold = self.labeling_scores(scores, data, idx, self.gt_batch(data, idx))
                return labels, self.loss(data, idx, labels).to(best) + best - gold
        phi = self.phi(data, idx, labels)
        if phi_gt is None:
            phi_gt = self.phi(data, idx, self.gt_batch(data, idx))
        w = w.to(phi)
        return labels, self.loss(data, idx, labels).to(phi) - (phi_gt.to(phi) - phi) @ w


def feature_dtype(data) -> torch.dtype:
    """The floating dtype of a container's features (``X``, ``S`` or ``psi_table``); float64 for containers whose
    features are indices (trees, spans)."""
    for name in ("X", "S", "psi_table"):
        t = getattr(data, name, None)
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.dtype
    return torch.float64


def segment_outer(rows: torch.Tensor, a: torch.Tensor, b: torch.Tensor, B: int) -> torch.Tensor:
    """(B, A, C): sum over the items j of each row r of a[j] (outer) b[j], for items' rows ``rows`` (n,),
    a (n, A), b (n, C), as one sparse (B A, n) x dense (n, C) product: no (n, A, C) temporary (a gap pass
    over scene's 7,266 nodes with 1,771 features would need one of 200 MB)."""
    n, A = a.shape
    if B == 1:                                     # a block step's example: one dense product
        return (a.T @ b)[None]
    j = torch.arange(n, device=a.device)
    index = torch.stack([(rows[:, None] * A + torch.arange(A, device=a.device)).reshape(-1),
                         j[:, None].expand(n, A).reshape(-1)])
    S = torch.sparse_coo_tensor(index, a.reshape(-1), (B * A, n), device=a.device, check_invariants=False)
    return torch.sparse.mm(S, b).reshape(B, A, b.shape[1])
