"""First-order (arc-factored) dependency parsing as a structured SVM (McDonald, Crammer & Pereira 2005:
projective trees by Eisner's algorithm; McDonald, Pereira, Ribarov & Hajic 2005: non-projective trees by
Chu-Liu-Edmonds), data-free; the compact block store is :mod:`ssvm_torch.stores.tree`.

phi(x, y) = sum over the words m of f(x, y_m -> m), the binary arc features of
:class:`~ssvm_torch.data.trees.DependencyData` (d = the feature dictionary's size), so <w, phi(x, y)> is the
sum of the arc scores theta(h -> m) = <w, f(x, h -> m)>: the scores of :mod:`ssvm_torch.trees` in its layout
(B, N, N) [modifier, head], -inf where no arc may go. Task loss: ``loss="hamming"`` the number of words with a
wrong head (McDonald et al.'s), ``"normalized"`` that number over the sentence's length; either decomposes
over arcs, so loss augmentation adds c_i to every arc that is not a gold arc. With partial annotation
(``DependencyData.observed``) it counts the observed words only: an unobserved word's arcs cost nothing, and
:meth:`DependencyModel.complete` is the latent SSVM's completion (ssvm_torch/latent.py).

Output space: projective or all trees, single-root (UD's rule, the default) or not. A gold tree outside that
space (a non-projective tree under the projective decoder: 2.3% of EWT's training sentences) joins its own
sentence's space, so that the hinge H_i = max_y L_i(y) - <w, psi_i(y)> is >= 0 (the corner y_i always
exists) and the duality gap keeps its meaning; at prediction the decoder's space is all there is.

Labelings, as this model's interface sees them: rows of the tree package's layout, heads (B, N) int64 with -1
at position 0 and beyond each sentence (a block's labeling is such a row, of any length > n_i). The block
store (:mod:`ssvm_torch.stores.tree`) keeps its own compact form, the heads of the words (n_i,).
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.trees import DependencyData
from ..devices import from_host, to_host
from ..errors import SSVMInputError, check
from ..oracles.tree_kernels import nb_decode_all
from ..trees import ops
from ..trees.checks import tree_faults, word_mask
from .base import StructuredModel
from .chain_index import csr_row_nonzeros


def _word_steps(lengths: torch.Tensor) -> torch.Tensor:
    """0..n_i-1 for every sentence, concatenated."""
    starts = torch.cumsum(lengths, 0) - lengths
    return torch.arange(int(lengths.sum()), device=lengths.device) - starts.repeat_interleave(lengths)


class DependencyModel(StructuredModel):
    """Arc-factored trees over :class:`DependencyData` with ``n_features`` binary arc features."""

    kind = "dependency"
    LOSSES = ("hamming", "normalized")

    def __init__(self, n_features: int, projective: bool = True, multiroot: bool = False, loss: str = "hamming"):
        check(isinstance(n_features, int) and n_features >= 1, "n_features", "an int >= 1", n_features)
        check(loss in self.LOSSES, "loss", f"one of {self.LOSSES}", repr(loss))
        self.d = int(n_features)
        self.projective, self.multiroot, self.loss_name = bool(projective), bool(multiroot), loss

    @classmethod
    def for_data(cls, data: DependencyData, projective: bool = True, multiroot: bool = False,
                 loss: str = "hamming") -> "DependencyModel":
        return cls(data.n_features, projective, multiroot, loss)

    def describe(self) -> dict:
        return {"kind": "dependency", "d": self.d, "projective": self.projective, "multiroot": self.multiroot,
                "loss": self.loss_name, "phi": "sum over words of the binary features of the arc head -> word"}

    def check_data(self, data, field: str = "data") -> None:
        check(isinstance(data, DependencyData), field, "a DependencyData", type(data).__name__)
        check(data.n_features == self.d, f"{field}.n_features", f"{self.d} arc features", data.n_features)

    def costs(self, lengths: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
        """The loss of one wrong head per sentence: 1 (Hamming) or 1/n_i (normalized)."""
        return torch.ones_like(lengths, dtype=dtype) if self.loss_name == "hamming" else 1.0 / lengths.to(dtype)

    def gold_in_space(self, data: DependencyData) -> torch.Tensor:
        """(n,) bool: whether each sentence's gold tree is one the decoder can return (module docstring)."""
        gold = data.padded_heads()
        return tree_faults(gold, data.lengths, self.multiroot, self.projective) == 0

    # -- scores ---------------------------------------------------------------------------------------------
    def arc_scores(self, w: torch.Tensor, data: DependencyData, idx) -> torch.Tensor:
        """theta of every arc of the sentences ``idx`` in the tree layout (B, N, N), -inf where no arc goes."""
        dev = data.device
        idx = torch.as_tensor(idx, device=dev).reshape(-1)
        w = torch.as_tensor(w).to(dev)
        check(w.shape == (self.d,), "w", f"shape ({self.d},)", tuple(w.shape))
        lengths = data.lengths[idx]
        B = idx.shape[0]
        N = int(lengths.max()) + 1 if B else 1
        if self.compiled(w) and B:
            return self._arc_scores_host(w, data, idx, N)
        n_arcs = lengths * lengths
        arc_start = torch.repeat_interleave(data.arc_off[idx] - torch.cumsum(n_arcs, 0) + n_arcs, n_arcs)
        local = torch.arange(int(n_arcs.sum()), device=dev)
        arcs = arc_start + local                                              # the arcs' global numbers
        counts = data.ptr[arcs + 1] - data.ptr[arcs]
        nz = torch.repeat_interleave(data.ptr[arcs] - torch.cumsum(counts, 0) + counts, counts) + \
            torch.arange(int(counts.sum()), device=dev)
        owner = torch.repeat_interleave(torch.arange(arcs.shape[0], device=dev), counts)
        theta = torch.zeros(arcs.shape[0], dtype=w.dtype, device=dev).index_add_(0, owner, w[data.ids[nz].long()])
        row = torch.repeat_interleave(torch.arange(B, device=dev), n_arcs)
        k = local - torch.repeat_interleave(torch.cumsum(n_arcs, 0) - n_arcs, n_arcs)      # arc number in its sentence
        n = lengths[row]
        m = k // n + 1
        r = k - (m - 1) * n
        h = torch.where(r < m, r, r + 1)
        tokens = data.offsets[idx][row] + idx[row] + h                                   # each arc's head token
        tcounts = data.tok_ptr[tokens + 1] - data.tok_ptr[tokens]
        tnz = torch.repeat_interleave(data.tok_ptr[tokens] - torch.cumsum(tcounts, 0) + tcounts, tcounts) + \
            torch.arange(int(tcounts.sum()), device=dev)
        towner = torch.repeat_interleave(torch.arange(arcs.shape[0], device=dev), tcounts)
        theta.index_add_(0, towner, w[data.tok_ids[tnz].long()])
        out = torch.full((B, N, N), float("-inf"), dtype=w.dtype, device=dev)
        out[row, m, h] = theta
        return out

    def _arc_scores_host(self, w, data, idx, N):
        from ..oracles.tree_kernels import nb_theta
        wh = to_host(w)
        ptr, ids, tptr, tids = to_host(data.ptr), to_host(data.ids), to_host(data.tok_ptr), to_host(data.tok_ids)
        off, lengths, starts = to_host(data.arc_off), to_host(data.lengths), to_host(data.offsets)
        out = np.full((len(idx), N, N), -np.inf)
        for b, i in enumerate(to_host(idx).tolist()):
            n = int(lengths[i])
            theta = np.empty(n * n)
            nb_theta(int(off[i]), n, ptr, ids, int(starts[i]) + i, tptr, tids, wh, theta)
            T = theta.reshape(n, n)
            for m in range(1, n + 1):
                out[b, m, :m] = T[m - 1, :m]
                out[b, m, m + 1:n + 1] = T[m - 1, m:]
        return from_host(out, data.device)

    def scores(self, w, data: DependencyData, idx) -> torch.Tensor:
        return self.arc_scores(w, data, idx)

    def augment(self, scores: torch.Tensor, data: DependencyData, idx) -> torch.Tensor:
        """+ c_i on every arc that is not a gold arc (the Hamming loss over heads decomposes over arcs)."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        lengths = data.lengths[idx]
        gold = data.padded_loss_heads(idx)[:, :scores.shape[1]]          # unobserved heads (-1) cost nothing
        return ops.augment(scores, gold, lengths, self.costs(lengths, scores.dtype))

    def decode(self, scores: torch.Tensor, data: DependencyData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        heads, _ = ops.best(scores, data.lengths[idx], self.projective, self.multiroot,
                            "torch" if self.kernels == "torch" else "auto")
        return heads

    def oracle(self, w, data: DependencyData, idx, phi_gt=None):
        """Loss-augmented decoding with the gold tree in its sentence's space (module docstring)."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        scores = self.scores(w, data, idx)
        labels = self.decode(self.augment(scores, data, idx), data, idx)
        gold = self.gt_batch(data, idx)
        lengths = data.lengths[idx]
        gold_score = self.tree_score(scores, gold, lengths)
        aug = self.tree_score(scores, labels, lengths) + self.loss(data, idx, labels).to(gold_score.dtype)
        outside = tree_faults(gold, lengths, self.multiroot, self.projective) != 0
        take_gold = outside & (aug < gold_score)
        labels = torch.where(take_gold[:, None], gold, labels)
        H = torch.where(take_gold, torch.zeros_like(aug), aug - gold_score)
        return labels, H

    def first_order(self) -> "DependencyModel":
        """The arc-factored model over this model's weights (itself; a higher-order model's arc part)."""
        return self

    @staticmethod
    def tree_score(scores, heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """<w, phi(x, y)> (B,) of the trees ``heads`` from the scores the model computed (:meth:`scores`)."""
        return ops.score(scores, heads, lengths)

    # -- features and loss ----------------------------------------------------------------------------------
    def phi(self, data: DependencyData, idx, labels) -> torch.Tensor:
        """Dense (B, d): for small d (tests, the generic stores); the block store never builds it."""
        dev = data.device
        idx = torch.as_tensor(idx, device=dev).reshape(-1)
        labels = torch.as_tensor(labels, device=dev).reshape(idx.shape[0], -1)
        out = torch.zeros(idx.shape[0], self.d, dtype=torch.float64, device=dev)
        for b, i in enumerate(idx.tolist()):
            n = int(data.lengths[i])
            heads = self._words(labels[b], n)
            m = torch.arange(1, n + 1, device=dev)
            a = data.arc_off[i] + (m - 1) * n + torch.where(heads < m, heads, heads - 1)
            t0 = int(data.offsets[i]) + i
            for arc, h in zip(a.tolist(), heads.tolist()):
                for ptr, ids, row in ((data.ptr, data.ids, arc), (data.tok_ptr, data.tok_ids, t0 + h)):
                    f = ids[int(ptr[row]):int(ptr[row + 1])].long()
                    out[b].index_add_(0, f, torch.ones(f.shape[0], dtype=torch.float64, device=dev))
        return out

    def add_psi(self, targets, data: DependencyData, idx, labels, coefs) -> None:
        """targets[j] += sum_b coefs[j][b] psi_b(labels_b) in place through the stored feature ids of the arcs
        only (the gold tree's arcs up, the labeling's down; the arc rows and head-token rows :meth:`phi` counts),
        never a (B, d) temporary (the perceptron on a treebank's millions of features)."""
        dev = targets[0].device
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        labels = torch.as_tensor(labels, device=data.device).reshape(idx.shape[0], -1)
        gold = self.gt_batch(data, idx)
        for b, i in enumerate(idx.tolist()):
            n, t0 = int(data.lengths[i]), int(data.offsets[i]) + i
            m = torch.arange(1, n + 1, device=data.device)
            for heads, sign in ((self._words(gold[b], n), 1.0), (self._words(labels[b], n), -1.0)):
                arcs = data.arc_off[i] + (m - 1) * n + torch.where(heads < m, heads, heads - 1)
                for ptr, ids, rows in ((data.ptr, data.ids, arcs), (data.tok_ptr, data.tok_ids, t0 + heads)):
                    _, nz = csr_row_nonzeros(ptr.to(torch.int64), rows.to(torch.int64))
                    f = ids[nz].long().to(dev)
                    for target, coef in zip(targets, coefs):
                        target.index_add_(0, f, (sign * coef[b]).to(device=dev, dtype=target.dtype).expand(f.shape[0]))

    @staticmethod
    def _words(row: torch.Tensor, n: int) -> torch.Tensor:
        """The heads of words 1..n from a labeling row (-1 at position 0)."""
        return row.reshape(-1)[1:n + 1]

    def loss(self, data: DependencyData, idx, labels) -> torch.Tensor:
        dev = data.device
        idx = torch.as_tensor(idx, device=dev).reshape(-1)
        labels = torch.as_tensor(labels, device=dev).reshape(idx.shape[0], -1)
        gold = data.padded_loss_heads(idx)
        width = max(labels.shape[1], gold.shape[1])
        labels = torch.nn.functional.pad(labels.long(), (0, width - labels.shape[1]), value=-1)
        gold = torch.nn.functional.pad(gold, (0, width - gold.shape[1]), value=-1)
        lengths = data.lengths[idx]
        return ops.wrong_heads(labels, gold, lengths).to(torch.float64) * self.costs(lengths)

    def complete(self, w: torch.Tensor, data: DependencyData, batch: int = 256) -> torch.Tensor:
        """The CCCP completion h_i = argmax over the trees that keep every observed head of <w, phi(x_i, h)>, of
        every sentence (the decoder with every other head of an observed word at -inf): flat heads (W,) aligned
        with ``data.heads``. Where the decoder's space has no such tree (observed arcs that cross, under the
        projective decoder) the sentence is completed by Chu-Liu-Edmonds, as its gold tree would join its space
        (module docstring); observed arcs that no tree of the root rule holds are refused by name."""
        self.check_data(data)
        out = torch.empty_like(data.heads)
        for start in range(0, data.n, batch):
            idx = torch.arange(start, min(start + batch, data.n), device=data.device)
            lengths = data.lengths[idx]
            S = self.scores(w, data, idx)
            gold = data.padded_loss_heads(idx)[:, :S.shape[1]]
            keep = torch.zeros_like(S, dtype=torch.bool).scatter_(2, gold.clamp(min=0)[:, :, None], True)
            S = S.masked_fill((gold >= 0)[:, :, None] & ~keep, float("-inf"))
            kernels = "torch" if self.kernels == "torch" else "auto"
            heads, best = ops.best(S, lengths, self.projective, self.multiroot, kernels, refuse=False)
            none = best < -1e29
            if self.projective and bool(none.any()):
                rows = none.nonzero()[:, 0]
                heads[rows], best[rows] = ops.best(S[rows], lengths[rows], False, self.multiroot, kernels, refuse=False)
                none = best < -1e29
            if bool(none.any()):
                b = int(none.nonzero()[0, 0])
                raise SSVMInputError(f"data.observed: sentence {start + b}: no {'' if self.multiroot else 'single-root '}"
                                     "tree keeps every observed head")
            out[data.offsets[idx].repeat_interleave(lengths) + _word_steps(lengths)] = \
                heads[:, 1:][word_mask(lengths, heads.shape[1])[:, 1:]]
        return out

    def gt(self, data: DependencyData, i: int) -> torch.Tensor:
        return data.padded_heads([i])[0]

    def gt_batch(self, data: DependencyData, idx) -> torch.Tensor:
        return data.padded_heads(idx)

    @staticmethod
    def key(labeling):
        flat = labeling.reshape(-1).tolist() if torch.is_tensor(labeling) else np.asarray(labeling).reshape(-1).tolist()
        return tuple(int(v) for v in flat if int(v) != -1)

    def predict_flat(self, w: torch.Tensor, data: DependencyData) -> torch.Tensor:
        """The best tree of every sentence at w as one flat heads vector (W,) aligned with ``data.heads``."""
        if self.compiled(w):
            labels = np.empty(int(data.offsets[-1]), dtype=np.int64)
            nb_decode_all(to_host(data.offsets), to_host(data.arc_off), to_host(data.ptr), to_host(data.ids),
                          to_host(data.tok_ptr), to_host(data.tok_ids), to_host(w), self.projective, self.multiroot,
                          labels, np.empty(data.n))
            return from_host(labels, data.device)
        heads = self.predict(w, data)
        return heads[word_mask(data.lengths, heads.shape[1])]

    def metrics(self, w: torch.Tensor, data: DependencyData) -> dict:
        """``error`` = the share of words with a wrong head (1 - UAS), ``uas`` in percent."""
        pred = self.predict_flat(w, data)
        err = float((pred != data.heads).double().mean())
        return {"error": err, "uas": 100.0 * (1.0 - err)}
