"""``ConstituencyTree``: a binary constituency-tree layer for span parsers (a network's span scores, SuPar's
``ConstituencyCRF`` layout) with three losses, the structured hinge, softmax-margin and the TreeCRF.

Scores (the conventions of :mod:`ssvm_torch.spans`): ``span_scores`` (B, N+1, N+1), ``span_scores[b, i, j]`` the
score of the span of words i..j-1, fenceposts 0..n_b; optional ``label_scores`` (B, N+1, N+1, L) (Stern et al.
2017's and SuPar's second head: a labeled tree scores s(y, l) = sum over its spans of span_scores[i, j] +
label_scores[i, j, l_ij]). Rows by ``mask`` (B, N) bool (the words) or ``lengths`` (B,). Trees are charts
(B, N+1, N+1): bool without labels, int64 labels with -1 off the tree with them (binarize n-ary trees first,
as SuPar does: a binary tree over n words holds 2n - 1 spans). The losses (per sentence, to minimise), with
Delta = c x (the spans of y not in the gold tree; with labels a span with another label counts), c = 1
(``cost="hamming"``) or 1 / n_b (``"normalized"``):

* ``"hinge"``: max_y [s(y) + Delta] - s(gold) (Taskar et al. 2004's max-margin parsing; Stern et al. 2017);
* ``"softmax_margin"``: log sum_y exp(s(y) + Delta) - s(gold) (Gimpel & Smith 2010);
* ``"crf"``: log Z - s(gold) (the TreeCRF of Finkel et al. 2008 and Zhang et al. 2020).

Labels are free given the spans, so every operation is one CKY on the reduced span scores (:mod:`ssvm_torch.spans.ops`).

**Partial brackets.** ``forward(..., partial=True)`` reads each chart as the observed brackets only (Pereira &
Schabes 1992): the losses then compare the model with C, the trees that contain them -- the CRF's log Z - log Z_C,
the latent hinge max [s + Delta_O] - max_C s, the softmax-margin with log Z_C, Delta_O counting the observed
brackets missed (:mod:`ssvm_torch.spans.partial`). A row whose chart is a whole tree gives the full loss bit for
bit, a row with nothing observed 0.
"""
from __future__ import annotations

import torch
from torch import nn

from ..chain.checks import check_draws
from ..errors import check, check_choice
from ..spans import losses as span_losses, ops
from ..spans.losses import refuse_infinite_gold
from ..spans.kbest import span_kbest
from ..spans.checks import KERNELS, check_charts, check_span_scores, resolve_lengths
from ..spans.information import SpanTrees
from ..trees.information import Information, label_information
from ..trees.lawler import check_nbest
from ..trees.losses import row_cost
from .reduction import REDUCTIONS, reduce_rows

LOSSES = ("hinge", "softmax_margin", "crf")


class ConstituencyTree(nn.Module):
    """The span layer (module docstring). It has no parameters: the network upstream makes the scores.

    loss: "hinge", "softmax_margin" or "crf". cost: "hamming", "normalized" or a number (Delta's weight per
    wrong span). kernels: "auto" (compiled on CPU float32/float64, torch elsewhere), "numba" or "torch"."""

    def __init__(self, loss: str = "crf", cost="hamming", kernels: str = "auto"):
        super().__init__()
        self.loss = check_choice(loss, "loss", LOSSES)
        self.kernels = check_choice(kernels, "kernels", KERNELS)
        check(not torch.is_tensor(cost), "cost", "'hamming', 'normalized' or a number for the layer (a cost per "
              "sentence goes to the functions: ssvm_torch.spans.span_hinge(..., cost=tensor (B,)))",
              f"a tensor of shape {tuple(cost.shape)}" if torch.is_tensor(cost) else None)
        row_cost(cost, torch.ones(1, dtype=torch.int64), torch.float64)          # refuses a bad cost now
        self.cost = cost

    def extra_repr(self) -> str:
        return f"loss={self.loss!r}, cost={self.cost!r}, kernels={self.kernels!r}"

    def _inputs(self, span_scores, label_scores, mask, lengths):
        """(S, lengths): the (labeled) scores of the model, S = span_scores[..., None] + label_scores."""
        S = check_span_scores(span_scores)
        check(S.dim() == 3, "span_scores", "shape (B, N+1, N+1) (labels go to label_scores)", tuple(S.shape))
        lengths = resolve_lengths(S, mask, lengths)
        if label_scores is None:
            return S, lengths
        return S[..., None] + self._labels(label_scores, S), lengths

    @staticmethod
    def _labels(label_scores, S, field: str = "label_scores") -> torch.Tensor:
        """The checked label scores (B, N+1, N+1, L) in S's dtype."""
        lab = check_span_scores(label_scores, field)
        check(lab.dim() == 4 and lab.shape[:3] == S.shape, field,
              f"shape (B, N+1, N+1, L) = {tuple(S.shape)} + (L,) like span_scores", tuple(lab.shape))
        check(lab.device == S.device, field, f"a tensor on {S.device} like span_scores", lab.device)
        return lab.to(S.dtype)

    def forward(self, span_scores: torch.Tensor, charts: torch.Tensor, mask: torch.Tensor | None = None,
                label_scores: torch.Tensor | None = None, reduction: str = "sum",
                lengths: torch.Tensor | None = None, partial: bool = False) -> torch.Tensor:
        """The loss to minimise (module docstring): per sentence with ``reduction="none"`` (B,), else its sum,
        mean over sentences, or sum over the number of words ("token_mean"). The gold ``charts`` must be binary
        trees over the rows' words (bool charts; int64 label charts with ``label_scores``), or with ``partial``
        the observed brackets of each row (partial brackets, module docstring)."""
        check_choice(reduction, "reduction", REDUCTIONS)
        S, lengths = self._inputs(span_scores, label_scores, mask, lengths)
        gold = check_charts(charts, S, lengths, partial=partial, kernels=self.kernels)
        refuse_infinite_gold(S, gold, lengths)
        per_row = span_losses.row_losses(self.loss, S, gold, lengths, row_cost(self.cost, lengths, S.dtype),
                                         self.kernels, partial)
        return reduce_rows(per_row, reduction, lengths)

    def decode(self, span_scores: torch.Tensor, mask: torch.Tensor | None = None,
               label_scores: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
               mbr: bool = False, *, nbest: int = 1) -> torch.Tensor:
        """The best tree of every sentence as a chart: bool, or with ``label_scores`` int64 labels (each span its
        best label) with -1 off the tree; with ``mbr`` the tree of the most expected correct (labeled) spans under
        the CRF of the scores (:func:`ssvm_torch.spans.ops.mbr_best`). ``nbest=k > 1``: the k best trees of every
        sentence in non-increasing order (B, k, N+1, N+1), empty charts at the ranks past a sentence's number of
        trees (:mod:`ssvm_torch.spans.kbest`; two labelings of one bracketing are two trees). No gradient."""
        check(isinstance(mbr, bool), "mbr", "True or False", repr(mbr))
        check_nbest(nbest)
        with torch.no_grad():
            S, lengths = self._inputs(span_scores, label_scores, mask, lengths)
            if nbest > 1:
                return span_kbest(ops.mbr_scores(S, lengths, self.kernels) if mbr else S, lengths, nbest,
                                  self.kernels)[0]
            return (ops.mbr_best if mbr else ops.best)(S, lengths, self.kernels)[0]

    def marginals(self, span_scores: torch.Tensor, mask: torch.Tensor | None = None,
                  label_scores: torch.Tensor | None = None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """P(span [with label]) under the TreeCRF, the shape of the (labeled) scores, zero off the spans. No
        gradient."""
        S, lengths = self._inputs(span_scores, label_scores, mask, lengths)
        return ops.marginals(S, lengths, self.kernels)

    def log_partition(self, span_scores: torch.Tensor, mask: torch.Tensor | None = None,
                      label_scores: torch.Tensor | None = None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """log Z per sentence (B,), differentiable."""
        S, lengths = self._inputs(span_scores, label_scores, mask, lengths)
        return ops.log_partition(S, lengths, self.kernels)

    def score(self, span_scores: torch.Tensor, charts: torch.Tensor, mask: torch.Tensor | None = None,
              label_scores: torch.Tensor | None = None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """s(tree) per sentence (B,), differentiable."""
        S, lengths = self._inputs(span_scores, label_scores, mask, lengths)
        return ops.score(S, check_charts(charts, S, lengths, kernels=self.kernels), lengths)

    def sample(self, span_scores: torch.Tensor, mask: torch.Tensor | None = None,
               label_scores: torch.Tensor | None = None, lengths: torch.Tensor | None = None, n: int = 1,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """n exact samples of every sentence's TreeCRF, batch-first as :meth:`decode`'s n best: bool charts
        (B, n, N+1, N+1), or with ``label_scores`` int64 label charts with -1 off the tree (each drawn span's label
        from the softmax of its label scores). Inside chart, then top-down draws of the split points, compiled on
        the CPU, in torch elsewhere (:func:`ssvm_torch.spans.ops.sample`); ``generator`` (on the scores' device)
        makes the draws reproducible. No gradient (a score-function estimator uses :meth:`score` of the samples)."""
        with torch.no_grad():
            S, lengths = self._inputs(span_scores, label_scores, mask, lengths)
            check_draws(n, generator, S.device)
            return ops.sample(S, lengths, n, generator, self.kernels)

    # -- information ----------------------------------------------------------------------------------------
    def entropy(self, span_scores: torch.Tensor, mask: torch.Tensor | None = None,
                lengths: torch.Tensor | None = None, label_scores: torch.Tensor | None = None) -> torch.Tensor:
        """H(p) per sentence (B,) of the TreeCRF over binary trees (with ``label_scores`` over labeled trees; 0
        for an empty sentence), differentiable: log Z - <mu, S> from the compiled inside-outside, the gradient a
        Hessian-vector product (:mod:`ssvm_torch.spans.information`); labels add each span's label entropy in
        expectation (:class:`~ssvm_torch.trees.information.Information`)."""
        return self._information(span_scores, None, mask, lengths, label_scores, None)[0]

    def kl(self, span_scores: torch.Tensor, other_scores: torch.Tensor, mask: torch.Tensor | None = None,
           lengths: torch.Tensor | None = None, label_scores: torch.Tensor | None = None,
           other_label_scores: torch.Tensor | None = None) -> torch.Tensor:
        """KL(p || q) per sentence (B,): p, q the TreeCRFs of ``span_scores`` and ``other_scores`` (the same
        shape; labeled: both models' label scores, the same labels), differentiable w.r.t. all; +inf where p
        gives weight to a span q forbids (-inf)."""
        return self._information(span_scores, other_scores, mask, lengths, label_scores, other_label_scores)[1]

    def cross_entropy(self, span_scores: torch.Tensor, other_scores: torch.Tensor, mask: torch.Tensor | None = None,
                      lengths: torch.Tensor | None = None, label_scores: torch.Tensor | None = None,
                      other_label_scores: torch.Tensor | None = None) -> torch.Tensor:
        """H(p, q) = H(p) + KL(p || q) per sentence (B,), p and q as in :meth:`kl`."""
        H, D = self._information(span_scores, other_scores, mask, lengths, label_scores, other_label_scores)
        return H + D

    def _information(self, span_scores, other_scores, mask, lengths, label_scores, other_label_scores):
        """(H, KL): a labeled tree's labels factor over its spans, so H and KL are the unlabeled TreeCRF's of the
        span scores plus logsumexp over labels, plus each span's label entropy / KL in expectation
        (:func:`~ssvm_torch.trees.information.label_information`)."""
        S, lengths = self._inputs(span_scores, None, mask, lengths)
        lab = None if label_scores is None else self._labels(label_scores, S)
        Q = None
        if other_scores is not None:
            check((label_scores is None) == (other_label_scores is None), "other_label_scores",
                  "given together with label_scores (both models labeled) or neither",
                  "None" if other_label_scores is None else "a tensor without label_scores")
            Q = self._other_scores(other_scores, S)
        if lab is None:
            return Information.apply(S, Q, lengths, SpanTrees(self.kernels))
        labq = None
        if Q is not None:
            labq = self._labels(other_label_scores, S, "other_label_scores")
            check(labq.shape == lab.shape, "other_label_scores", f"the label scores' shape {tuple(lab.shape)}",
                  tuple(labq.shape))
        lse, FH, lse_q, FK = label_information(lab, labq)
        Q = None if Q is None else Q + lse_q
        return Information.apply(S + lse, Q, lengths, SpanTrees(self.kernels), FH, FK)

    @staticmethod
    def _other_scores(other_scores, S):
        Q = check_span_scores(other_scores, "other_scores")
        check(Q.shape == S.shape and Q.device == S.device, "other_scores",
              f"the span scores' shape {tuple(S.shape)} on {S.device}", (tuple(Q.shape), Q.device))
        return Q.to(S.dtype)
