"""Second-order (adjacent-sibling) dependency parsing as a structured SVM: McDonald & Pereira 2006's model (their
second-order projective Eisner algorithm; here :mod:`ssvm_torch.trees.sibling_ops`, SuPar's layout), trained by
the toolkit's Frank-Wolfe solvers instead of MIRA. Data-free; the compact block store is
:mod:`ssvm_torch.stores.sibling_tree`.

phi(x, y) = sum over the words m of f(x, y_m -> m) (the first-order arc features of :class:`DependencyModel`)
+ sum over the words m with an adjacent sibling s_m of g(x, y_m, s_m, m) (the sibling features of
:mod:`ssvm_torch.data.sibling_features`, ids after the arc features') + with the design's ``first_child`` (the
default) sum over the other words of g(x, y_m, y_m, m), McDonald & Pereira 2006's first-child part s(h, -, m).
So <w, phi(x, y)> is the tree's score under arc scores theta(h -> m), sibling scores sigma(h, s, m) and
first-child scores sigma(h, h, m) = SB[m, h, h]; the torch path folds the last into the first two
(:func:`~ssvm_torch.trees.sibling.fold_first_child`) for the trees package's decoders and :func:`~ssvm_torch.trees.sibling.sibling_score`,
the compiled kernels read SB[m, h, h] themselves.
Task loss as the first-order model's (Hamming over heads, or normalized): it decomposes over arcs, so loss
augmentation changes the arc scores only. Projective trees (exact second-order non-projective decoding is
NP-hard, McDonald & Pereira 2006); a gold tree outside that space joins its own sentence's space, as in
:class:`DependencyModel` (the hinge stays >= 0).

Labelings: heads (B, N) int64 rows as :class:`DependencyModel`'s. With partial annotation
(``DependencyData.observed``) the loss counts the observed words only and :meth:`complete` is the latent SSVM's
completion (ssvm_torch/latent.py).
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from ..data.sibling_features import sibling_ids, sibling_scores_torch
from ..data.trees import DependencyData
from ..devices import from_host, to_host
from ..errors import SSVMInputError, check
from ..trees import sibling_ops
from ..trees.checks import parallel_rows, word_mask
from ..trees.sibling import adjacent_siblings, fold_first_child, sibling_score
from .dependency import DependencyModel

#: sentences decoded per batch on the torch path: its sibling scores are (B, N, N, N)
TORCH_CELLS = 1 << 24


class SiblingDependencyModel(DependencyModel):
    """Arc-factored plus adjacent-sibling trees over :class:`DependencyData` carrying sibling features
    (``data.sib``); ``n_features`` counts both kinds."""

    kind = "sibling-dependency"

    def __init__(self, n_features: int, projective: bool = True, multiroot: bool = False, loss: str = "hamming"):
        check(projective is True, "projective", "True (second-order decoding is projective: exact second-order "
              "non-projective decoding is NP-hard, McDonald & Pereira 2006)", projective)
        super().__init__(n_features, True, multiroot, loss)

    def describe(self) -> dict:
        return {**super().describe(), "kind": self.kind,
                "phi": "sum over words of the arc features of head -> word, plus the sibling features of (head, "
                       "adjacent sibling, word) or, for a head's nearest dependent on each side, of (head, first "
                       "child, word) where the design has first-child parts"}

    def check_data(self, data, field: str = "data") -> None:
        super().check_data(data, field)
        check(data.sib is not None, f"{field}.sib", "sibling features (load_ud_dependencies(..., siblings=...) or "
              "a SiblingDesign)", None)

    # -- scores ---------------------------------------------------------------------------------------------
    def part_scores(self, w, data: DependencyData, idx):
        """(arc scores (B, N, N), sibling scores (B, N, N, N)) of the sentences ``idx``: SB[b, m, h, s] the
        score of the part (h, s, m), s = h a first-child part (-inf where the design has none)."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        S = self.arc_scores(w, data, idx)
        w = torch.as_tensor(w).to(data.device)
        N = S.shape[1]
        if self.compiled(w):
            return S, self._sibling_scores_host(w, data, idx, N)
        return S, sibling_scores_torch(data.sib, w, data.offsets[idx], data.lengths[idx], N)

    @staticmethod
    def _sibling_scores_host(w, data, idx, N):
        from ..data.sibling_keys import fill_sibling_scores
        des = data.sib.host()
        wh, starts, lengths = to_host(w), to_host(data.offsets), to_host(data.lengths)
        out = np.full((len(idx), N, N, N), -np.inf)
        for b, i in enumerate(to_host(idx).tolist()):
            fill_sibling_scores(*des, int(starts[i]), int(lengths[i]), wh, out[b])
        return from_host(out, data.device)

    def scores(self, w, data: DependencyData, idx):
        """(arc scores (B, N, N), sibling scores (B, N, N, N)) of the sentences ``idx`` in the trees package's
        layout, first-child parts folded in (:func:`~ssvm_torch.trees.sibling.fold_first_child`) when the design has them."""
        S, SB = self.part_scores(w, data, idx)
        return fold_first_child(S, SB) if data.sib.first_child else (S, SB)

    def augment(self, scores, data: DependencyData, idx):
        S, SB = scores
        return super().augment(S, data, idx), SB

    def decode(self, scores, data: DependencyData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        S, SB = scores
        heads, _ = sibling_ops.best(S, SB, data.lengths[idx], self.multiroot,
                                    "torch" if self.kernels == "torch" else "auto")
        return heads

    def first_order(self) -> DependencyModel:
        """The first-order model over the same weights: the arc features only (the sibling weights are never read)."""
        return DependencyModel(self.d, True, self.multiroot, self.loss_name).with_kernels(self.kernels)

    @staticmethod
    def tree_score(scores, heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The trees' arc and sibling scores (the oracle's terms: :meth:`DependencyModel.oracle`)."""
        S, SB = scores
        return sibling_score(S, SB, heads, lengths)

    # -- features -------------------------------------------------------------------------------------------
    def phi(self, data: DependencyData, idx, labels) -> torch.Tensor:
        """Dense (B, d): the arc features' counts and the sibling parts' (small d: tests, the generic stores)."""
        out = super().phi(data, idx, labels)
        rows, ids = self._sibling_ids(data, idx, labels)
        out.index_put_((rows.to(out.device), ids.to(out.device)), torch.ones(ids.shape[0], dtype=out.dtype,
                                                                              device=out.device), accumulate=True)
        return out

    def add_psi(self, targets, data: DependencyData, idx, labels, coefs) -> None:
        """targets[j] += sum_b coefs[j][b] psi_b(labels_b) in place: the arc features by
        :meth:`DependencyModel.add_psi`, then the sibling parts' ids of the gold tree up and of the labeling down
        (the parts :meth:`phi` counts), without a (B, d) temporary."""
        super().add_psi(targets, data, idx, labels, coefs)
        dev = targets[0].device
        for trees, sign in ((self.gt_batch(data, idx), 1.0), (labels, -1.0)):
            rows, ids = (t.to(dev) for t in self._sibling_ids(data, idx, trees))
            for target, coef in zip(targets, coefs):
                target.index_add_(0, ids, sign * coef.to(device=dev, dtype=target.dtype)[rows])

    def _sibling_ids(self, data: DependencyData, idx, labels) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, id) pairs: the feature ids of every sibling part of each labeling's tree (rows in order, an id once
        per part that has it; s = h: a first-child part, the nearest dependent's none without first_child)."""
        dev = data.device
        idx = torch.as_tensor(idx, device=dev).reshape(-1)
        labels = torch.as_tensor(labels, device=dev).reshape(idx.shape[0], -1)
        lengths = data.lengths[idx]
        heads = torch.full((idx.shape[0], int(lengths.max()) + 1), -1, dtype=torch.int64, device=dev)
        heads[:, 1:] = torch.where(word_mask(lengths, heads.shape[1])[:, 1:], labels[:, 1:heads.shape[1]], -1)
        sib = adjacent_siblings(heads, lengths)
        word = word_mask(lengths, heads.shape[1])
        if not data.sib.first_child:                 # the nearest dependent has no part then
            word &= sib != 0
        b, m = torch.nonzero(word, as_tuple=True)
        h, s = heads[b, m], sib[b, m]
        starts = data.offsets.to(dev)[idx][b]
        part, ids = sibling_ids(data.sib, starts, h, torch.where(s > 0, s, h), m)
        return b[part], ids

    # -- prediction and completion --------------------------------------------------------------------------
    @staticmethod
    def length_batches(data: DependencyData):
        """The sentences in batches of at most :data:`TORCH_CELLS` sibling scores, sorted by length (index
        tensors)."""
        order = torch.argsort(data.lengths, stable=True)
        start = 0
        while start < data.n:
            stop = start + 1
            while stop < data.n and (stop - start + 1) * (int(data.lengths[order[stop]]) + 1) ** 3 <= TORCH_CELLS:
                stop += 1
            yield order[start:stop]
            start = stop

    @staticmethod
    def _scatter(out: torch.Tensor, data: DependencyData, idx: torch.Tensor, heads: torch.Tensor) -> None:
        """out[the words of the sentences idx] = the heads rows (B, N) of those sentences."""
        lengths = data.lengths[idx]
        words = data.offsets[idx].repeat_interleave(lengths) + torch.cat(
            [torch.arange(int(n), device=data.device) for n in lengths.tolist()])
        out[words] = heads[:, 1:][word_mask(lengths, heads.shape[1])[:, 1:]]

    def predict_flat(self, w: torch.Tensor, data: DependencyData) -> torch.Tensor:
        """The best second-order tree of every sentence at w, flat heads (W,) aligned with ``data.heads``: on the
        CPU in float64 one compiled call over the sentences (over torch's threads: --threads), else the batched
        model (:meth:`length_batches`)."""
        w = torch.as_tensor(w)
        if self.compiled(w) and data.device.type == "cpu":
            from ..data.sibling_keys import nb_sib_decode_all
            ades = tuple(np.ascontiguousarray(to_host(t)) for t in (data.offsets, data.arc_off, data.ptr, data.ids,
                                                                   data.tok_ptr, data.tok_ids))
            labels = np.empty(int(data.offsets[-1]), dtype=np.int64)
            chunks = numba.get_num_threads() if parallel_rows(data.n) else 1
            nb_sib_decode_all(ades, data.sib.host(), np.ascontiguousarray(to_host(w)), self.multiroot,
                              int(data.lengths.max()) + 1, chunks, labels)
            return from_host(labels, data.device)
        out = torch.empty_like(data.heads)
        for idx in self.length_batches(data):
            self._scatter(out, data, idx, self.predict(w, data, idx))
        return out

    def complete(self, w: torch.Tensor, data: DependencyData, batch: int = 0) -> torch.Tensor:
        """The CCCP completion (ssvm_torch/latent.py): h_i = argmax over the projective trees that keep every
        observed head of <w, phi(x_i, h)> (the second-order decoder with every other head of an observed word at
        -inf), flat heads (W,). Where no projective tree keeps the observed heads (they cross) the sentence is
        completed by Chu-Liu-Edmonds on its arc scores alone (its sibling scores left out: an approximate
        completion, whose tree then joins its sentence's space as a non-projective gold tree does); observed heads
        that no single-root tree holds are refused by name. ``batch`` is unused (batches by size)."""
        from ..trees import ops
        self.check_data(data)
        out = torch.empty_like(data.heads)
        kernels = "torch" if self.kernels == "torch" else "auto"
        for idx in self.length_batches(data):
            lengths = data.lengths[idx]
            S, SB = self.scores(w, data, idx)
            gold = data.padded_loss_heads(idx)[:, :S.shape[1]]
            keep = torch.zeros_like(S, dtype=torch.bool).scatter_(2, gold.clamp(min=0)[:, :, None], True)
            S = S.masked_fill((gold >= 0)[:, :, None] & ~keep, float("-inf"))
            heads, best = sibling_ops.best(S, SB, lengths, self.multiroot, kernels, refuse=False)
            none = best < -1e29
            if bool(none.any()):
                rows = none.nonzero()[:, 0]
                heads[rows], best[rows] = ops.best(S[rows], lengths[rows], False, self.multiroot, kernels,
                                                   refuse=False)
                none = best < -1e29
            if bool(none.any()):
                b = int(idx[none.nonzero()[0, 0]])
                raise SSVMInputError(f"data.observed: sentence {b}: no {'' if self.multiroot else 'single-root '}"
                                     "tree keeps every observed head")
            self._scatter(out, data, idx, heads)
        return out
