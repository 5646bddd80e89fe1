"""Linear semi-Markov SSVM (segmental chain; Sarawagi & Cohen 2004's semi-CRF features, trained as an SSVM):
data-free; the compact block store is :mod:`ssvm_torch.stores.segments`.

A row of T positions is cut into segments of 1..L positions, each with a label in {0..K-1} (the convention of
:mod:`ssvm_torch.segments`). Data are :class:`~ssvm_torch.data.types.ChainData` whose ``Y`` holds the gold
segmentation as one state per position, ``k`` where a segment of label k begins and ``K + k`` where it goes on
(2K states: :func:`ssvm_torch.segments.convert.segment_states`, the BIO reading of segments). Joint feature map, F = features + 1 (the
constant), C = 3K parts (token, begin, end) of each label:

====================  ==============================  ===========================================================
block                 index                           value
====================  ==============================  ===========================================================
emission              ``f*C + part*K + k``            token: sum_t [t in a segment of label k] x_t[f]; begin:
                                                      sum over segments of label k of x_start[f]; end: x_end[f]
first / last          ``C*F + k``, ``C*F + K + k``    [the first / last segment has label k]
transitions           ``C*F + 2K + a + K*b``          segments of label b that follow one of label a
lengths               ``C*F + 2K + K*K + l*K + k``    segments of label k and l+1 positions
====================  ==============================  ===========================================================

so the segment (t, l, k) scores sum_{j=t}^{t+l} U_tok[j, k] + U_begin[t, k] + U_end[t+l, k] + len[l, k] with
U = [X, 1] W the per-position potentials, the chain's emission term per part (feature-major, the layout of the
large sparse maps: models/chain.py). Every feature is a sum over positions of x_t times a per-position
statistic (the token / begin / end indicator of each label) or a per-row count, so phi is linear in those
statistics and the store keeps their expectations instead of w_i (DESIGN.md section 4).

Task loss: c_i times the positions whose (label, begins-a-segment) pair differs from the gold one (the Hamming
loss of the 2K states; the "tokens" loss of :mod:`ssvm_torch.segments.scoring`), c_i = 1/T_i (``normalized``) or
1 (``hamming``). ``outside``: a label whose segments cover one position (chunking's "O": a longer O segment
would spell the same tags as several short ones) and that segment F1 does not count.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as Fn

from ..data.types import ChainData
from ..devices import to_host
from ..errors import SSVMInputError, check
from ..segments import ops
from ..segments.checks import segment_lengths, valid_positions
from ..segments.convert import segment_states, segments_of_states
from ..segments.scoring import augmented, loss as segment_loss, score, span_counts, starts_and_labels, windows
from .base import StructuredModel
from .chain_index import csr_row_nonzeros, feature_coo, features_csr, padded_index, segment_ids

#: rows decoded together by :meth:`SemiMarkovModel.predict` (their padded segment scores stay a few MB)
CHUNK = 256


class SemiMarkovModel(StructuredModel):
    """Semi-Markov chain over :class:`ChainData` with 2K states (module docstring). Batched labelings are
    segmentations (B, T_max) int64 (the label at each segment's first position, -1 elsewhere); block-level
    labelings are (T_i,)."""

    kind = "semimarkov"
    LOSSES = ("normalized", "hamming")
    PARTS = 3                                   # token, begin, end

    def __init__(self, n_features: int, n_labels: int, max_length: int, loss: str = "normalized",
                 outside: int | None = None):
        check(int(n_features) >= 1, "n_features", "an int >= 1", n_features)
        check(int(n_labels) >= 1, "n_labels", "an int >= 1", n_labels)
        check(int(max_length) >= 1, "max_length", "an int >= 1", max_length)
        check(loss in self.LOSSES, "loss", f"one of {self.LOSSES}", loss)
        check(outside is None or 0 <= int(outside) < int(n_labels), "outside", f"None or a label in [0, {n_labels})",
              outside)
        self.n_features, self.K, self.L = int(n_features), int(n_labels), int(max_length)
        self.loss_name, self.outside = loss, None if outside is None else int(outside)
        self.F, self.C = self.n_features + 1, self.PARTS * self.K
        self.e = self.C * self.F
        self.G = 2 * self.K + self.K * self.K + self.L * self.K      # the per-row counts
        self.d = self.e + self.G

    @classmethod
    def for_data(cls, data: ChainData, max_length: int | None = None, loss: str = "normalized",
                 outside: int | None = None) -> "SemiMarkovModel":
        """The model of ``data`` (2K states), the data checked (:meth:`check_data`); ``max_length`` None: the longest
        gold segment."""
        check(data.n_states % 2 == 0, "data.n_states", "an even number 2K (segment states: K begin, K inside)",
              data.n_states)
        K = data.n_states // 2
        check(max_length is not None or not data.partial, "max_length", "an int for partially observed data (the "
              "longest segment is not observed)", max_length)
        if not data.partial:
            pos, valid = padded_index(data.offsets)
            seg = segments_of_states(torch.where(valid, data.Y[pos], -1), K)
            seglen = segment_lengths(seg, valid.sum(1))
            if outside is not None:                 # a longer outside segment is check_data's to refuse
                seglen = torch.where(seg == outside, seglen.clamp(max=1), seglen)
            longest = int(seglen.max()) if data.n else 1
            if max_length is None:
                max_length = longest
            elif isinstance(max_length, int) and 1 <= max_length < longest:   # the gold would be out of reach
                b, t = (int(v) for v in (seglen == longest).nonzero()[0])
                raise SSVMInputError(f"max_length: expected at least the longest gold segment, {longest} positions "
                                     f"(sequence {b}, from position {t}), got {max_length}")
        model = cls(data.X.shape[1], K, max_length, loss, outside)
        model.check_data(data)                  # refused here, before a store or a solver is built
        return model

    def describe(self) -> dict:
        K, e = self.K, self.e
        return {"kind": self.kind, "n_labels": K, "max_length": self.L, "n_features": self.n_features,
                "loss": self.loss_name, "outside": self.outside, "emission": [0, e],
                "emission_index": "f*C + part*K + k, part 0 token / 1 begin / 2 end, constant feature at f = F-1",
                "first": [e, e + K], "last": [e + K, e + 2 * K], "transition": [e + 2 * K, e + 2 * K + K * K],
                "transition_index": "prev + K*next", "length": [e + 2 * K + K * K, self.d],
                "length_index": "(length-1)*K + k", "d": self.d}

    def check_data(self, data: ChainData, field: str = "data") -> None:
        """The data's features and 2K states, and every gold segmentation well formed (no segment goes on
        from nothing or changes label inside, none longer than L), named by sequence and position."""
        check(isinstance(data, ChainData), field, "a ChainData", type(data).__name__)
        check(data.X.shape[1] == self.n_features, f"{field}.X", f"{self.n_features} features per position",
              data.X.shape[1])
        check(data.n_states == 2 * self.K, f"{field}.n_states", f"{2 * self.K} (K = {self.K} labels, begin and inside)",
              data.n_states)
        check(data.E is None, f"{field}.E", "no edge-observation attributes (the semi-Markov model has no feature "
              "of a label pair and a position: use a template without edge: items)", "edge attributes")
        if data.n == 0 or data.allow_unknown:
            return
        if data.partial:
            self._check_observed(data, field)
            return
        self.check_segmentation(data, field)

    def _check_observed(self, data: ChainData, field: str) -> None:
        """Partial annotation (``data.observed``): the observed states agree with some segmentation of segments of
        at most L positions: a state that goes on a segment has, where the position before is observed, the same
        label there, is not the outside label's, and no L observed states in a row go on one segment."""
        pos, valid = padded_index(data.offsets)
        Y = torch.where(valid, data.Y[pos], -1)
        obs = data.observed[pos] & valid
        inside = obs & (Y >= self.K)
        prev_obs = torch.cat([torch.zeros_like(obs[:, :1]), obs[:, :-1]], 1)
        prev = torch.cat([torch.full_like(Y[:, :1], -1), Y[:, :-1]], 1)
        first = torch.zeros_like(obs)
        first[:, 0] = True
        bad = inside & (first | (prev_obs & (prev % self.K != Y - self.K)))
        if self.outside is not None:
            bad |= inside & (Y == self.K + self.outside)
        # runs of observed "goes on" states: a run of L needs a segment of L + 1 positions
        run = torch.zeros_like(Y)
        for t in range(Y.shape[1]):
            run[:, t] = torch.where(inside[:, t], (run[:, t - 1] if t else 0) + 1, 0)
        bad |= run >= self.L
        if bool(bad.any()):
            b, t = (int(v) for v in bad.nonzero()[0])
            raise SSVMInputError(f"{field}.Y: sequence {b}, position {t}: the observed state {int(Y[b, t])} cannot be "
                                 f"completed to segments of labels 0..{self.K - 1} of at most {self.L} positions "
                                 f"(the observed states before it: {Y[b, max(0, t - 3):t].tolist()})")

    def check_segmentation(self, data: ChainData, field: str = "data") -> None:
        """Every row's states (all positions, observed or not) a segmentation (module docstring), named by
        sequence and position: the training data of a store (a partially observed row's Y is then a completion,
        e.g. :meth:`complete`'s; the unobserved positions of raw partial data may hold anything)."""
        pos, valid = padded_index(data.offsets)
        Y = torch.where(valid, data.Y[pos], -1)
        prev = torch.cat([torch.full_like(Y[:, :1], -1), Y[:, :-1]], 1)
        bad = valid & (Y >= self.K) & ((prev < 0) | (prev % self.K != Y - self.K))
        if bool(bad.any()):
            b, t = (int(v) for v in bad.nonzero()[0])
            raise SSVMInputError(f"{field}.Y: sequence {b}, position {t}: state {int(Y[b, t])} goes on a segment of "
                                 f"label {int(Y[b, t]) - self.K}, but the position before "
                                 f"{'is none' if t == 0 else f'has state {int(Y[b, t - 1])}'}")
        seglen = segment_lengths(segments_of_states(Y, self.K), valid.sum(1))
        long = seglen > self.L
        if self.outside is not None:
            long |= (seglen > 1) & (Y == self.outside)
        if bool(long.any()):
            b, t = (int(v) for v in long.nonzero()[0])
            top = 1 if self.outside is not None and int(Y[b, t]) == self.outside else self.L
            raise SSVMInputError(f"{field}.Y: sequence {b}: the segment at position {t} covers {int(seglen[b, t])} "
                                 f"positions, more than the model's {top} for label {int(Y[b, t])}")

    def features_csr(self, data: ChainData, dtype=torch.float64, device=None):
        return features_csr(data, self.F, dtype, device)

    def split(self, w: torch.Tensor):
        """Views (W (F, C) [feature, part*K + k], first (K,), last (K,), trans (K, K) [next, prev], lengths (L, K))."""
        check(w.dim() == 1 and w.shape[0] == self.d, "w", f"a vector of length d = {self.d}", tuple(w.shape))
        K, e = self.K, self.e
        return (w[:e].view(self.F, self.C), w[e:e + K], w[e + K:e + 2 * K], w[e + 2 * K:e + 2 * K + K * K].view(K, K),
                w[e + 2 * K + K * K:].view(self.L, K))

    def token_loss(self, lengths: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
        """c_i: 1/T_i (normalized) or 1 (hamming)."""
        lengths = lengths.to(dtype)
        return 1.0 / lengths.clamp(min=1) if self.loss_name == "normalized" else torch.ones_like(lengths)

    # -- statistics: phi(x_i, y) = A_i s(y) ---------------------------------------------------------
    def statistics(self, segments: torch.Tensor, lengths: torch.Tensor, dtype=torch.float64):
        """(per-position statistics (B, T, C): the token, begin and end indicators of each label, zero beyond a
        row; per-row counts (B, G): first, last, transitions [next, prev], lengths [l-1, k]) of segmentations."""
        B, T = segments.shape
        K = self.K
        begins, labels, seglen = starts_and_labels(segments, lengths)
        valid = valid_positions(lengths, T)
        onehot = Fn.one_hot(labels.clamp(min=0), K).to(dtype) * valid[..., None].to(dtype)
        after = torch.cat([begins[:, 1:], torch.ones_like(begins[:, :1])], 1)
        ends = valid & (after | (torch.arange(T, device=segments.device)[None, :] == lengths[:, None] - 1))
        pos = torch.cat([onehot, onehot * begins[..., None].to(dtype), onehot * ends[..., None].to(dtype)], 2)
        counts = torch.zeros(B, self.G, dtype=dtype, device=segments.device)
        rows = torch.arange(B, device=segments.device)
        some = lengths > 0
        last_label = labels.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
        counts[rows[some], labels[some, 0]] = 1.0
        counts[rows[some], K + last_label[some]] = 1.0
        if T > 1:
            inner = begins[:, 1:]
            b = rows[:, None].expand(B, T - 1)[inner]
            nxt, prev = labels[:, 1:][inner], labels[:, :-1][inner]
            counts.index_put_((b, 2 * K + nxt * K + prev), torch.ones_like(b, dtype=dtype), accumulate=True)
        b = rows[:, None].expand(B, T)[begins]
        counts.index_put_((b, 2 * K + K * K + (seglen[begins] - 1) * K + labels[begins]), torch.ones_like(b, dtype=dtype),
                          accumulate=True)
        return pos, counts

    def segment_scores(self, U: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """seg_scores (B, T, L, K) of padded potentials U (B, T, C) (module docstring); the outside label's
        segments of 2+ positions are -inf."""
        K, L = self.K, self.L
        tok, begin, end = U.split(K, -1)
        prefix = torch.cat([torch.zeros_like(tok[:, :1]), tok.cumsum(1)], 1)
        S = windows(prefix[:, 1:], L) - prefix[:, :-1, None, :] + begin[:, :, None, :] + windows(end, L)
        S = S + self.split(w)[4]
        if self.outside is not None and L > 1:
            S[:, :, 1:, self.outside] = float("-inf")
        return S

    # -- the StructuredModel interface (padded batches) ---------------------------------------------
    def scores(self, w: torch.Tensor, data: ChainData, idx) -> tuple:
        """(seg_scores (B, T, L, K), lengths (B,), first, last, trans [next, prev])."""
        idx = torch.as_tensor(idx, device=w.device).reshape(-1)
        pos, valid = padded_index(data.offsets.to(w.device), idx)
        U = torch.zeros(*valid.shape, self.C, dtype=w.dtype, device=w.device)
        # the potentials [x_t, 1] W of the batch's positions only (their rows in order = pos[valid])
        csr = self.features_csr(data.subset(idx.cpu()), w.dtype, w.device)
        U[valid] = torch.sparse.mm(feature_coo(csr, self.F), self.split(w)[0])
        _, first, last, trans, _ = self.split(w)
        lengths = valid.sum(1)
        return self.segment_scores(U, w), lengths, first, last, trans

    def augment(self, scores, data: ChainData, idx) -> tuple:
        """Adds c_i Delta(y, y_i) per segment (the loss decomposes over segments: segments/scoring.py)."""
        S, lengths, first, last, trans = scores
        gold = self._gold(data, idx).to(S.device)[:, :S.shape[1]]
        S, _ = augmented(S, gold, lengths, "tokens", self.token_loss(lengths, S.dtype),
                         self.observed_batch(data, idx, S.device, S.shape[1]))
        return S, lengths, first, last, trans

    def labeling_scores(self, scores, data: ChainData, idx, labels) -> torch.Tensor:
        """<w, phi(x_b, y_b)> (B,) of segmentations: their segments', first, last and transition scores
        (:func:`ssvm_torch.segments.scoring.score`)."""
        S, lengths, first, last, trans = scores
        labels = torch.as_tensor(labels, device=S.device).reshape(S.shape[0], -1)[:, :S.shape[1]]
        return score(S, first, last, trans, labels, lengths)

    def _gold(self, data: ChainData, idx) -> torch.Tensor:
        """The gold segmentations of the rows ``idx``; a partially observed row's states must be a segmentation
        (a completion at its unobserved positions, :meth:`complete`): checked, since its loss reads them."""
        if data.partial:
            self.check_segmentation(data.subset(torch.as_tensor(idx).reshape(-1).cpu()), "data")
        return self.gt_batch(data, idx)

    @staticmethod
    def observed_batch(data: ChainData, idx, device=None, T: int | None = None) -> torch.Tensor | None:
        """(B, T) bool: the observed positions of the rows ``idx`` (None for fully observed data): the task loss
        counts only those (latent.py)."""
        if not data.partial:
            return None
        idx = torch.as_tensor(idx, device=data.offsets.device).reshape(-1)
        pos, valid = padded_index(data.offsets, idx)
        obs = (data.observed.to(data.offsets.device)[pos] & valid).to(device or data.Y.device)
        return obs if T is None else obs[:, :T]

    def complete(self, w: torch.Tensor, data: ChainData) -> torch.Tensor:
        """h_i = argmax over the segmentations that agree with every observed state of <w, phi(x_i, h)> (the CCCP
        completion of the latent SSVM, ssvm_torch/latent.py): ragged (N,) states, ``data.Y`` at the observed
        positions; :data:`CHUNK` rows at a time. A row no segmentation agrees with is refused by name."""
        if not data.partial:
            return data.Y.clone()
        out = data.Y.clone()
        order = torch.argsort(data.lengths, descending=True, stable=True)
        for k in range(0, data.n, CHUNK):
            idx = order[k:k + CHUNK]
            S, lengths, first, last, trans = self.scores(w, data, idx)
            pos, valid = padded_index(data.offsets, idx)
            Y = torch.where(valid, data.Y[pos], -1).to(S.device)
            obs = self.observed_batch(data, idx, S.device)
            ks = torch.arange(self.K, device=S.device)
            start_bad = obs[..., None] & (Y[..., None] != ks)                    # a segment of label k starts here
            inner_bad = obs[..., None] & (Y[..., None] != self.K + ks)           # ... goes on here
            after_bad = torch.cat([obs[:, 1:] & (Y[:, 1:] >= self.K), torch.zeros_like(obs[:, :1])], 1)
            bad = (span_counts(start_bad, inner_bad, self.L) > 0) | windows(after_bad, self.L)[..., None]
            segments, score = ops.best(S.masked_fill(bad, float("-inf")), first, last, trans, lengths, self.kernels)
            if not bool(torch.isfinite(score).all()):
                b = int(idx[int((~torch.isfinite(score)).nonzero()[0])])
                raise SSVMInputError(f"data.Y: sequence {b}: no segmentation of segments of at most {self.L} positions "
                                     "agrees with its observed states")
            states = segment_states(segments, lengths, self.K).to(out.device)
            out[pos[valid]] = states[valid.to(states.device)]
        return out

    def decode(self, scores, data: ChainData, idx) -> torch.Tensor:
        """The best segmentations (B, T_max): the compiled kernel on CPU, torch elsewhere (segments/ops.py)."""
        S, lengths, first, last, trans = scores
        return ops.best(S, first, last, trans, lengths, self.kernels)[0]

    def predict(self, w: torch.Tensor, data: ChainData, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Plain decoding (B, T_max) of the rows ``idx`` (default all), :data:`CHUNK` rows of similar lengths at a
        time: the (B, T, L, K) segment scores of a whole training set would take gigabytes."""
        dev = data.device
        idx = torch.arange(data.n, device=dev) if idx is None else torch.as_tensor(idx, device=dev).reshape(-1)
        lengths = data.lengths.to(dev)[idx]
        out = torch.full((len(idx), int(lengths.max()) if len(idx) else 0), -1, dtype=torch.int64, device=w.device)
        order = torch.argsort(lengths, descending=True, stable=True)
        for k in range(0, len(idx), CHUNK):
            part = order[k:k + CHUNK]
            y = self.decode(self.scores(w, data, idx[part]), data, idx[part])
            out[part.to(w.device), :y.shape[1]] = y
        return out

    def gt_batch(self, data: ChainData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.offsets.device).reshape(-1)
        pos, valid = padded_index(data.offsets, idx)
        return segments_of_states(torch.where(valid, data.Y[pos], -1), self.K)

    def gt(self, data: ChainData, i: int) -> torch.Tensor:
        return segments_of_states(data.Y[int(data.offsets[i]):int(data.offsets[i + 1])], self.K).clone()

    @staticmethod
    def key(labeling) -> bytes:
        return np.asarray(to_host(labeling) if torch.is_tensor(labeling) else labeling, dtype=np.int64).tobytes()

    def _batch(self, data: ChainData, idx, labels):
        idx = torch.as_tensor(idx, device=data.Y.device).reshape(-1)
        lengths = data.lengths[idx].to(data.Y.device)
        labels = torch.as_tensor(labels, device=data.Y.device).reshape(len(idx), -1)
        T = int(lengths.max()) if len(idx) else 0
        if labels.shape[1] < T:
            labels = Fn.pad(labels, (0, T - labels.shape[1]), value=-1)
        return idx, lengths, labels[:, :T]

    def phi(self, data: ChainData, idx, labels) -> torch.Tensor:
        """Dense joint features of padded segmentations: (B, d). Small data only."""
        idx, lengths, labels = self._batch(data, idx, labels)
        pos_stats, counts = self.statistics(labels, lengths)
        X = self._rows_dense(data, idx)
        out = torch.zeros(len(idx), self.d, dtype=torch.float64, device=X.device)
        valid = valid_positions(lengths, labels.shape[1])
        seg = segment_ids(torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]))
        W = out[:, :self.e].view(len(idx), self.F, self.C)
        W.index_add_(0, seg, X[:, :, None] * pos_stats[valid][:, None, :])
        out[:, self.e:] = counts
        return out

    def add_psi(self, targets, data: ChainData, idx, labels, coefs) -> None:
        """targets[j] += sum_b coefs[j][b] psi_b(labels_b) in place: the positions' statistics of the gold
        segmentation minus the labeling's, added through the rows' stored features only (with the bias column:
        :meth:`phi`'s sums), and the counts; no (B, d) temporary (CoNLL-2000's segment model has d = 12M)."""
        idx, lengths, labels = self._batch(data, idx, labels)
        (pos, counts), (pos_g, counts_g) = (self.statistics(y, lengths) for y in (labels, self.gt_batch(data, idx)))
        valid = valid_positions(lengths, labels.shape[1])
        D, Dc = (pos_g - pos)[valid], counts_g - counts               # (sum T, C), (B, G)
        sub = data.subset(idx.cpu())
        ptr, fidx, fval = features_csr(sub, self.F, torch.float64, D.device)
        local, nz = csr_row_nonzeros(ptr, torch.arange(D.shape[0], device=D.device))
        block = segment_ids(torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]).to(D.device))    # row -> b
        for target, coef in zip(targets, coefs):
            c = coef.to(device=D.device, dtype=torch.float64)
            rows = c[block][:, None] * D                                   # (sum T, C)
            W = target[:self.e].view(self.F, self.C)
            W.index_add_(0, fidx[nz].to(target.device), (fval[nz, None] * rows[local]).to(target.device, target.dtype))
            target[self.e:] += (c @ Dc).to(target.device, target.dtype)

    def _rows_dense(self, data: ChainData, idx: torch.Tensor) -> torch.Tensor:
        """[x_t, 1] (sum T, F) of the positions of the blocks ``idx``, stacked in that order."""
        sub = data.subset(idx.cpu())
        X = (sub.X.to_dense() if sub.is_sparse else sub.X).to(torch.float64)
        return torch.cat([X, torch.ones(X.shape[0], 1, dtype=torch.float64, device=X.device)], 1)

    def loss(self, data: ChainData, idx, labels) -> torch.Tensor:
        idx, lengths, labels = self._batch(data, idx, labels)
        gold = self._gold(data, idx)
        return segment_loss(labels, gold, lengths, "tokens", self.token_loss(lengths),
                            self.observed_batch(data, idx, labels.device, labels.shape[1]))

    def metrics(self, w: torch.Tensor, data: ChainData) -> dict:
        """``error``: the mean task loss; ``position_error``: the share of positions whose state differs;
        ``segment_f1``: F1 of the exact segments (start, end, label), the outside label's not counted."""
        idx = torch.arange(data.n, device=w.device)
        pred = self.predict(w, data, idx).cpu()
        gold = self.gt_batch(data, idx.cpu())
        lengths = data.lengths.cpu()
        c = self.token_loss(lengths)
        per_row = segment_loss(pred, gold, lengths, "tokens", torch.ones_like(c))
        return {"error": float((per_row * c).mean()), "position_error": float(per_row.sum() / lengths.sum()),
                **self.segment_counts(pred, gold, lengths)}

    def segment_counts(self, pred: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Segment precision / recall / F1 in percent (conlleval's chunk scores when the labels are chunk types and
        ``outside`` is "O")."""
        pb, pl, plen = starts_and_labels(pred, lengths)
        gb, gl, glen = starts_and_labels(gold, lengths)
        keep_p, keep_g = pb, gb
        if self.outside is not None:
            keep_p, keep_g = pb & (pl != self.outside), gb & (gl != self.outside)
        both = int((keep_p & keep_g & (plen == glen) & (pl == gl)).sum())
        n_pred, n_gold = int(keep_p.sum()), int(keep_g.sum())
        p = 100.0 * both / n_pred if n_pred else 0.0
        r = 100.0 * both / n_gold if n_gold else 0.0
        return {"segment_precision": p, "segment_recall": r, "segment_f1": 2 * p * r / (p + r) if p + r else 0.0}
