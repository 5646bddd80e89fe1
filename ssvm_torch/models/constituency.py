"""Binary constituency trees as a structured SVM (a span-factored parser with the surface features of Hall,
Durrett & Klein 2014, trained by the Frank-Wolfe solvers), data-free; the compact block store is
:mod:`ssvm_torch.stores.spans`, the decoder CKY (:mod:`ssvm_torch.spans`: compiled on the CPU, torch elsewhere).

Data are :class:`~ssvm_torch.data.span_data.SpanData`: F binary features per fencepost, gold binary trees with
labels in {0..L-1}. A labeled span (i, j, l) scores

    s(i, j, l) = <W[:, begin l], x_i> + <W[:, end l], x_j> + mean_{k=i}^{j-1} <W[:, inside l], x_k> + len[b(j - i), l]

with x_k fencepost k's features, W (F, C) feature-major (index ``f*C + part*L + l``, part 0 = begin, 1 = end, 2 =
inside; C = 3L, or 2L without the inside part: ``inside=False``) and ``len`` (B, L) the weights of the span-length
buckets b (BUCKETS: the lower ends of the buckets), d = F C + B L. The inside part reads the fenceposts i..j-1, whose
right words are the span's words: the bag of the span's words and tags (as the semi-Markov model's token part,
models/semimarkov.py), by prefix sums. It is averaged over the span's width, not summed: summed, a span's inside
statistics grow with its width, and BCFW's steps slowed (2,000 EWT sentences, lambda 1e-2: the duality gap 9.16
after 24 passes against 3.04 after 8 averaged; dev F1 53.2 against 58.2, boundary features alone 56.4). phi(x, y) = sum over the tree's spans of their indicators, so phi is
linear in the tree's statistics s(y): per fencepost the number of spans of each label that begin and end there and
(inside) the sum of 1 / (j - i) over the spans of each label that pass there (T, C), per sentence the spans of each (bucket, label) (B L,); the store keeps their expectations
instead of w_i (DESIGN.md section 4).

Task loss: c_i times the spans of y that are not gold spans with the gold label (both trees hold 2n - 1 spans, so it
is also the gold spans missed): ``hamming`` c_i = 1, ``normalized`` c_i = 1 / (2 n_i - 1). It decomposes over
(span, label) parts, so loss augmentation adds c_i to every part that is not gold (spans.ops.augment). With partial
brackets (``SpanData.observed``) it counts the observed brackets O_i that y lacks (or labels differently), Delta_O(y)
= c_i (|O_i| - |y and O_i|): the full loss when O_i is the whole tree; :meth:`complete` is the latent SSVM's
completion (ssvm_torch/latent.py).
Labelings, as this model's interface sees them: labeled charts (B, N+1, N+1) int64, -1 off the tree.

Evaluation: labeled bracket F1 (evalb's counts: one-word spans not counted) of the trees with the ``fill`` label's
spans removed (the joins of the binarization: ``spans.debinarize``; None keeps every span).
"""
from __future__ import annotations

import torch

from ..data.span_data import SpanData
from ..errors import check
from ..spans import ops
from ..spans.checks import span_mask
from ..spans.losses import bracket_counts
from ..spans.partial import allowed
from .base import StructuredModel
from .chain_index import csr_row_nonzeros

#: the lower ends of the span-length buckets (words): 1, 2, ..., 7, 8-9, 10-12, 13-16, 17-24, 25+
BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 13, 17, 25)
#: the most padded chart cells (B M^2 L) one scoring pass holds on the CPU: evaluation decodes in chunks of this
#: size. Its (B, M, M, L) float64 temporaries (2 MB) stay below glibc's mmap threshold, the commands' 4 MB
#: (cli/entry.py) as well as the 32 MB it grows to elsewhere, so they are reused from the heap instead of mapped and
#: page-faulted in on every chunk: 2^23 cells took 2-2.6x the time (benchmarks/bench_span_eval_commits.py)
CELLS = 1 << 18
#: the same on other devices (one launch per scoring step: larger chunks, fewer launches)
DEVICE_CELLS = 1 << 23


class ConstituencyModel(StructuredModel):
    """Span-factored labeled binary trees over :class:`SpanData` (module docstring)."""

    kind = "constituency"
    LOSSES = ("hamming", "normalized")

    def __init__(self, n_features: int, n_labels: int, loss: str = "hamming", fill: int | None = None,
                 buckets: tuple = BUCKETS, inside: bool = True):
        check(isinstance(n_features, int) and n_features >= 1, "n_features", "an int >= 1", n_features)
        check(isinstance(n_labels, int) and n_labels >= 1, "n_labels", "an int >= 1", n_labels)
        check(loss in self.LOSSES, "loss", f"one of {self.LOSSES}", repr(loss))
        check(fill is None or (isinstance(fill, int) and 0 <= fill < n_labels), "fill",
              f"None or a label in [0, {n_labels})", fill)
        check(len(buckets) >= 1 and buckets[0] == 1 and all(a < b for a, b in zip(buckets, buckets[1:])), "buckets",
              "increasing lower ends of span lengths from 1", buckets)
        self.F, self.L, self.loss_name, self.fill = int(n_features), int(n_labels), loss, fill
        self.buckets = tuple(int(b) for b in buckets)
        check(isinstance(inside, bool), "inside", "True or False", repr(inside))
        self.inside = inside
        self.C = (3 if inside else 2) * self.L
        self.e = self.F * self.C
        self.d = self.e + len(self.buckets) * self.L

    @classmethod
    def for_data(cls, data: SpanData, loss: str = "hamming", fill: int | None = None,
                 inside: bool = True) -> "ConstituencyModel":
        return cls(data.n_features, data.n_labels, loss, fill, inside=inside)

    def describe(self) -> dict:
        return {"kind": "constituency", "d": self.d, "n_features": self.F, "n_labels": self.L, "loss": self.loss_name,
                "fill": self.fill, "buckets": list(self.buckets), "inside": self.inside,
                "phi": "per span (i, j, l): begin-l features of fencepost i, end-l features of fencepost j, "
                       + ("inside-l features of fenceposts i..j-1 averaged, " if self.inside else "")
                       + "the (length bucket, l) indicator"}

    def check_data(self, data, field: str = "data") -> None:
        check(isinstance(data, SpanData), field, "a SpanData", type(data).__name__)
        check(data.n_features == self.F, f"{field}.n_features", f"{self.F} fencepost features", data.n_features)
        check(data.n_labels == self.L, f"{field}.n_labels", f"{self.L} labels", data.n_labels)

    def costs(self, lengths: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
        """The loss of one wrong span per sentence: 1 (Hamming) or 1 / (2 n_i - 1) (normalized)."""
        return torch.ones_like(lengths, dtype=dtype) if self.loss_name == "hamming" else \
            1.0 / (2 * lengths - 1).to(dtype)

    def split(self, w: torch.Tensor):
        """Views (W (F, C) [feature, part*L + l], len (B, L) [bucket, l]) of w."""
        check(w.dim() == 1 and w.shape[0] == self.d, "w", f"a vector of length d = {self.d}", tuple(w.shape))
        return w[:self.e].view(self.F, self.C), w[self.e:].view(len(self.buckets), self.L)

    def bucket(self, length: torch.Tensor) -> torch.Tensor:
        """The bucket of span lengths >= 1 (BUCKETS)."""
        bounds = torch.tensor(self.buckets, device=length.device)
        return torch.bucketize(length, bounds, right=True) - 1

    # -- scores -----------------------------------------------------------------------------------------------
    def fence_potentials(self, w: torch.Tensor, data: SpanData, idx) -> torch.Tensor:
        """U (B, M, C): <W[:, c], x_k> of every fencepost k of the sentences ``idx`` (zero past a row)."""
        dev = data.device
        idx = torch.as_tensor(idx, device=dev).reshape(-1)
        W, _ = self.split(torch.as_tensor(w).to(dev))
        T = data.lengths[idx] + 1
        M = int(T.max())
        steps = torch.arange(M, device=dev)
        valid = steps[None, :] < T[:, None]
        rows = (data.fence_offsets[idx][:, None] + steps[None, :])[valid]
        local, nz = csr_row_nonzeros(data.fptr, rows)
        flat = torch.zeros(rows.shape[0], self.C, dtype=W.dtype, device=dev).index_add_(0, local, W[data.fidx[nz]])
        U = torch.zeros(idx.shape[0], M, self.C, dtype=W.dtype, device=dev)
        U[valid] = flat
        return U

    def span_scores(self, U: torch.Tensor, lengths_w: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """S (B, M, M, L) from the fencepost potentials U (B, M, C) and the length weights (buckets, L): the
        module docstring's s(i, j, l) on the spans of every row, -inf elsewhere (the inside means by prefix sums)."""
        M, L = U.shape[1], self.L
        pos = torch.arange(M, device=U.device)
        width = (pos[None, :] - pos[:, None]).clamp(min=1)
        S = U[:, :, None, :L] + U[:, None, :, L:2 * L]             # in place from here: (B, M, M, L) is large
        S += lengths_w[self.bucket(width)][None]
        if self.inside:
            prefix = torch.nn.functional.pad(U[:, :-1, 2 * L:].cumsum(1), (0, 0, 1, 0))    # sum_{k < j} U_in[k]
            inside = prefix[:, None, :, :] - prefix[:, :, None, :]
            S += inside.div_(width[None, :, :, None].to(U.dtype))
        return S.masked_fill_(~span_mask(lengths, M)[..., None], float("-inf"))

    def scores(self, w, data: SpanData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        w = torch.as_tensor(w).to(data.device)
        return self.span_scores(self.fence_potentials(w, data, idx), self.split(w)[1], data.lengths[idx])

    def augment(self, scores: torch.Tensor, data: SpanData, idx) -> torch.Tensor:
        """+ c_i on every (span, label) that is not an observed gold bracket (the module docstring's loss; with
        partial brackets the best tree's augmented score exceeds s(y) + Delta_O(y) by the same constant for every
        tree, c_i (2 n_i - 1 - |O_i|))."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        lengths = data.lengths[idx]
        return ops.augment(scores, data.observed_charts(idx, scores.shape[1]), lengths,
                           self.costs(lengths, scores.dtype))

    def decode(self, scores: torch.Tensor, data: SpanData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        return ops.best(scores, data.lengths[idx], "torch" if self.kernels == "torch" else "auto")[0]

    def labeling_scores(self, scores: torch.Tensor, data: SpanData, idx, labels) -> torch.Tensor:
        """<w, phi(x_b, y_b)> (B,): the sum of the chart's labeled span scores (:func:`ssvm_torch.spans.ops.score`)."""
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        charts = self._charts(data, idx, labels).to(scores.device)
        M = scores.shape[1]                         # padded (or cut) to the scores' fenceposts
        charts = torch.nn.functional.pad(charts, (0, M - charts.shape[2], 0, M - charts.shape[1]), value=-1)
        return ops.score(scores, charts, data.lengths[idx].to(scores.device))

    # -- statistics: phi(x_i, y) = A_i s(y) -------------------------------------------------------------------
    def scatter_statistics(self, P: torch.Tensor, begin: torch.Tensor, end: torch.Tensor, lab: torch.Tensor,
                           counts: torch.Tensor, row: torch.Tensor) -> None:
        """P (R, C) += the begin / end indicators and the inside weights 1 / (j - i) of spans whose fenceposts are
        the rows ``begin`` and ``end`` of P (each span's rows in one block of consecutive rows, end inside it), and
        ``counts`` (n, G) += their (bucket, label) indicators in the rows ``row``."""
        L = self.L
        one = torch.ones(lab.shape[0], dtype=P.dtype, device=P.device)
        P.index_put_((begin, lab), one, accumulate=True)
        P.index_put_((end, L + lab), one, accumulate=True)
        if self.inside:                                  # + 1 / width from the begin row, back to 0 at the end row
            share = one / (end - begin).to(P.dtype)
            diff = torch.zeros(P.shape[0], L, dtype=P.dtype, device=P.device)
            diff.index_put_((begin, lab), share, accumulate=True)
            diff.index_put_((end, lab), -share, accumulate=True)
            P[:, 2 * L:] += diff.cumsum(0)
        counts.index_put_((row, self.bucket(end - begin) * L + lab), one, accumulate=True)

    def statistics(self, charts: torch.Tensor, lengths: torch.Tensor, dtype=torch.float64):
        """(per-fencepost statistics (B, M, C): the spans of each label that begin / end there, the inside weights;
        per-row
        counts (B, buckets * L): the spans of each (length bucket, label)) of labeled charts (B, M, M)."""
        B, M, _ = charts.shape
        on = (charts >= 0) & span_mask(lengths.to(charts.device), M)
        b, i, j = on.nonzero(as_tuple=True)
        P = torch.zeros(B * M, self.C, dtype=dtype, device=charts.device)
        counts = torch.zeros(B, len(self.buckets) * self.L, dtype=dtype, device=charts.device)
        self.scatter_statistics(P, b * M + i, b * M + j, charts[b, i, j], counts, b)
        return P.view(B, M, self.C), counts

    def _charts(self, data: SpanData, idx, labels) -> torch.Tensor:
        labels = torch.as_tensor(labels, device=data.device)
        return labels.reshape(idx.shape[0], labels.shape[-2], labels.shape[-1]).long()

    def phi(self, data: SpanData, idx, labels) -> torch.Tensor:
        """Dense (B, d) = [X_i^T P_i (F, C) flattened, counts]: for small d (tests, the generic stores)."""
        dev = data.device
        idx = torch.as_tensor(idx, device=dev).reshape(-1)
        charts = self._charts(data, idx, labels)
        lengths = data.lengths[idx]
        P, counts = self.statistics(charts, lengths)
        out = torch.zeros(idx.shape[0], self.F, self.C, dtype=torch.float64, device=dev)
        for b, i in enumerate(idx.tolist()):
            T = int(lengths[b]) + 1
            rows = int(data.fence_offsets[i]) + torch.arange(T, device=dev)
            local, nz = csr_row_nonzeros(data.fptr, rows)
            out[b].index_add_(0, data.fidx[nz], P[b, local])
        return torch.cat([out.flatten(1), counts], 1)

    def add_psi(self, targets, data: SpanData, idx, labels, coefs) -> None:
        """targets[j] += sum_b coefs[j][b] psi_b(labels_b) in place: the fenceposts' statistics of the gold chart
        minus the labeling's, added at the fenceposts' stored feature ids only (:meth:`phi`'s sums), and the
        counts; no (B, d) temporary (UD-EWT's span model has d = 13.6M)."""
        dev = data.device
        idx = torch.as_tensor(idx, device=dev).reshape(-1)
        lengths = data.lengths[idx]
        (P, counts), (Pg, counts_g) = (self.statistics(self._charts(data, idx, c), lengths)
                                       for c in (labels, self.gt_batch(data, idx)))
        M = max(P.shape[1], Pg.shape[1])

        def fences(X):
            return torch.nn.functional.pad(X, (0, 0, 0, M - X.shape[1]))
        D = fences(Pg) - fences(P)
        Dc = counts_g - counts
        for b, i in enumerate(idx.tolist()):
            rows = int(data.fence_offsets[i]) + torch.arange(int(lengths[b]) + 1, device=dev)
            local, nz = csr_row_nonzeros(data.fptr, rows)
            for target, coef in zip(targets, coefs):
                c = coef[b].to(device=target.device, dtype=target.dtype)
                W = target[:self.F * self.C].view(self.F, self.C)
                W.index_add_(0, data.fidx[nz].to(target.device), (c * D[b, local]).to(target.device, target.dtype))
                target[self.F * self.C:] += (c * Dc[b]).to(target.device, target.dtype)

    def loss(self, data: SpanData, idx, labels) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.device).reshape(-1)
        charts = self._charts(data, idx, labels)
        lengths = data.lengths[idx]
        M = max(charts.shape[1], int(lengths.max()) + 1)
        charts = torch.nn.functional.pad(charts, (0, M - charts.shape[2], 0, M - charts.shape[1]), value=-1)
        wrong = ops.missed_spans(charts, data.observed_charts(idx, M), lengths)
        return wrong.to(torch.float64) * self.costs(lengths)

    def complete(self, w: torch.Tensor, data: SpanData) -> torch.Tensor:
        """The CCCP completion h_i = argmax over the trees that contain every observed bracket of <w, phi(x_i, h)>
        (CKY with -inf at every span crossing an observed bracket and at the other labels of an observed span:
        spans.partial.allowed), of every sentence: stacked (S, 3) span rows in ``data.spans``' order."""
        self.check_data(data)
        w = torch.as_tensor(w).to(data.device)
        out = torch.empty_like(data.spans, dtype=torch.int64)
        so = data.span_offsets
        for idx in self.chunks(data):
            lengths = data.lengths[idx]
            S = self.scores(w, data, idx)
            S.masked_fill_(~allowed(S, data.observed_charts(idx, S.shape[1]), lengths), float("-inf"))
            charts = ops.best(S, lengths, "torch" if self.kernels == "torch" else "auto")[0]
            b, i, j = (charts >= 0).nonzero(as_tuple=True)
            count = 2 * lengths - 1
            start = torch.repeat_interleave(so[idx] - (torch.cumsum(count, 0) - count), count)
            out[start + torch.arange(int(count.sum()), device=data.device)] = torch.stack([i, j, charts[b, i, j]], 1)
        return out

    def gt(self, data: SpanData, i: int) -> torch.Tensor:
        return data.charts([i])[0]

    def gt_batch(self, data: SpanData, idx) -> torch.Tensor:
        return data.charts(idx)

    @staticmethod
    def key(labeling):
        chart = torch.as_tensor(labeling)
        i, j = (chart >= 0).nonzero(as_tuple=True)
        return tuple(zip(i.tolist(), j.tolist(), chart[i, j].tolist()))

    # -- evaluation -------------------------------------------------------------------------------------------
    def chunks(self, data: SpanData):
        """The sentences in chunks of similar lengths whose padded scores hold at most :data:`CELLS` cells
        (:data:`DEVICE_CELLS` off the CPU)."""
        order = torch.argsort(data.lengths, descending=True, stable=True)
        lengths = data.lengths[order].tolist()
        cells = CELLS if data.device.type == "cpu" else DEVICE_CELLS
        start = 0
        while start < len(order):
            M = lengths[start] + 1
            size = max(1, cells // (M * M * self.L))
            yield order[start:start + size]
            start += size

    def predict_charts(self, w: torch.Tensor, data: SpanData):
        """(idx, charts) of every chunk of :meth:`chunks`: the best tree of each sentence at w."""
        for idx in self.chunks(data):
            yield idx, self.decode(self.scores(w, data, idx), data, idx)

    def metrics(self, w: torch.Tensor, data: SpanData) -> dict:
        """``error`` = 1 - labeled bracket F1 / 100; ``f1``, ``precision``, ``recall``, ``unlabeled_f1`` in percent
        and ``exact`` (the share of sentences whose labeled tree is exact, the ``fill`` spans removed)."""
        totals = {k: torch.zeros(3, dtype=torch.int64, device=data.device) for k in ("labeled", "unlabeled")}
        exact = 0
        for idx, pred in self.predict_charts(w, data):
            gold = data.charts(idx, pred.shape[1])
            lengths = data.lengths[idx]
            if self.fill is not None:
                pred, gold = (c.masked_fill(c == self.fill, -1) for c in (pred, gold))
            totals["labeled"] += bracket_counts(pred, gold, lengths)
            totals["unlabeled"] += bracket_counts(pred >= 0, gold >= 0, lengths)
            exact += int(((pred != gold) & span_mask(lengths, pred.shape[1])).flatten(1).any(1).logical_not().sum())
        out = {}
        for kind, (matched, predicted, gold) in totals.items():
            p, r = float(matched) / max(int(predicted), 1), float(matched) / max(int(gold), 1)
            f1 = 2 * p * r / (p + r) if p + r else 0.0
            out[kind] = (100 * p, 100 * r, 100 * f1)
        p, r, f1 = out["labeled"]
        return {"error": 1.0 - f1 / 100.0, "f1": f1, "precision": p, "recall": r, "unlabeled_f1": out["unlabeled"][2],
                "exact": exact / data.n}
