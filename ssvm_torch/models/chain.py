"""Linear-chain SSVM with the feature map of the OCR papers (data-free; the compact block store is
:mod:`ssvm_torch.stores.chain`).

Joint feature map phi(x, y) in R^d, d = K*F + 2K + K*K with F = (number of features) + 1:

====================  ===========================  =====================================
block                 index                        value
====================  ===========================  =====================================
emission              ``y*F + f`` (f < F-1)        sum_t [y_t = y] x_t[f]
emission constant     ``y*F + F-1``                sum_t [y_t = y]            (bias, x_t[F-1] = 1)
first-label bias      ``K*F + y``                  [y_0 = y]
last-label bias       ``K*F + K + y``              [y_{T-1} = y]
transitions           ``K*F + 2K + a + K*b``       sum_t [y_t = a, y_{t+1} = b]
====================  ===========================  =====================================

For OCR (K = 26, 128 pixels, F = 129) this is d = 4082 and exactly the layout of the MATLAB
reference codes of Lacoste-Julien et al. 2013 / Osokin et al. 2016 (pixel ``p`` of state ``y`` at
``y*129 + p``, constant at 128, transitions at ``y_t + 26*y_{t+1}``), so weights are interchangeable.
Viewed as a (K, K) matrix, the transition block is ``trans[next, prev]``.

``emission="feature-major"`` stores the emission block as ``f*K + y`` instead (the K weights of a
feature adjacent in memory): the layout for large sparse feature maps (CoNLL), where a block step
touches a few hundred features and reads / writes all K weights of each. The kernels see the same
(K, F) view of W either way (a strided view here).

Task loss: ``loss="normalized"`` (the papers'), the normalized Hamming distance
L(y_true, y) = (1/T) sum_t [y_t != y_true_t]; ``loss="hamming"``, the Hamming count sum_t [y_t != y_true_t]
(Taskar et al. 2003's M3N loss), which weights every token alike instead of every sequence. Both are
c_i sum_t [y_t != y_true_t] with a per-sequence token loss c_i (:meth:`ChainModel.token_loss`).
"""
from __future__ import annotations

import numpy as np
import torch

from ..constraints import check_constraints, first_violation, penalties
from ..data.types import ChainData
from ..devices import from_host, to_host
from ..errors import SSVMInputError, check
from ..oracles.chain_kernels import nb_scatter_entries, nb_unary_all
from ..chain.numba_viterbi import NO_PEN, penalty_array, viterbi_ragged
from ..chain.losses import chain_score
from ..chain.padded import decode, viterbi
from .base import StructuredModel
from .chain_index import csr_row_nonzeros, features_csr, padded_index, segment_ids


class ChainModel(StructuredModel):
    """Chain structure over :class:`ChainData`: feature layout, potentials, loss, decoding.
    Batched labelings are (B, T_max) int64 padded with -1; block-level labelings are (T_i,)."""

    kind = "chain"

    LOSSES = ("normalized", "hamming")
    EMISSIONS = ("label-major", "feature-major")

    def __init__(self, n_features: int, n_states: int, loss: str = "normalized", emission: str = "label-major"):
        check(int(n_features) >= 1, "n_features", "an int >= 1", n_features)
        check(int(n_states) >= 1, "n_states", "an int >= 1", n_states)
        check(loss in self.LOSSES, "loss", f"one of {self.LOSSES}", loss)
        check(emission in self.EMISSIONS, "emission", f"one of {self.EMISSIONS}", emission)
        self.loss_name, self.emission = loss, emission
        self.n_features = int(n_features)
        self.K = int(n_states)
        self.F = self.n_features + 1
        self.d = self.K * self.F + 2 * self.K + self.K * self.K
        self.set_constraints(None)

    def set_constraints(self, constraints, scheme: str | None = None) -> None:
        """Tag constraints for every max and marginal oracle of this model: None, or the boolean
        masks of :func:`ssvm_torch.constraints.allowed_transitions` ({start, transitions [prev,
        next], end}); ``scheme`` names them in :meth:`describe`. Forbidden moves are never decoded and
        get probability 0; the weights are not touched (the penalties are added by the oracles)."""
        if constraints is None:
            self.constraints, self.constraint_scheme, self.pen_host = None, None, NO_PEN
            return
        masks = check_constraints(constraints, self.K)
        self.constraints = {k: v.cpu() for k, v in masks.items()}
        self.constraint_scheme = scheme or "custom"
        self.pen_host = penalty_array(*penalties(self.constraints))

    def penalty(self, dtype=torch.float64, device=None):
        """(first, last, trans [next, prev]) additive constraint scores (0 / -inf) on ``device``, or None."""
        return None if self.constraints is None else penalties(self.constraints, dtype, device)

    def check_labels_allowed(self, data: ChainData, field: str = "data") -> None:
        """Refuse, naming the sequence and position, gold labels that break the constraints."""
        if self.constraints is None:
            return
        pos, valid = padded_index(data.offsets)
        bad = first_violation(self.constraints, torch.where(valid, data.Y[pos], 0), valid)
        if bad is not None:
            raise SSVMInputError(f"{field}: sequence {bad[0]}, position {bad[1]}: the gold tags break the "
                                 f"{self.constraint_scheme} constraints")

    @classmethod
    def for_data(cls, data: ChainData, loss: str = "normalized", emission: str = "label-major") -> "ChainModel":
        return cls(data.X.shape[1], data.n_states, loss, emission)

    def token_loss(self, lengths: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
        """The loss of one wrong position of each sequence: 1/T (normalized Hamming) or 1 (Hamming)."""
        return 1.0 / lengths.to(dtype) if self.loss_name == "normalized" else torch.ones_like(lengths, dtype=dtype)

    def describe(self) -> dict:
        K, F = self.K, self.F
        return {"kind": "chain", "n_states": K, "n_features": self.n_features, "loss": self.loss_name,
                "emission": [0, K * F], "emission_index": ("y*F + f" if self.emission == "label-major" else "f*K + y")
                + ", constant feature at f = F-1",
                "first": [K * F, K * F + K], "last": [K * F + K, K * F + 2 * K],
                "transition": [K * F + 2 * K, self.d], "transition_index": "y_t + K*y_{t+1}", "d": self.d,
                "constraints": self.constraint_scheme}

    def check_data(self, data: ChainData, field: str = "data") -> None:
        check(isinstance(data, ChainData), field, "a ChainData", type(data).__name__)
        check(data.X.shape[1] == self.n_features, f"{field}.X", f"{self.n_features} features per position",
              data.X.shape[1])
        check(data.n_states == self.K, f"{field}.n_states", f"{self.K}", data.n_states)

    def features(self, data: ChainData, dtype=torch.float64, device=None) -> torch.Tensor:
        """Dense per-position feature rows with the constant 1 appended: (N, F). Small data only."""
        X = data.X.to_dense() if data.is_sparse else data.X
        X = X.to(device=device, dtype=dtype)
        return torch.cat([X, torch.ones(X.shape[0], 1, dtype=dtype, device=X.device)], dim=1)

    def features_csr(self, data: ChainData, dtype=torch.float64, device=None):
        """CSR (row pointers, sorted column indices, values) of the feature rows with the constant
        1 appended as column F-1 (:func:`~ssvm_torch.models.chain_index.features_csr`)."""
        return features_csr(data, self.F, dtype, device)

    def split(self, w: torch.Tensor):
        """Views (W_em (K, F), first (K,), last (K,), trans (K, K) [next, prev]) into w."""
        check(w.dim() == 1 and w.shape[0] == self.d, "w", f"a vector of length d = {self.d}", tuple(w.shape))
        K, F = self.K, self.F
        e = K * F
        W = w[:e].view(K, F) if self.emission == "label-major" else w[:e].view(F, K).T
        return W, w[e:e + K], w[e + K:e + 2 * K], w[e + 2 * K:e + 2 * K + K * K].view(K, K)

    # -- batched evaluation (torch, any device) ------------------------------------------------
    def predict_ragged(self, w: torch.Tensor, data: ChainData) -> torch.Tensor:
        """Plain (not loss-augmented) max-scoring labels of every position of every sequence: (N,)
        int64 (numba on CPU float64, the batched torch Viterbi elsewhere)."""
        self.check_data(data)
        W, first, last, trans = self.split(w)
        if self.compiled(w):
            U = self.host_unaries(W, data)
            labels, _ = viterbi_ragged(U, to_host(data.offsets), to_host(first), to_host(last), to_host(trans),
                                       pen=self.pen_host)
            return from_host(labels, w.device)
        ptr, idx, val = self.features_csr(data, w.dtype, w.device)
        rows = segment_ids(ptr)
        X = torch.sparse_coo_tensor(torch.stack([rows, idx]), val, (data.X.shape[0], self.F), check_invariants=False)
        U = torch.sparse.mm(X, W.T.contiguous())
        pos, valid = padded_index(data.offsets.to(w.device))
        lab, _ = viterbi(U[pos] * valid[..., None], valid.sum(1), first, last, trans,
                         penalty=self.penalty(w.dtype, w.device))
        return lab[valid]

    def host_unaries(self, W: torch.Tensor, data: ChainData, start: int = 0, stop: int | None = None) -> np.ndarray:
        """U = [X, 1] W^T (stop - start, K) of the positions start..stop-1 (default all) on the host by
        the compiled kernel; sparse data are read in place (no copy of the design with the constant
        column, int32 or int64 indices as stored) and the bias added after."""
        if data.is_sparse:
            X = data.X
            ptr, idx, val = (to_host(t) for t in (X.crow_indices(), X.col_indices(), X.values().double()))
        else:
            ptr, idx, val = (to_host(t) for t in self.features_csr(data))
        stop = data.X.shape[0] if stop is None else stop
        U = np.empty((stop - start, self.K))
        nb_unary_all(np.ascontiguousarray(to_host(W).T), ptr[start:stop + 1], idx, val, U)
        if data.is_sparse:
            U += to_host(W[:, self.F - 1])[None, :]
        return U

    def ragged_loss(self, data: ChainData, labels: torch.Tensor) -> torch.Tensor:
        """The task loss of each sequence (normalized Hamming or Hamming) for ragged labels (N,): (n,)."""
        check(labels.shape == data.Y.shape, "labels", f"shape {tuple(data.Y.shape)}", tuple(labels.shape))
        seg = segment_ids(data.offsets.to(labels.device))
        wrong = torch.zeros(data.n, dtype=torch.float64, device=labels.device)
        wrong.index_add_(0, seg, (labels != data.Y.to(labels.device)).to(torch.float64))
        return wrong * self.token_loss(data.lengths.to(labels.device))

    def metrics(self, w: torch.Tensor, data: ChainData) -> dict:
        """Test error as the papers report it: mean over sequences of the task loss (the normalized
        Hamming loss for the papers' models), plus the per-position (per-letter) error rate."""
        labels = self.predict_ragged(w, data)
        per_seq = self.ragged_loss(data, labels)
        per_pos = float((labels.cpu() != data.Y.cpu()).double().mean())
        return {"error": float(per_seq.mean()), "position_error": per_pos}

    def add_statistics(self, target: torch.Tensor, csr, rows, D, D_first, D_last, Dt, coef: float) -> None:
        """target += coef * A(D): the linear map from chain statistics to feature space (the compact
        blocks of stores/chain.py). ``csr`` = (row pointers, feature indices, values) of the feature
        rows with the constant; D (len(rows), K) label statistics of positions ``rows``, D_first /
        D_last (K,) those of the first / last positions summed, Dt (K, K) transition counts."""
        fptr, fidx, fval = csr
        W, first, last, trans = self.split(target)
        local, nz = csr_row_nonzeros(fptr, rows)
        W.index_add_(1, fidx[nz], (coef * D[local] * fval[nz, None]).T)
        first.add_(coef * D_first)
        last.add_(coef * D_last)
        trans.add_(coef * Dt)

    def add_psi(self, targets, data: ChainData, idx, labels, coefs) -> None:
        """targets[j] += sum_b coefs[j][b] psi_b(labels_b) in place through the rows' stored features only (a
        sparse X stays sparse): psi's statistics -- the gold one-hot rows minus the labeling's, the first, last
        and transition counts likewise -- mapped to feature space by :meth:`add_statistics`. The generic dense
        form's sums (tests/test_perceptron.py), without a (B, d) temporary (CoNLL-2000's d is 7.4M)."""
        self._add_chain_psi(targets, self._psi_batch(data, idx, labels, targets[0].device), coefs)

    @staticmethod
    def _psi_batch(data: ChainData, idx, labels, dev) -> tuple:
        """(the rows' subset, its padded positions (B, T) and mask, the labelings and the gold labels (B, T)) that
        :meth:`add_psi` reads (an override adds its own parts from the same batch)."""
        sub = data.subset(torch.as_tensor(idx).reshape(-1).to(data.offsets.device))
        pos, valid = padded_index(sub.offsets.to(dev))
        labels = torch.as_tensor(labels, device=dev).reshape(valid.shape[0], -1)[:, :valid.shape[1]]
        return sub, pos, valid, labels, sub.Y.to(dev)[pos]

    def _add_chain_psi(self, targets, batch: tuple, coefs) -> None:
        sub, pos, valid, labels, gold = batch
        dev, dtype = targets[0].device, targets[0].dtype
        B, T, K = valid.shape[0], valid.shape[1], self.K

        def hot(y):
            return torch.nn.functional.one_hot(y.clamp(min=0), K).to(dtype)
        diff = (hot(gold) - hot(labels)) * valid[..., None]                   # (B, T, K), per unit of coef
        lengths = valid.sum(1)
        ends = diff[torch.arange(B, device=dev), lengths - 1]
        both = valid[:, 1:]
        gold_pairs, pairs = (gold[:, 1:][both], gold[:, :-1][both]), (labels[:, 1:][both], labels[:, :-1][both])
        csr = self.features_csr(sub, dtype, dev)
        rows = torch.arange(int(lengths.sum()), device=dev)
        for target, coef in zip(targets, coefs):
            c = coef.to(device=dev, dtype=dtype)
            step = c[:, None].expand(B, T - 1)[both]
            Dt = torch.zeros(K, K, dtype=dtype, device=dev)
            Dt.index_put_(gold_pairs, step, accumulate=True)
            Dt.index_put_(pairs, -step, accumulate=True)
            D = diff * c[:, None, None]
            self.add_statistics(target, csr, rows, D[valid], (diff[:, 0] * c[:, None]).sum(0),
                                (ends * c[:, None]).sum(0), Dt, 1.0)

    def direction_parts(self, csr, pos, valid, D, Dt, coef: float) -> dict:
        """The pieces of coef * sum_b A_b(D_b) for a padded batch of statistics, block by block: the
        first / last position rows and transition counts (one per block), the scaled statistics of
        every position (group ``positions``) and the stored features of every position (group
        ``features``: index, value, position within its block). Summed by
        :meth:`direction_from_parts` in batch order they give the same bits whichever process
        computed which block (ssvm_torch.distributed ships exactly these)."""
        fptr, fidx, fval = csr
        at = valid.nonzero()                                  # (batch row, position) of every valid position
        local, nz = csr_row_nonzeros(fptr, pos[valid])
        lengths = valid.sum(1)
        ar = torch.arange(pos.shape[0], device=pos.device)
        return {"first": coef * D[ar, 0], "last": coef * D[ar, lengths - 1], "trans": coef * Dt,
                "positions": {"count": lengths, "stats": coef * D[valid]},
                "features": {"count": torch.bincount(at[local, 0], minlength=pos.shape[0]), "index": fidx[nz],
                             "value": fval[nz], "position": at[local, 1]}}

    def direction_from_parts(self, parts: dict, out: torch.Tensor, columns: tuple[int, int] | None = None,
                             tail: bool = True) -> torch.Tensor:
        """out += the sum of :meth:`direction_parts`: emission entries scattered in batch order, the
        per-block rows summed. ``columns`` = (lo, hi): only the emission entries of feature columns
        lo <= f < hi (each coordinate still sums its entries in batch order, so its bits do not
        change); ``tail=False``: not the first / last / transition rows."""
        return self._scatter_entries(parts, out, self._emission_entries(parts, columns), tail)

    @staticmethod
    def _emission_entries(parts: dict, columns: tuple[int, int] | None):
        """(row of the positions' statistics, feature index, value) of every emission entry of
        ``parts`` in batch order; with ``columns`` = (lo, hi) only those of columns lo <= f < hi."""
        positions, features = parts["positions"], parts["features"]
        start = torch.cumsum(positions["count"], 0) - positions["count"]
        block = torch.repeat_interleave(torch.arange(len(start), device=start.device), features["count"])
        row = start[block] + features["position"]
        index, value = features["index"], features["value"]
        if columns is not None:
            keep = (index >= columns[0]) & (index < columns[1])
            row, index, value = row[keep], index[keep], value[keep]
        return row, index, value

    def _scatter_entries(self, parts: dict, out: torch.Tensor, entries, tail: bool) -> torch.Tensor:
        """out += the emission ``entries`` (:meth:`_emission_entries`) and, with ``tail``, the per-block rows."""
        W, first, last, trans = self.split(out)
        row, index, value = entries
        positions = parts["positions"]
        if self.compiled(out):                                # the same sums in the same order, compiled
            nb_scatter_entries(to_host(W), to_host(index), to_host(value), to_host(positions["stats"]), to_host(row))
        else:
            W.index_add_(1, index, (positions["stats"][row] * value[:, None]).T)
        if tail:
            first.add_(parts["first"].sum(0))
            last.add_(parts["last"].sum(0))
            trans.add_(parts["trans"].sum(0))
        return out

    def packed_direction(self, parts: dict, scratch: torch.Tensor, columns: tuple[int, int] | None = None,
                         tail: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`direction_from_parts` as (touched feature columns, values): accumulated in the zero
        ``scratch`` (d,) with the same operations, read out at the touched columns (all K weights of
        each, in flat order) and, with ``tail``, the first / last / transition entries after them;
        ``scratch`` is zeroed there again. :meth:`unpacked_direction` makes it the sparse vector; the
        columns are what the distributed exchange ships instead of a flat index per value.
        ``columns``, ``tail``: only those coordinates (:meth:`direction_from_parts`)."""
        entries = self._emission_entries(parts, columns)
        self._scatter_entries(parts, scratch, entries, tail)
        K, F = self.K, self.F
        seen = torch.zeros(F, dtype=torch.bool, device=scratch.device)    # a mark per column: no sort
        seen[entries[1]] = True
        cols = seen.nonzero().reshape(-1)                                  # sorted
        # Read in increasing flat order (unpacked_direction): label-major w[k F + f] walks k, then the
        # columns; feature-major w[f K + k] the columns, then k (whole rows of the (F, K) view).
        W, dim = (scratch[:K * F].view(K, F), 1) if self.emission == "label-major" else (scratch[:K * F].view(F, K), 0)
        values = W.index_select(dim, cols).reshape(-1)
        if tail:
            values = torch.cat([values, scratch[K * F:]])
        W.index_fill_(dim, cols, 0.0)
        scratch[K * F:] = 0.0
        return cols, values

    def unpacked_direction(self, cols: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """The coalesced sparse (d,) vector of :meth:`packed_direction`'s (columns, values); the tail
        entries are there when ``values`` is longer than K per column."""
        K, F = self.K, self.F
        ks = torch.arange(K, device=cols.device)[:, None]
        flat = ks * F + cols[None, :] if self.emission == "label-major" else (cols[None, :] * K + ks).T
        index = flat.reshape(-1)
        if values.numel() > index.numel():
            index = torch.cat([index, torch.arange(K * F, self.d, device=cols.device)])
        return torch.sparse_coo_tensor(index[None], values, (self.d,), is_coalesced=True)

    def sparse_direction(self, parts: dict, scratch: torch.Tensor) -> torch.Tensor:
        """:meth:`direction_from_parts` as a coalesced sparse vector of the touched coordinates."""
        return self.unpacked_direction(*self.packed_direction(parts, scratch))

    def joint_feature(self, Xc: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """phi(x, y) of one sequence: Xc (T, F) rows with the constant, labels (T,). Dense (d,)."""
        phi = torch.zeros(self.d, dtype=Xc.dtype, device=Xc.device)
        W, first, last, trans = self.split(phi)
        W.index_add_(0, labels, Xc)
        first[labels[0]] += 1
        last[labels[-1]] += 1
        if labels.shape[0] > 1:
            trans.index_put_((labels[1:], labels[:-1]), torch.ones(labels.shape[0] - 1, dtype=Xc.dtype,
                                                                   device=Xc.device), accumulate=True)
        return phi

    # -- the StructuredModel interface (padded batches) ------------------------------------------
    def scores(self, w: torch.Tensor, data: ChainData, idx) -> tuple:
        """(unary (B, T, K) zero beyond each length, lengths (B,), first, last, trans [next, prev])."""
        W, first, last, trans = self.split(w)
        idx = torch.as_tensor(idx, device=w.device).reshape(-1)
        _, valid = padded_index(data.offsets.to(w.device), idx)
        ptr, fidx, val = self.features_csr(data.subset(idx.cpu()), w.dtype, w.device)
        rows = segment_ids(ptr)
        X = torch.sparse_coo_tensor(torch.stack([rows, fidx]), val, (int(valid.sum()), self.F), check_invariants=False)
        U = torch.sparse.mm(X, W.T.contiguous())
        flat = torch.zeros(*valid.shape, self.K, dtype=w.dtype, device=w.device)
        flat[valid] = U
        return flat, valid.sum(1), first, last, trans

    def augment(self, scores, data: ChainData, idx) -> tuple:
        """Adds c_i [k != y_t] to the unaries (c_i = 1/T_i or 1): the Hamming losses decompose over positions."""
        unary, lengths, first, last, trans = scores
        gt = self.loss_batch(data, idx).to(unary.device)
        valid = gt >= 0
        off = (1.0 - torch.nn.functional.one_hot(gt.clamp(min=0), self.K).to(unary.dtype)) \
            * self.token_loss(lengths, unary.dtype)[:, None, None]
        return unary + off * valid[..., None], lengths, first, last, trans

    def labeling_scores(self, scores, data: ChainData, idx, labels) -> torch.Tensor:
        """<w, phi(x_b, y_b)> (B,) of padded labelings: their unaries, first, last and transition scores
        (:func:`ssvm_torch.chain.losses.chain_score`)."""
        unary, lengths, first, last, trans = scores
        labels = torch.as_tensor(labels, device=unary.device).reshape(unary.shape[0], -1)[:, :unary.shape[1]]
        return chain_score(unary, lengths, first, last, trans, labels)

    def loss_batch(self, data: ChainData, idx) -> torch.Tensor:
        """The labels the task loss reads (B, T_max) of the rows ``idx``: the gold ones, -1 at unobserved positions
        (partial annotation: the latent SSVM, latent.py) and beyond each row."""
        idx = torch.as_tensor(idx, device=data.offsets.device).reshape(-1)
        pos, valid = padded_index(data.offsets, idx)
        return torch.where(valid, data.loss_labels()[pos], -1)

    def decode(self, scores, data: ChainData, idx) -> torch.Tensor:
        """Viterbi on the (padded) scores: the compiled kernel on CPU float64, torch elsewhere."""
        unary, lengths, first, last, trans = scores
        return decode(unary, lengths, first, last, trans, backend=self.kernels,
                      penalty=self.penalty(unary.dtype, unary.device))[0]

    def complete(self, w: torch.Tensor, data: ChainData) -> torch.Tensor:
        """h_i = argmax over the labelings agreeing with the observed labels of <w, phi(x_i, h)> for every
        sequence (the CCCP completion of the latent SSVM, ssvm_torch/latent.py): Viterbi with every other label
        at an observed position at -inf; ragged (N,) labels, equal to ``data.Y`` at the observed positions."""
        if not data.partial:
            return data.Y.clone()
        idx = torch.arange(data.n, device=w.device)
        unary, lengths, first, last, trans = self.scores(w, data, idx)
        pos, valid = padded_index(data.offsets.to(w.device), idx)
        gold = data.Y.to(w.device)[pos]
        seen = data.observed.to(w.device)[pos] & valid
        other = torch.nn.functional.one_hot(gold, self.K).to(torch.bool).logical_not() & seen[..., None]
        labels = self.decode((unary.masked_fill(other, float("-inf")), lengths, first, last, trans), data, idx)
        return labels[valid].to(data.Y.device)

    def gt_batch(self, data: ChainData, idx) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.offsets.device).reshape(-1)
        pos, valid = padded_index(data.offsets, idx)
        return torch.where(valid, data.Y[pos], -1)

    def gt(self, data: ChainData, i: int) -> torch.Tensor:
        return data.Y[int(data.offsets[i]):int(data.offsets[i + 1])].clone()

    @staticmethod
    def key(labeling) -> bytes:
        return np.asarray(to_host(labeling) if torch.is_tensor(labeling) else labeling, dtype=np.int64).tobytes()

    def phi(self, data: ChainData, idx, labels) -> torch.Tensor:
        """Dense joint features of padded labelings (B, T_max): (B, d). Small data only."""
        idx = torch.as_tensor(idx, device=data.Y.device).reshape(-1)
        labels = torch.as_tensor(labels, device=data.Y.device).reshape(len(idx), -1)
        Xc = self.features(data.subset(idx))
        out, start = [], 0
        for b in range(len(idx)):
            T = int(data.lengths[idx[b]])
            out.append(self.joint_feature(Xc[start:start + T], labels[b, :T].to(Xc.device)))
            start += T
        return torch.stack(out)

    def loss(self, data: ChainData, idx, labels) -> torch.Tensor:
        idx = torch.as_tensor(idx, device=data.Y.device).reshape(-1)
        gt = self.loss_batch(data, idx)
        labels = torch.as_tensor(labels, device=gt.device).reshape(gt.shape[0], -1)[:, :gt.shape[1]]
        lengths = data.lengths.to(gt.device)[idx.to(gt.device)]
        return ((labels != gt) & (gt >= 0)).sum(1).double() * self.token_loss(lengths)
