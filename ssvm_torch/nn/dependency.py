"""``DependencyTree``: a dependency-tree layer for parsers (the biaffine parser's arc scores, SuPar's layout)
with three losses, the structured hinge, softmax-margin and the CRF, projective or not, single- or multi-root.

Scores (the conventions of :mod:`ssvm_torch.trees`): ``arc_scores`` (B, N, N), ``arc_scores[b, m, h]`` the
score of word m taking head h, position 0 the root; ``mask`` (B, N) bool, False at position 0 and on at the
words 1..n_b; optional ``label_scores`` (B, N, N, L), ``label_scores[b, m, h, l]`` the score of relation l on
the arc h -> m (-inf: relation l is forbidden on that arc; an arc whose every relation is -inf is forbidden). A
labeled tree scores s(y, l) = sum_m arc_scores[m, y_m] + label_scores[m, y_m, l_m]. The losses
(per sentence, to minimise), with Delta = c x (words with a wrong head) + c x (words with a wrong relation)
(the second term only with labels), c = 1 (``cost="hamming"``) or 1 / n_b (``"normalized"``):

* ``"hinge"``: max_{y, l} [s(y, l) + Delta] - s(gold) (Taskar et al. 2003; its gradient the arcs and
  relations of the loss-augmented tree minus the gold ones);
* ``"softmax_margin"``: log sum_{y, l} exp(s(y, l) + Delta) - s(gold) (Gimpel & Smith 2010);
* ``"crf"``: log Z - s(gold) (Koo et al. 2007 for non-projective trees; Zhang et al. 2020's tree CRF).

First-order labels factor over arcs, so each reduces to the unlabeled operation on effective arc scores:
arc + max_l (label + c [l != gold]) for the hinge, arc + logsumexp_l (label + c [l != gold]) for
softmax-margin, arc + logsumexp_l label for the CRF, arc + max_l label for decoding.

**Second order.** Every call takes ``sib_scores`` (B, N, N, N), ``sib_scores[b, m, h, s]`` the score of m and
s being adjacent dependents of h on the same side, s between them (SuPar's ``Dependency2oCRF`` layout,
:mod:`ssvm_torch.trees.sibling`): s(y, l) then adds the sibling scores of the tree's adjacent siblings, and
the three losses, decoding, log Z, the marginals, entropy and KL are those of the second-order model (relations still
factor over arcs, so the effective arc scores above carry them). Projective trees only: with
``projective=False`` sibling scores are refused (exact second-order non-projective parsing is NP-hard,
McDonald & Pereira 2006). ``first_child=True`` adds McDonald & Pereira's first-child parts: the dependent
nearest its head on each side scores ``sib_scores[m, h, h]`` (SuPar's model gives it nothing); every call
folds them into the adjacent model's scores (:func:`ssvm_torch.trees.sibling.fold_first_child`), and the
sibling marginals hold the nearest dependents' at [m, h, h].

**Partial annotation.** A negative head (or relation) at a word is unobserved: the losses then compare the
model with C, the (labeled) trees that agree with every observed head and relation -- the CRF's log Z - log Z_C,
the latent structured hinge max [s + Delta_O] - max_C s, the softmax-margin with log Z_C (Delta_O counts the
observed heads and relations only; :mod:`ssvm_torch.trees.partial`). A row with everything observed gives the
full-annotation loss bit for bit, a row with nothing observed 0.

**Under torch.compile** the checks that read tensor values (NaN or +inf scores, masks, gold heads that
are not trees of the layer's kind) are skipped inside the compiled graph, as in the chain layer: a cycle
in the gold heads then gives a finite, meaningless loss. Call :meth:`DependencyTree.check_inputs` on the
batch outside the compiled region to keep them.
"""
from __future__ import annotations

import torch
from torch import nn

from ..chain.checks import check_draws, refuse_bad_scores
from ..errors import SSVMInputError, check, check_choice
from ..trees import ops, sampling, sibling_ops
from ..trees.checks import (KERNELS, check_heads, check_partial_heads, check_scores, resolve_lengths, tracing,
                            use_numba, word_mask)
from ..trees.information import ArcFactored, Information, SiblingFactored, label_information
from ..trees.kbest import dependency_kbest
from ..trees.lawler import check_nbest
from ..trees.losses import row_cost
from ..trees.partial import join_rows, observed_heads, partial_loss
from ..trees.relations import refuse_forbidden_gold, relation_probs, relations_at
from ..trees.sibling import (check_sib_scores, first_child_marginals, fold_first_child, refuse_open_first_child,
                             sibling_score)
from .reduction import REDUCTIONS, reduce_rows

LOSSES = ("hinge", "softmax_margin", "crf")


class DependencyTree(nn.Module):
    """The tree layer (module docstring). It has no parameters: the network upstream makes the scores.

    projective: Eisner's trees (True) or every tree (False: Chu-Liu-Edmonds, the matrix-tree theorem).
    multiroot: whether several words may attach to the root (UD: no). loss: "hinge", "softmax_margin" or
    "crf". cost: "hamming", "normalized" or a number (Delta's weight per wrong head or relation). kernels:
    "auto" (compiled on CPU float32/float64, torch elsewhere), "numba" or "torch". first_child: the second
    order's first-child parts (module docstring)."""

    def __init__(self, projective: bool = True, multiroot: bool = False, loss: str = "crf", cost="hamming",
                 kernels: str = "auto", first_child: bool = False):
        super().__init__()
        check(isinstance(projective, bool), "projective", "True or False", repr(projective))
        check(isinstance(multiroot, bool), "multiroot", "True or False", repr(multiroot))
        check(isinstance(first_child, bool), "first_child", "True or False", repr(first_child))
        check(projective or not first_child, "first_child", "False with projective=False (first-child parts are "
              "second order, parsed over projective trees only)", first_child)
        self.projective, self.multiroot, self.first_child = projective, multiroot, first_child
        self.loss = check_choice(loss, "loss", LOSSES)
        self.kernels = check_choice(kernels, "kernels", KERNELS)
        check(not torch.is_tensor(cost), "cost", "'hamming', 'normalized' or a number for the layer (a cost per "
              "sentence goes to the functions: ssvm_torch.trees.dependency_hinge(..., cost=tensor (B,)))",
              f"a tensor of shape {tuple(cost.shape)}" if torch.is_tensor(cost) else None)
        row_cost(cost, torch.ones(1, dtype=torch.int64), torch.float64)          # refuses a bad cost now
        self.cost = cost

    def extra_repr(self) -> str:
        return (f"projective={self.projective}, multiroot={self.multiroot}, loss={self.loss!r}, cost={self.cost!r}, "
                f"kernels={self.kernels!r}" + (", first_child=True" if self.first_child else ""))

    # -- inputs ---------------------------------------------------------------------------------------------
    def _inputs(self, arc_scores, mask, lengths, sib_scores=None):
        S = check_scores(arc_scores)
        lengths = resolve_lengths(S, mask, lengths)
        if sib_scores is None:
            return S, lengths, None
        check(self.projective, "sib_scores", "a layer with projective=True: second-order (sibling) scores are "
              "parsed exactly over projective trees only (second-order non-projective parsing is NP-hard, "
              "McDonald & Pereira 2006)", "projective=False")
        SB = check_sib_scores(sib_scores, S)
        if not self.first_child:
            return S, lengths, SB
        refuse_open_first_child(S, SB, lengths)
        S, SB = fold_first_child(S, SB)
        return S, lengths, SB

    def _labels_in(self, S, label_scores, labels, lengths, partial: bool = False, field: str = "label_scores"):
        if label_scores is None:
            if labels is not None:
                raise SSVMInputError("labels: given without label_scores (pass both, or neither)")
            return None, None
        B, N = S.shape[0], S.shape[1]
        check(torch.is_tensor(label_scores) and label_scores.is_floating_point(), field,
              "a float tensor (B, N, N, L)", getattr(label_scores, "dtype", type(label_scores).__name__))
        check(label_scores.dim() == 4 and tuple(label_scores.shape[:3]) == (B, N, N) and label_scores.shape[3] >= 1,
              field, f"shape (B, N, N, L) = ({B}, {N}, {N}, L) like arc_scores", tuple(label_scores.shape))
        check(label_scores.device == S.device, field, f"a tensor on {S.device} like arc_scores",
              label_scores.device)
        refuse_bad_scores(label_scores.detach(), field)                 # -inf: a relation forbidden on that arc
        L = label_scores.shape[3]
        if labels is None:
            return label_scores.to(S.dtype), None
        check(torch.is_tensor(labels) and not labels.is_floating_point() and labels.dtype != torch.bool, "labels",
              f"an integer tensor (B, N) = ({B}, {N})", getattr(labels, "dtype", type(labels).__name__))
        check(tuple(labels.shape) == (B, N), "labels", f"shape (B, N) = ({B}, {N})", tuple(labels.shape))
        labels = labels.to(S.device, torch.int64)
        word = word_mask(lengths, N)
        bad = word & (((labels < 0) & (not partial)) | (labels >= L))
        if bool(bad.any()):
            b, m = (int(v) for v in bad.nonzero()[0])
            raise SSVMInputError(f"labels: expected relation ids in [0, {L - 1}] on the words"
                                 + (" (negative: unobserved)" if partial else "") + f", got {int(labels[b, m])} at "
                                 f"row {b}, word {m}")
        return label_scores.to(S.dtype), torch.where(word, labels, torch.zeros_like(labels) if not partial
                                                      else torch.full_like(labels, -1))

    def check_inputs(self, arc_scores: torch.Tensor, heads: torch.Tensor | None = None,
                     mask: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
                     sib_scores: torch.Tensor | None = None) -> None:
        """Every check :meth:`forward` runs on its inputs, for a call outside a ``torch.compile``-d region: under
        tracing the checks that read values (NaN scores, masks, gold heads that are not trees of the layer's
        kind: a cycle gives a finite loss) cannot run inside the graph, as with the chain layer's
        ``ssvm_torch.chain.refuse_bad_scores``. Raises SSVMInputError naming the field; returns None."""
        S, lengths, _ = self._inputs(arc_scores, mask, lengths, sib_scores)
        if heads is not None:
            check_heads(heads, lengths, S.shape[1], self.multiroot, self.projective,
                        compiled=use_numba(S, self.kernels))

    # -- the operations of the first or the second order ------------------------------------------------------
    def _best(self, S, SB, lengths):
        if SB is None:
            return ops.best(S, lengths, self.projective, self.multiroot, self.kernels)
        return sibling_ops.best(S, SB, lengths, self.multiroot, self.kernels)

    def _log_partition(self, S, SB, lengths):
        if SB is None:
            return ops.log_partition(S, lengths, self.projective, self.multiroot, self.kernels)
        return sibling_ops.log_partition(S, SB, lengths, self.multiroot, self.kernels)

    @staticmethod
    def _score(S, SB, heads, lengths):
        return ops.score(S, heads, lengths) if SB is None else sibling_score(S, SB, heads, lengths)

    @staticmethod
    def _summed(S, lab):
        """The arc scores of the labeled CRF's trees: S + logsumexp over relations (S itself without labels)."""
        return S if lab is None else S + torch.logsumexp(lab, 3)

    def _arc_marginals(self, S, SB, lab, lengths):
        """(the tree CRF's arc marginals (B, N, N), its sibling marginals or None), labels summed out."""
        if SB is None:
            return ops.marginals(self._summed(S, lab), lengths, self.projective, self.multiroot, self.kernels), None
        return sibling_ops.marginals(self._summed(S, lab), SB, lengths, self.multiroot, self.kernels)

    # -- the public calls -----------------------------------------------------------------------------------
    def forward(self, arc_scores: torch.Tensor, heads: torch.Tensor, mask: torch.Tensor | None = None,
                label_scores: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                reduction: str = "sum", lengths: torch.Tensor | None = None,
                sib_scores: torch.Tensor | None = None) -> torch.Tensor:
        """The loss to minimise (module docstring): per sentence with ``reduction="none"`` (B,), else its sum,
        mean over sentences, or sum over the number of words ("token_mean"). The gold ``heads`` (B, N) must be
        a tree the layer's structure can produce (projective if ``projective``, one root child unless
        ``multiroot``): the losses are defined over that set. ``sib_scores``: the second-order model. A negative
        head or relation at a word is unobserved (partial annotation, module docstring)."""
        check_choice(reduction, "reduction", REDUCTIONS)
        S, lengths, SB = self._inputs(arc_scores, mask, lengths, sib_scores)
        gold = check_partial_heads(heads, lengths, S.shape[1], self.multiroot, self.projective,
                                   compiled=use_numba(S, self.kernels))
        lab, gold_labels = self._labels_in(S, label_scores, labels, lengths, partial=True)
        if lab is not None and gold_labels is None:
            raise SSVMInputError("labels: the gold relations (B, N) are needed with label_scores for a loss")
        if lab is not None and not tracing():
            refuse_forbidden_gold(lab, gold, gold_labels, lengths)
        c = row_cost(self.cost, lengths, S.dtype)
        word = word_mask(lengths, S.shape[1])
        full = ~(observed_heads(gold, lengths) ^ word).any(1)
        if lab is not None:
            full &= ~(word & (gold_labels < 0)).any(1)
        if tracing() or bool(full.all()):
            per_row = self._full_loss(S, SB, gold, lab, gold_labels, lengths, c)
        else:
            take = lambda x, idx: None if x is None else x[idx]     # noqa: E731
            per_row = join_rows(
                full, lambda i: self._full_loss(S[i], take(SB, i), gold[i], take(lab, i), take(gold_labels, i),
                                                lengths[i], c[i]),
                lambda i: self._partial_loss(S[i], take(SB, i), gold[i], take(lab, i), take(gold_labels, i),
                                             lengths[i], c[i], i), S)
        return reduce_rows(per_row, reduction, lengths)

    def _full_loss(self, S, SB, gold, lab, gold_labels, lengths, c):
        """The loss of rows whose every head and relation is given."""
        gold_score = self._score(S, SB, gold, lengths)
        if lab is not None:
            index = gold_labels.clamp(min=0)[:, :, None, None].expand(-1, -1, S.shape[2], 1)   # -1 off the words
            picked = lab.gather(3, index)
            gold_score = gold_score + ops.score(picked[..., 0], gold, lengths)
            if self.loss != "crf":
                aug_lab = lab + self._relation_delta(lab, index, c)
        if self.loss == "crf":
            return self._log_partition(self._summed(S, lab), SB, lengths) - gold_score
        if self.loss == "softmax_margin":
            eff = S if lab is None else S + torch.logsumexp(aug_lab, 3)
            return self._log_partition(ops.augment(eff, gold, lengths, c), SB, lengths) - gold_score
        eff = S if lab is None else S + aug_lab.amax(3)
        aug = ops.augment(eff, gold, lengths, c)
        with torch.no_grad():
            y, _ = self._best(aug.detach(), None if SB is None else SB.detach(), lengths)
        return self._score(aug, SB, y, lengths) - gold_score

    @staticmethod
    def _relation_delta(lab, index, c, seen=None) -> torch.Tensor:
        """The relations' Delta (B, N, N, L), a constant added to the relation scores (its backward is the add's):
        c_b on every relation of word m but its gold one (``index``), at the words ``seen`` (default all)."""
        per_word = c.to(lab.dtype)[:, None] if seen is None else c.to(lab.dtype)[:, None] * seen.to(lab.dtype)
        return per_word[:, :, None, None].expand_as(lab).clone().scatter_(3, index, 0.0)

    def _partial_loss(self, S, SB, gold, lab, gold_labels, lengths, c, rows):
        """The loss of rows with unobserved heads or relations (:mod:`ssvm_torch.trees.partial`): relations factor
        over arcs, so C's effective arc scores take the observed relation's score where one is given and the
        max / logsumexp over relations elsewhere; the first term's, the relations' own Delta at the words whose
        relation is observed."""
        S_all = S_C = S
        if lab is not None:
            word = word_mask(lengths, S.shape[1])
            seen = word & (gold_labels >= 0)
            index = gold_labels.clamp(min=0)[:, :, None, None].expand(-1, -1, S.shape[2], 1)
            picked = lab.gather(3, index)[..., 0]
            pool = (lambda x: x.amax(3)) if self.loss == "hinge" else (lambda x: torch.logsumexp(x, 3))
            S_all = S + pool(lab if self.loss == "crf" else lab + self._relation_delta(lab, index, c, seen))
            S_C = S + torch.where(seen[..., None], picked, pool(lab))
        return partial_loss(self.loss, S_all, S_C, SB, gold, lengths, c, self.projective, self.multiroot,
                            self.kernels, rows)

    def decode(self, arc_scores: torch.Tensor, mask: torch.Tensor | None = None,
               label_scores: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
               sib_scores: torch.Tensor | None = None, *, nbest: int = 1, mbr: bool = False):
        """The best tree of every sentence: heads (B, N) int64, -1 at position 0 and off the mask; with
        ``label_scores`` also the relations (B, N) (each arc's best relation, -1 off the words). ``nbest=k > 1``:
        the k best (labeled) trees of every sentence in non-increasing score order, heads (and relations)
        (B, k, N), -1 at the ranks past a sentence's number of trees (:mod:`ssvm_torch.trees.kbest`; two
        labelings of one tree are two trees). ``mbr=True``: minimum-Bayes-risk decoding instead, the tree (or k
        trees) of the most expected correct arcs under the CRF (its marginals; with ``label_scores`` the most
        expected correct (head, relation) pairs of the labeled CRF, each arc's relation its most probable, i.e.
        expected LAS; with ``sib_scores`` the second-order CRF's marginals): Goodman 1996's maximum expected
        recall, SuPar's ``mbr``; the objective is a sum over arcs, so the first-order decoder of the layer's tree
        kind finds it exactly; arcs with -inf scores stay forbidden. No gradient."""
        check_nbest(nbest)
        check(isinstance(mbr, bool), "mbr", "True or False", repr(mbr))
        with torch.no_grad():
            S, lengths, SB = self._inputs(arc_scores, mask, lengths, sib_scores)
            lab, _ = self._labels_in(S, label_scores, None, lengths)
            if mbr:
                return self._mbr(S, SB, lab, lengths, nbest)
            if nbest > 1:
                heads, rel, _ = dependency_kbest(S, lengths, nbest, self.projective, self.multiroot, self.kernels, SB,
                                                 lab)
                return heads if lab is None else (heads, rel)
            eff = S if lab is None else S + lab.amax(3)
            heads, _ = self._best(eff, SB, lengths)
            return heads if lab is None else (heads, relations_at(lab, heads))

    def _mbr(self, S, SB, lab, lengths, nbest: int):
        """decode(mbr=True): the first-order best (or k best) trees of the arcs' expected correctness."""
        W = self._arc_marginals(S, SB, lab, lengths)[0].to(torch.float64)
        if lab is not None:                 # P(h -> m with its best relation) = mu * max_r softmax(lab)
            W = W * relation_probs(lab.to(torch.float64)).amax(3)
        W = W.masked_fill(torch.isneginf(self._summed(S, lab)), float("-inf"))
        if nbest > 1:
            heads = dependency_kbest(W, lengths, nbest, self.projective, self.multiroot, self.kernels)[0]
        else:
            heads = self._best(W, None, lengths)[0]
        return heads if lab is None else (heads, relations_at(lab, heads))

    def marginals(self, arc_scores: torch.Tensor, mask: torch.Tensor | None = None,
                  lengths: torch.Tensor | None = None, sib_scores: torch.Tensor | None = None,
                  label_scores: torch.Tensor | None = None):
        """P(h -> m) (B, N, N) under the CRF of the arc scores, zero off the words; with ``label_scores`` the
        labeled CRF's P(h -> m with relation r) (B, N, N, L) instead (the arc's marginal times the softmax of its
        relation scores: relations factor over arcs); with ``sib_scores`` the pair (arc marginals, sibling
        marginals (B, N, N, N) [modifier, head, sibling]; with ``first_child`` the nearest dependents' at
        [m, h, h]). No gradient."""
        S, lengths, SB = self._inputs(arc_scores, mask, lengths, sib_scores)
        lab, _ = self._labels_in(S, label_scores, None, lengths)
        M, MS = self._arc_marginals(S, SB, lab, lengths)
        arcs = M if lab is None else M[..., None] * relation_probs(lab).to(M.dtype)
        if SB is None:
            return arcs
        return arcs, (first_child_marginals(M, MS) if self.first_child else MS)

    def log_partition(self, arc_scores: torch.Tensor, mask: torch.Tensor | None = None,
                      lengths: torch.Tensor | None = None, sib_scores: torch.Tensor | None = None,
                      label_scores: torch.Tensor | None = None) -> torch.Tensor:
        """log Z per sentence (B,), differentiable; with ``label_scores`` the labeled CRF's (over trees and
        relations: the arc scores plus logsumexp over relations)."""
        S, lengths, SB = self._inputs(arc_scores, mask, lengths, sib_scores)
        lab, _ = self._labels_in(S, label_scores, None, lengths)
        return self._log_partition(self._summed(S, lab), SB, lengths)

    def score(self, arc_scores: torch.Tensor, heads: torch.Tensor, mask: torch.Tensor | None = None,
              lengths: torch.Tensor | None = None, sib_scores: torch.Tensor | None = None,
              label_scores: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> torch.Tensor:
        """s(heads) per sentence (B,), differentiable (any tree: no structure check beyond being a tree); with
        ``label_scores`` and the relations ``labels`` (B, N) the labeled tree's score, so that s - log Z (both
        labeled) is the log-probability of a labeled sample of :meth:`sample`."""
        S, lengths, SB = self._inputs(arc_scores, mask, lengths, sib_scores)
        lab, rel = self._labels_in(S, label_scores, labels, lengths)
        if lab is not None and rel is None:
            raise SSVMInputError("labels: the relations (B, N) are needed with label_scores to score a labeled tree")
        heads = check_heads(heads, lengths, S.shape[1], True, False, compiled=use_numba(S, self.kernels))
        if lab is None:
            return self._score(S, SB, heads, lengths)
        picked = lab.gather(3, rel[:, :, None, None].expand(-1, -1, S.shape[2], 1))[..., 0]
        return self._score(S + picked, SB, heads, lengths)

    # -- information ----------------------------------------------------------------------------------------
    def entropy(self, arc_scores: torch.Tensor, mask: torch.Tensor | None = None,
                lengths: torch.Tensor | None = None, sib_scores: torch.Tensor | None = None,
                label_scores: torch.Tensor | None = None) -> torch.Tensor:
        """H(p) = -sum_y p(y) log p(y) per sentence (B,) of the tree CRF of the arc scores (with ``sib_scores``
        the second-order CRF; with ``label_scores`` the labeled CRF of the loss, trees and relations; 0 for an
        empty sentence), differentiable: log Z - <mu, parts' scores> from the layer's log Z and marginals, its
        gradient -Hess s by Hessian-vector products; relations add the arcs' relation entropies in expectation
        (:class:`~ssvm_torch.trees.information.Information`)."""
        return self._information(arc_scores, None, mask, lengths, sib_scores, None, label_scores, None)[0]

    def kl(self, arc_scores: torch.Tensor, other_scores: torch.Tensor, mask: torch.Tensor | None = None,
           lengths: torch.Tensor | None = None, sib_scores: torch.Tensor | None = None,
           other_sib_scores: torch.Tensor | None = None, label_scores: torch.Tensor | None = None,
           other_label_scores: torch.Tensor | None = None) -> torch.Tensor:
        """KL(p || q) per sentence (B,): p the tree CRF of ``arc_scores``, q that of ``other_scores`` (the same
        shape; the same trees: this layer's projectivity and root rule; second order: both models' sibling
        scores, ``sib_scores`` and ``other_sib_scores``; labeled: both models' relation scores, ``label_scores``
        and ``other_label_scores``, the same relations), differentiable w.r.t. all; +inf where p gives weight to a
        part q forbids (-inf)."""
        return self._information(arc_scores, other_scores, mask, lengths, sib_scores, other_sib_scores, label_scores,
                                 other_label_scores)[1]

    def cross_entropy(self, arc_scores: torch.Tensor, other_scores: torch.Tensor, mask: torch.Tensor | None = None,
                      lengths: torch.Tensor | None = None, sib_scores: torch.Tensor | None = None,
                      other_sib_scores: torch.Tensor | None = None, label_scores: torch.Tensor | None = None,
                      other_label_scores: torch.Tensor | None = None) -> torch.Tensor:
        """H(p, q) = H(p) + KL(p || q) per sentence (B,), p and q as in :meth:`kl`."""
        H, D = self._information(arc_scores, other_scores, mask, lengths, sib_scores, other_sib_scores, label_scores,
                                 other_label_scores)
        return H + D

    @staticmethod
    def _both(given, other, field: str, what: str):
        check((given is None) == (other is None), field, f"given together with {what} or neither",
              "None" if other is None else f"a tensor without {what.split(' ')[0]}")

    def _information(self, arc_scores, other_scores, mask, lengths, sib_scores, other_sib_scores, label_scores,
                     other_label_scores):
        S, lengths, SB = self._inputs(arc_scores, mask, lengths, sib_scores)
        lab, _ = self._labels_in(S, label_scores, None, lengths)
        FH = FK = labq = Q = None
        if other_scores is not None:
            self._both(sib_scores, other_sib_scores, "other_sib_scores", "sib_scores (both models second order)")
            self._both(label_scores, other_label_scores, "other_label_scores", "label_scores (both models labeled)")
            Q = self._other_scores(other_scores, S)
            if other_sib_scores is not None:
                QB = check_sib_scores(other_sib_scores, Q, "other_sib_scores")
                if self.first_child:
                    refuse_open_first_child(Q, QB, lengths, "other_sib_scores")
                    Q, QB = fold_first_child(Q, QB)
            if lab is not None:
                labq, _ = self._labels_in(S, other_label_scores, None, lengths, field="other_label_scores")
                check(labq.shape == lab.shape, "other_label_scores", f"the label scores' shape {tuple(lab.shape)}",
                      tuple(labq.shape))
        if lab is not None:                 # relations given the tree: H and KL add the arcs' relation terms
            lse, FH, lse_q, FK = label_information(lab, labq)
            S = S + lse
            Q = Q if labq is None else Q + lse_q
        if SB is None:
            return Information.apply(S, None if other_scores is None else Q, lengths, self._structure(), FH, FK)
        structure = SiblingFactored(S.shape[1], self.multiroot, self.kernels)
        Qp = None if other_scores is None else structure.pack(Q, QB)
        arcs_only = lambda F: None if F is None else structure.pack(F, torch.zeros_like(SB))   # noqa: E731
        return Information.apply(structure.pack(S, SB), Qp, lengths, structure, arcs_only(FH), arcs_only(FK))

    def sample(self, arc_scores: torch.Tensor, mask: torch.Tensor | None = None,
               label_scores: torch.Tensor | None = None, lengths: torch.Tensor | None = None, n: int = 1,
               generator: torch.Generator | None = None, sib_scores: torch.Tensor | None = None):
        """n exact samples y ~ p(y) of every sentence's tree CRF (the layer's kind of trees): heads (B, n, N)
        int64, -1 at position 0 and off the words, batch-first as :meth:`decode`'s n best; with ``label_scores``
        also the relations (B, n, N) (-1 off the words), drawn exactly from the labeled CRF: the tree from the
        arc scores plus logsumexp_l label_scores, then each arc's relation from the softmax of its label scores
        (relations factor over arcs). Projective trees: Eisner's inside chart and top-down draws of the split
        points (compiled on the CPU); every tree: Colbourn's sequential algorithm on the inverse Laplacian
        (:mod:`ssvm_torch.trees.sampling`); with ``sib_scores`` the second-order CRF's trees, drawn top-down from
        its inside chart (compiled on the CPU, in torch elsewhere). ``generator`` (on the
        scores' device) makes the draws reproducible. No gradient (a score-function estimator uses :meth:`score`
        of the samples)."""
        with torch.no_grad():
            S, lengths, SB = self._inputs(arc_scores, mask, lengths, sib_scores)
            check_draws(n, generator, S.device)
            lab, _ = self._labels_in(S, label_scores, None, lengths)
            eff = self._summed(S, lab)
            if SB is None:
                heads = sampling.sample(eff, lengths, self.projective, self.multiroot, n, generator, self.kernels)
            else:
                heads = sampling.second_order_samples(eff, SB, lengths, self.multiroot, n, generator, self.kernels)
            if lab is None:
                return heads
            picked = lab[:, None].expand(-1, n, -1, -1, -1).gather(
                3, heads.clamp(min=0)[..., None, None].expand(-1, -1, -1, 1, lab.shape[3]))[:, :, :, 0]
            rel = sampling.draw_categorical(picked, 1, generator)[:, 0]
            return heads, torch.where(heads >= 0, rel, torch.full_like(rel, -1))

    def _structure(self) -> ArcFactored:
        return ArcFactored(self.projective, self.multiroot, self.kernels)

    @staticmethod
    def _other_scores(other_scores, S):
        check(torch.is_tensor(other_scores) and other_scores.is_floating_point(), "other_scores",
              "a float tensor (B, N, N)", getattr(other_scores, "dtype", type(other_scores).__name__))
        check(other_scores.shape == S.shape and other_scores.device == S.device, "other_scores",
              f"the arc scores' shape {tuple(S.shape)} on {S.device}", (tuple(other_scores.shape), other_scores.device))
        refuse_bad_scores(other_scores.detach(), "other_scores")
        return other_scores.to(S.dtype)
