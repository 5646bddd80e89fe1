"""The batched torch path of the compact chain store (any device): potentials of every position,
loss-augmented decoding of a batch of blocks with the terms of eq. (6) of Osokin et al. 2016 (the exact
gap pass's terms too, padded or in one Triton kernel), and
the mini-batch BCFW moves. A mixin of :class:`~ssvm_torch.stores.chain.ChainDual` (it reads the
store's state tensors; the numba path lives in the store itself)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as Fn

from ..devices import from_host, to_host
from ..models.chain_index import feature_coo, padded_index, padded_trans_counts, trans_counts, unary_rows
from ..oracles.chain_kernels import batch_corners_host, nb_unary_all
from ..chain.padded import fused_variant, viterbi
from ..chain.torch_ops import with_penalty
from ..chain.triton_viterbi import hamming_cost, length_order, ragged_gap_terms
from .base import BatchCorners


class ChainTorchPath:
    """The torch half of :class:`~ssvm_torch.stores.chain.ChainDual`."""

    # -- batched torch path (any device) ------------------------------------------------------
    def _potentials(self, w: torch.Tensor | None = None):
        """Unary potentials U = X W^T of all positions (sparse-dense product) and the other blocks of w (default
        the store's; first / last / trans are views of it)."""
        W, first, last, trans = self.model.split(self.w if w is None else w)
        if self._numba:
            U = np.empty((self.Y.shape[0], self.model.K))
            nb_unary_all(np.ascontiguousarray(W.numpy().T), self._np[0], self._np[1], self._np[2], U)
            return torch.from_numpy(U), first, last, trans
        return torch.sparse.mm(self.sparse_features(), W.T.contiguous()), first, last, trans

    def sparse_features(self, transpose: bool = False) -> torch.Tensor:
        """The feature rows (N, F) (or transposed) as a coalesced sparse COO, built once on first use."""
        if transpose not in self._coo:
            self._coo[transpose] = feature_coo((self.fptr, self.fidx, self.fval), self.model.F, transpose)
        return self._coo[transpose]

    def _corners_torch(self, idx: torch.Tensor, with_sqnorm: bool, potentials=None):
        """Loss-augmented decoding of blocks ``idx`` and the terms of eq. (6): returns a dict with
        padded labels, valid mask, loss (L/n), aug score, <M_i, theta_i>, dot*(lam n), sq*(lam n)^2.
        ``potentials``: those of every position at the current w, if already computed."""
        K = self.model.K
        pos, valid = padded_index(self.offsets, idx)
        lengths = valid.sum(1)
        if idx.shape[0] == self.n or potentials is not None:
            U, first, last, trans = potentials if potentials is not None else self._potentials()
            Ub = U[pos] * valid[..., None]
        else:                                   # only the rows of these blocks: O(batch), not O(N)
            W, first, last, trans = self.model.split(self.w)
            Ub = unary_rows(W, (self.fptr, self.fidx, self.fval), pos.reshape(-1)).view(*pos.shape, K) * valid[..., None]
        gt = torch.where(valid, self.Y[pos], -1)
        labels, aug = viterbi(Ub, lengths, first, last, trans, gt=gt, token_loss=self.tw[idx],
                              penalty=self.model.penalty(self.dtype, self.device))
        loss_norm = ((labels != gt) & valid).sum(1).to(self.dtype) * self.tw[idx]
        score_s = aug - loss_norm
        Mu = self.Mu[pos] * valid[..., None]
        Mt = self.Mt[idx]
        ar = torch.arange(len(idx), device=self.device)
        m_theta = (Mu * Ub).sum((1, 2)) + (Mu[ar, 0] @ first) + (Mu[ar, lengths - 1] @ last) + (Mt * trans).sum((1, 2))
        out = {"labels": labels, "valid": valid, "loss": loss_norm / self.N, "aug": aug, "m_theta": m_theta,
               "dot": score_s - m_theta, "pos": pos}
        if with_sqnorm:
            D = (Fn.one_hot(labels.clamp(min=0), K).to(self.dtype) - Mu) * valid[..., None]
            Tm = int(lengths.max())
            gidx = self.goff[idx][:, None, None] + lengths[:, None, None] * torch.arange(Tm, device=self.device)[
                None, :, None] + torch.arange(Tm, device=self.device)[None, None, :]
            vv = valid[:, :, None] & valid[:, None, :]
            G = torch.where(vv, self.G[gidx.clamp(max=self.G.shape[0] - 1)], 0)
            em = torch.einsum("bsk,bst,btk->b", D, G, D)
            Dt = padded_trans_counts(labels, valid, K, self.dtype) - Mt
            out["sq"] = em + (D[ar, 0] ** 2).sum(1) + (D[ar, lengths - 1] ** 2).sum(1) + (Dt ** 2).sum((1, 2))
        return out

    def gap_terms(self, fused: bool, potentials=None):
        """The torch path's terms of the exact gap pass at the current w (its potentials (U, first,
        last, trans), computed unless given): (ragged labels (N,), aug scores, <M_i, theta_i>, s(y_i),
        L_i / n). ``fused``: one Triton kernel (:func:`ssvm_torch.chain.triton_viterbi.ragged_gap_terms`:
        the loss-augmented Viterbi, s(y_i), <M_i, theta_i> and the wrong positions in one walk; CUDA's
        default, or CPU tensors under TRITON_INTERPRET=1), else the padded batch of
        :meth:`_corners_torch` (a few dozen kernels)."""
        U, first, last, trans = potentials = potentials if potentials is not None else self._potentials()
        if fused:
            f, la, t = with_penalty(first, last, trans, self.model.penalty(self.dtype, self.device))
            if self._t_max is None:                 # the chains never change: one host read and one sort per store
                self._t_max = int(self.lengths.max())
                self._order = length_order(self.lengths, None, kept=True)
            labels, aug, gt_score, m_part, wrong = ragged_gap_terms(
                U, self.offsets, self._t_max, self.Y, self.Mu, f, la, t, self.tw,
                hamming_cost(self.model.K, self.dtype, self.device), variant=fused_variant() or "auto",
                sort=False, order=self._order)
            return labels, aug, m_part + (self.Mt * trans).sum((1, 2)), gt_score, wrong.to(self.dtype) * self.tw / self.N
        c = self._corners_torch(torch.arange(self.n, device=self.device), with_sqnorm=False, potentials=potentials)
        gt_score = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(
            0, self.seg, U.gather(1, self.Y[:, None])[:, 0])
        gt_score += first[self.Y[self.first_pos]] + last[self.Y[self.last_pos]]
        gt_score += (trans_counts(self.Y, self.seg, self.n, self.model.K).to(self.dtype) * trans).sum((1, 2))
        return c["labels"][c["valid"]], c["aug"], c["m_theta"], gt_score, c["loss"]

    # -- mini-batch BCFW ------------------------------------------------------------------------
    def batch_corners(self, idx: torch.Tensor, with_direction: bool = True) -> BatchCorners:
        """The corners of the distinct blocks ``idx``: with numba kernels the tau decodes run in
        parallel threads, else one padded torch Viterbi; the joint direction dw = -sum_i A_i(D_i) /
        (lam n) with D_i = S(y*_i) - M_i (module docstring) is one scatter over the batch's features."""
        idx = torch.as_tensor(idx, device=self.device).reshape(-1)
        pos, valid = padded_index(self.offsets, idx)
        if self._numba:
            flat, loss, dot = batch_corners_host(to_host(idx), to_host(self.lengths[idx]), self._tw, self._np_loss,
                                                 self.model.pen_host)
            labels = torch.full(pos.shape, -1, dtype=torch.int64, device=self.device)
            labels[valid] = from_host(flat, self.device)
            loss, dot = from_host(loss, self.device) / self.N, from_host(dot, self.device)
        else:
            c = self._corners_torch(idx, with_sqnorm=False)
            labels, loss, dot = c["labels"], c["loss"], c["dot"]
        ell_b = self.ell_i[idx]
        gaps = dot / self.N - ell_b + loss
        D, Dt, parts = self.direction_terms(idx, pos, valid, labels)
        return BatchCorners(idx, loss, gaps, self.direction(parts) if with_direction else None,
                            float((loss - ell_b).sum()),
                            moves=(pos[valid], D[valid], Dt), parts=parts)

    def direction_terms(self, idx, pos, valid, labels):
        """(D (tau, T, K), Dt (tau, K, K), the direction's parts) of padded corner labelings: D_i =
        S(y*_i) - M_i per position, Dt_i the transition counts' change, and the parts of
        -sum_i A_i(D_i) / (lam n) (:meth:`ChainModel.direction_parts`)."""
        D = (Fn.one_hot(labels.clamp(min=0), self.model.K).to(self.dtype) - self.Mu[pos]) * valid[..., None]
        Dt = padded_trans_counts(labels, valid, self.model.K, self.dtype) - self.Mt[idx]
        parts = self.model.direction_parts((self.fptr, self.fidx, self.fval), pos, valid, D, Dt,
                                           -1.0 / (self.lam * self.N))
        return D, Dt, parts

    def direction(self, parts: dict) -> torch.Tensor:
        if not self.sparse_direction:
            return self.model.direction_from_parts(parts, torch.zeros_like(self.w))
        return self.model.sparse_direction(parts, self._zero_scratch())

    def _zero_scratch(self) -> torch.Tensor:
        """A zero d-vector kept between steps (the sparse directions zero what they touched: O(touched), not O(d))."""
        if self._scratch is None:
            self._scratch = torch.zeros_like(self.w)
        return self._scratch

    def direction_share(self, parts: dict, share: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        r, p = share                            # feature columns [F r / p, F (r+1) / p); the last share has the tail
        F = self.model.F
        return self.model.packed_direction(parts, self._zero_scratch(), (F * r // p, F * (r + 1) // p),
                                           tail=r == p - 1)

    def joined_shares(self, cols: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return self.model.unpacked_direction(cols, values)

    @property
    def shares_direction(self) -> bool:
        """Sparse directions of feature-major weights can be built in coordinate shares
        (:meth:`BlockDual.direction`): a share of the feature columns is a contiguous range of w."""
        return self.sparse_direction and self.model.emission == "feature-major"

    def batch_move(self, corners: BatchCorners, gamma: float) -> None:
        rows, D, Dt = corners.moves
        idx = corners.idx
        self.Mu.index_put_((rows,), gamma * D, accumulate=True)          # in place: numba views stay valid
        self.Mt.index_put_((idx,), gamma * Dt, accumulate=True)
        self.ell_i.index_put_((idx,), gamma * (corners.loss - self.ell_i[idx]), accumulate=True)
        self._ell[0] += gamma * corners.dell
        self.w.add_(corners.dw, alpha=gamma)
        if self.shadow is not None:
            self.shadow.add_(corners.dw, alpha=gamma * self.shadow_coef)

    def _add_stats(self, s: int, e: int, coef: float, D: torch.Tensor, Dt: torch.Tensor, shadow: bool = True) -> None:
        """w += coef * A_i(D, Dt) for the sequence at rows s..e (torch path); the shadow follows."""
        rows = torch.arange(s, e, device=self.device)
        self._stats_into(self.w, rows, D, D[0], D[-1], Dt, coef)
        if shadow and self.shadow is not None:
            self._stats_into(self.shadow, rows, D, D[0], D[-1], Dt, coef * self.shadow_coef)

    def _stats_into(self, target, rows, D, D_first, D_last, Dt, coef) -> None:
        self.model.add_statistics(target, (self.fptr, self.fidx, self.fval), rows, D, D_first, D_last, Dt, coef)
