"""Linear-chain SSVM with the feature map of the OCR papers, and its compact block storage.

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

Task loss: normalized Hamming distance L(y_true, y) = (1/T) sum_t [y_t != y_true_t].

Compact blocks (DESIGN section 4): since w_i = sum_y alpha_i(y) psi_i(y) / (lam n) and
psi_i(y) = phi(x_i, y_i) - phi(x_i, y) is linear in the chain's sufficient statistics, block i is
stored as the expected statistics under alpha_i: per-position label marginals Mu_i (T_i, K) and
expected transition counts Mt_i (K, K). Then w_i = A_i(S(y_i) - M_i) / (lam n), with A_i the linear
map from statistics to feature space, and
    <w_i - w_s, w>    = (<S(y*), theta_i> - <M_i, theta_i>) / (lam n)
    ||w_i - w_s||^2   = (sum_k D_k^T G_i D_k + |D_0|^2 + |D_{T-1}|^2 + |Dt|^2_F) / (lam n)^2
with theta_i the potentials the oracle computes anyway, D = onehot(y*) - Mu_i, Dt = S_trans(y*) - Mt_i,
and G_i = X_i X_i^T the (T_i, T_i) Gram matrix of the example. State is O(sum_i T_i K + n K^2).
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch
import torch.nn.functional as Fn

from ..datasets import ChainData
from ..errors import SSVMInputError, check, check_positive
from ..oracles.viterbi import _viterbi_all, viterbi, viterbi_ragged, viterbi_segment
from ..solvers.dual import BlockDual, Corner, GapPass


class ChainModel:
    """Chain structure over a :class:`ChainData` set: feature layout, potentials, loss, decoding."""

    def __init__(self, n_features: int, n_states: int):
        check(int(n_features) >= 1, "n_features", "an int >= 1", n_features)
        check(int(n_states) >= 1, "n_states", "an int >= 1", n_states)
        self.n_features = int(n_features)
        self.K = int(n_states)
        self.F = self.n_features + 1
        self.d = self.K * self.F + 2 * self.K + self.K * self.K

    @classmethod
    def for_data(cls, data: ChainData) -> "ChainModel":
        return cls(data.X.shape[1], data.n_states)

    @property
    def feature_layout(self) -> dict:
        K, F = self.K, self.F
        return {"kind": "chain", "n_states": K, "n_features": self.n_features,
                "emission": [0, K * F], "emission_index": "y*F + f, constant feature at f = F-1",
                "first": [K * F, K * F + K], "last": [K * F + K, K * F + 2 * K],
                "transition": [K * F + 2 * K, self.d], "transition_index": "y_t + K*y_{t+1}", "d": self.d}

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
        1 appended as column F-1; dense input keeps only its nonzeros."""
        N = data.X.shape[0]
        if data.is_sparse:
            crow, col, val = data.X.crow_indices(), data.X.col_indices(), data.X.values()
        else:
            rows, col = torch.nonzero(data.X, as_tuple=True)
            val = data.X[rows, col]
            crow = torch.zeros(N + 1, dtype=torch.int64)
            crow[1:] = torch.cumsum(torch.bincount(rows, minlength=N), 0)
        counts = crow[1:] - crow[:-1] + 1
        ptr = torch.zeros(N + 1, dtype=torch.int64)
        ptr[1:] = torch.cumsum(counts, 0)
        idx = torch.full((int(ptr[-1]),), self.F - 1, dtype=torch.int64)
        vals = torch.ones(int(ptr[-1]), dtype=dtype)
        keep = torch.ones(int(ptr[-1]), dtype=torch.bool)
        keep[ptr[1:] - 1] = False                       # the last slot of each row is the constant
        idx[keep] = col.to(torch.int64)
        vals[keep] = val.to(dtype)
        return ptr.to(device), idx.to(device), vals.to(device)

    def split(self, w: torch.Tensor):
        """Views (W_em (K, F), first (K,), last (K,), trans (K, K) [next, prev]) into w."""
        check(w.dim() == 1 and w.shape[0] == self.d, "w", f"a vector of length d = {self.d}", tuple(w.shape))
        K, F = self.K, self.F
        e = K * F
        return (w[:e].view(K, F), w[e:e + K], w[e + K:e + 2 * K], w[e + 2 * K:].view(K, K))

    # -- batched evaluation (torch, any device) ------------------------------------------------
    def decode(self, w: torch.Tensor, data: ChainData) -> torch.Tensor:
        """Plain (not loss-augmented) max-scoring labels of every position: (N,) int64."""
        self.check_data(data)
        W, first, last, trans = self.split(w)
        ptr, idx, val = self.features_csr(data, w.dtype, w.device)
        if w.device.type == "cpu" and w.dtype == torch.float64:
            U = np.empty((data.X.shape[0], self.K))
            _nb_unary_all(np.ascontiguousarray(W.numpy().T), ptr.numpy(), idx.numpy(), val.numpy(), U)
            labels, _ = viterbi_ragged(U, data.offsets.numpy(), first.numpy(), last.numpy(), trans.numpy())
            return torch.from_numpy(labels)
        rows = segment_ids(ptr)
        X = torch.sparse_coo_tensor(torch.stack([rows, idx]), val, (data.X.shape[0], self.F))
        U = torch.sparse.mm(X, W.T.contiguous())
        pos, valid = padded_index(data.offsets.to(w.device))
        lab, _ = viterbi(U[pos] * valid[..., None], valid.sum(1), first, last, trans)
        return lab[valid]

    def loss(self, data: ChainData, labels: torch.Tensor) -> torch.Tensor:
        """Normalized Hamming loss of each sequence: (n,)."""
        check(labels.shape == data.Y.shape, "labels", f"shape {tuple(data.Y.shape)}", tuple(labels.shape))
        seg = segment_ids(data.offsets.to(labels.device))
        wrong = torch.zeros(data.n, dtype=torch.float64, device=labels.device)
        wrong.index_add_(0, seg, (labels != data.Y.to(labels.device)).to(torch.float64))
        return wrong / data.lengths.to(device=labels.device, dtype=torch.float64)

    def errors(self, w: torch.Tensor, data: ChainData) -> dict:
        """Test error as the papers report it: mean over sequences of the normalized Hamming loss,
        plus the per-position (per-letter) error rate."""
        labels = self.decode(w, data)
        per_seq = self.loss(data, labels)
        per_pos = float((labels.cpu() != data.Y.cpu()).double().mean())
        return {"error": float(per_seq.mean()), "position_error": per_pos}

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

    def dual(self, data: ChainData, lam: float, device=None, dtype=torch.float64) -> "ChainDual":
        return ChainDual(self, data, lam, device=device, dtype=dtype)


def segment_ids(offsets: torch.Tensor) -> torch.Tensor:
    """Sequence id of every position: (N,)."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(lengths.shape[0], device=offsets.device), lengths)


def padded_index(offsets: torch.Tensor, idx: torch.Tensor | None = None):
    """Row indices (B, Tmax) into the stacked positions of sequences ``idx`` and their mask."""
    if idx is None:
        idx = torch.arange(offsets.shape[0] - 1, device=offsets.device)
    start = offsets[idx]
    lengths = offsets[idx + 1] - start
    tmax = int(lengths.max())
    steps = torch.arange(tmax, device=offsets.device)
    valid = steps[None, :] < lengths[:, None]
    pos = torch.where(valid, start[:, None] + steps[None, :], torch.zeros_like(start)[:, None])
    return pos, valid


def _trans_counts(labels: torch.Tensor, seg: torch.Tensor, n: int, K: int) -> torch.Tensor:
    """Transition counts per sequence, (n, K, K) [next, prev], of ragged ``labels``."""
    out = torch.zeros(n, K, K, dtype=torch.float64, device=labels.device)
    same = seg[1:] == seg[:-1]
    out.index_put_((seg[1:][same], labels[1:][same], labels[:-1][same]),
                   torch.ones(int(same.sum()), dtype=torch.float64, device=labels.device), accumulate=True)
    return out


class ChainDual(BlockDual):
    """Compact per-block dual state of a chain SSVM (see module docstring). Tensors live on
    ``device``; on CPU the batch-1 step and gap passes run numba kernels on zero-copy numpy views of
    the same tensors, elsewhere the batched torch path serves every call."""

    def __init__(self, model: ChainModel, data: ChainData, lam: float, device=None, dtype=torch.float64):
        model.check_data(data)
        self.model, self.data = model, data
        self.lam = check_positive(lam, "lam")
        self.n = data.n
        dev = torch.device(device) if device is not None else torch.device("cpu")
        self.device, self.dtype = dev, dtype
        K = model.K
        if data.allow_unknown and bool((data.Y >= model.K).any()):
            raise SSVMInputError(f"Y: training labels must be in [0, {model.K - 1}]; this data has labels "
                                 "unknown to the model (evaluation-only data)")
        self.fptr, self.fidx, self.fval = model.features_csr(data, dtype, dev)
        N, F = data.X.shape[0], model.F
        rows = segment_ids(self.fptr)
        self.X_sp = torch.sparse_coo_tensor(torch.stack([rows, self.fidx]), self.fval, (N, F), check_invariants=True).coalesce()
        self.XT_sp = torch.sparse_coo_tensor(torch.stack([self.fidx, rows]), self.fval, (F, N), check_invariants=True).coalesce()
        self.Y = data.Y.to(dev)
        self.offsets = data.offsets.to(dev)
        self.seg = segment_ids(self.offsets)
        self.lengths = self.offsets[1:] - self.offsets[:-1]
        # Per-example Gram matrices G_i = X_i X_i^T, stored flat (sum_i T_i^2).
        glen = self.lengths ** 2
        self.goff = torch.zeros(self.n + 1, dtype=torch.int64, device=dev)
        self.goff[1:] = torch.cumsum(glen, 0)
        G = np.zeros(int(self.goff[-1]))
        _nb_gram(self.fptr.cpu().numpy(), self.fidx.cpu().numpy(), self.fval.cpu().double().numpy(),
                 self.offsets.cpu().numpy(), self.goff.cpu().numpy(), G)
        self.G = torch.as_tensor(G, dtype=dtype, device=dev)
        self.first_pos = self.offsets[:-1]
        self.last_pos = self.offsets[1:] - 1
        onehot_y = Fn.one_hot(self.Y, K).to(dtype)
        self.gt_trans = _trans_counts(self.Y, self.seg, self.n, K).sum(0).to(dtype)
        # dual state: alpha_i = delta(y_i) at start, i.e. w_i = 0, ell_i = 0
        self.Mu = onehot_y.clone()
        self.Mt = _trans_counts(self.Y, self.seg, self.n, K).to(dtype)
        self.ell_i = torch.zeros(self.n, dtype=dtype, device=dev)
        self._ell = torch.zeros(1, dtype=dtype, device=dev)
        self.w = torch.zeros(model.d, dtype=dtype, device=dev)
        self._cpu = dev.type == "cpu" and dtype == torch.float64
        if self._cpu:
            self._bind_numpy()

    # -- numba fast path -----------------------------------------------------------------------
    def _bind_numpy(self):
        """Zero-copy numpy views of the state tensors (valid as long as they are updated in place)."""
        W, first, last, trans = self.model.split(self.w)
        K = self.model.K
        tmax = int(self.lengths.max())
        self._np = (self.fptr.numpy(), self.fidx.numpy(), self.fval.numpy(), self.offsets.numpy(), self.Y.numpy(),
                    self.G.numpy(), self.goff.numpy(), W.numpy(), first.numpy(), last.numpy(), trans.numpy(),
                    self.Mu.numpy(), self.Mt.numpy())
        self._np_ell = (self.ell_i.numpy(), self._ell.numpy())
        self._no_labels = np.zeros(1, dtype=np.int64)
        self._work = (np.empty((tmax, K)), np.empty(K), np.empty(K), np.empty((tmax, K), dtype=np.int64),
                      np.empty((tmax, K)), np.empty((K, K)))

    @property
    def ell(self) -> float:
        return float(self._ell[0])

    def set_point(self, w: torch.Tensor, ell: float) -> None:
        self.w.copy_(w)
        self._ell[0] = ell

    def fw_corner(self, i: int) -> Corner:
        inv_lamn = 1.0 / (self.lam * self.n)
        if self._cpu:
            T = int(self._np[3][i + 1] - self._np[3][i])
            ys = np.empty(T, dtype=np.int64)
            loss, dot, sq = _nb_fw_corner(i, *self._np, *self._work, ys)
            loss /= self.n
            return Corner(ys, loss, dot * inv_lamn, sq * inv_lamn * inv_lamn,
                          dot / self.n - self._np_ell[0][i] + loss)
        c = self._corners_torch(torch.tensor([i], device=self.device), with_sqnorm=True)
        loss, dot = float(c["loss"][0]), float(c["dot"][0])
        return Corner(c["labels"][0][c["valid"][0]], loss, dot * inv_lamn, float(c["sq"][0]) * inv_lamn * inv_lamn,
                      dot / self.n - float(self.ell_i[i]) + loss)

    def fw_move(self, i: int, corner: Corner, gamma: float) -> None:
        """The FW step is the move from the current point towards the corner."""
        ell_i = self._np_ell[0][i] if self._cpu else float(self.ell_i[i])
        self.pair_move(i, np.asarray(corner.labels, dtype=np.int64) if self._cpu else corner.labels, None,
                       corner.loss, ell_i, gamma)

    # -- active-set primitives (pairwise / away steps, caching) --------------------------------
    # A point of block i is a labeling (int64 array of length T_i) or None, the block's current dual
    # point. Directions are differences of two points: x_i += gamma (v_P - v_Q).
    def gt_labeling(self, i: int) -> np.ndarray:
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.Y[s:e].cpu().numpy().copy()

    @staticmethod
    def key(labeling) -> bytes:
        return np.asarray(labeling, dtype=np.int64).tobytes()

    def loss_of(self, i: int, labeling) -> float:
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        y = torch.as_tensor(np.asarray(labeling), device=self.device)
        return float((y != self.Y[s:e]).double().mean()) / self.n

    def corner_gaps(self, i: int, labelings) -> np.ndarray:
        """g_i(y) = lam <w_i - w_s(y), w> - ell_i + L_i(y)/n for each labeling: the FW gap of block i
        towards corner y (eq. (6) with y in place of the oracle's answer)."""
        L = labelings if isinstance(labelings, np.ndarray) and labelings.ndim == 2 else \
            np.stack([np.asarray(y, dtype=np.int64) for y in labelings])
        L = np.ascontiguousarray(L, dtype=np.int64)
        if self._cpu:
            out = np.empty(L.shape[0])
            _nb_corner_gaps(i, L, *self._np[:5], *self._np[7:], self._work[0], out)
            return out / self.n - self._np_ell[0][i]
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        W, first, last, trans = self.model.split(self.w)
        U = self._unary_rows(W, torch.arange(s, e, device=self.device))
        Lt = torch.as_tensor(L, device=self.device)
        t = torch.arange(e - s, device=self.device)
        score = U[t, Lt].sum(1) + first[Lt[:, 0]] + last[Lt[:, -1]] + trans[Lt[:, 1:], Lt[:, :-1]].sum(1)
        loss = (Lt != self.Y[s:e]).to(self.dtype).mean(1)
        m_theta = (self.Mu[s:e] * U).sum() + self.Mu[s] @ first + self.Mu[e - 1] @ last + (self.Mt[i] * trans).sum()
        return ((score + loss - m_theta) / self.n - self.ell_i[i]).cpu().numpy()

    def _np_delta(self, i, P, Q):
        Du, Dt = self._work[4], self._work[5]
        _nb_build_delta(i, P is None, self._no_labels if P is None else P, Q is None,
                        self._no_labels if Q is None else Q, self._np[3], self._np[11], self._np[12], Du, Dt)
        return Du, Dt

    def _np_move(self, i, P, Q, gamma):
        Du, Dt = self._np_delta(i, P, Q)
        if self.shadow is not None:
            sh = self.model.split(self.shadow)
            shadow = (True, float(self.shadow_coef), sh[0].numpy(), sh[1].numpy(), sh[2].numpy(), sh[3].numpy())
        else:
            shadow = (False, 0.0, *self._np[7:11])
        _nb_delta_move(i, -gamma / (self.lam * self.n), gamma, Du, Dt, *self._np[:4], *self._np[7:], *shadow)

    def _torch_delta(self, i, P, Q):
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        K = self.model.K
        ones = torch.ones(1, e - s, dtype=torch.bool, device=self.device)

        def stats(point):
            if point is None:
                return self.Mu[s:e], self.Mt[i]
            y = torch.as_tensor(np.asarray(point), device=self.device)
            return Fn.one_hot(y, K).to(self.dtype), self._trans_of_padded(y[None], ones)[0]
        (pu, pt), (qu, qt) = stats(P), stats(Q)
        return s, e, pu - qu, pt - qt

    def pair_sqnorm(self, i: int, P, Q) -> float:
        """||w(P) - w(Q)||^2 for two points of block i."""
        if self._cpu:
            Du, Dt = self._np_delta(i, P, Q)
            sq = _nb_delta_sqnorm(i, Du, Dt, self._np[3], self._np[5], self._np[6])
        else:
            s, e, D, Dt = self._torch_delta(i, P, Q)
            T = e - s
            G = self.G[int(self.goff[i]):int(self.goff[i + 1])].view(T, T)
            sq = float((D * (G @ D)).sum() + (D[0] ** 2).sum() + (D[-1] ** 2).sum() + (Dt ** 2).sum())
        return sq / (self.lam * self.n) ** 2

    def pair_move(self, i: int, P, Q, loss_P: float, loss_Q: float, gamma: float) -> None:
        """x_i += gamma (v_P - v_Q); losses are L/n (for the current point: ell_i)."""
        if self._cpu:
            self._np_move(i, P, Q, gamma)
            ell_i, ell = self._np_ell
            ell_i[i] += gamma * (loss_P - loss_Q)
            ell[0] += gamma * (loss_P - loss_Q)
            return
        s, e, D, Dt = self._torch_delta(i, P, Q)
        self._add_stats(s, e, -gamma / (self.lam * self.n), D, Dt)
        self.Mu[s:e] += gamma * D
        self.Mt[i] += gamma * Dt
        self.ell_i[i] += gamma * (loss_P - loss_Q)
        self._ell[0] += gamma * (loss_P - loss_Q)

    def add_psi(self, i: int, corner: Corner, coef: float) -> None:
        """w += coef * psi_i(y*) = coef * A_i(S(y_i) - S(y*)): the emission part touches only the
        rows of the labels involved."""
        if self._cpu:
            _nb_add_psi(i, coef, corner.labels, *self._np[:5], *self._np[7:11])
            return
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        ys = torch.as_tensor(corner.labels, device=self.device)
        K = self.model.K
        D = Fn.one_hot(self.Y[s:e], K).to(self.dtype) - Fn.one_hot(ys, K).to(self.dtype)
        ones = torch.ones(1, e - s, dtype=torch.bool, device=self.device)
        Dt = self._trans_of_padded(self.Y[s:e][None], ones)[0] - self._trans_of_padded(ys[None], ones)[0]
        self._add_stats(s, e, coef, D, Dt, shadow=False)

    # -- batched torch path (any device) ------------------------------------------------------
    def _potentials(self):
        """Unary potentials U = X W^T of all positions (sparse-dense product) and the other blocks of w."""
        W, first, last, trans = self.model.split(self.w)
        if self._cpu:
            U = np.empty((self.Y.shape[0], self.model.K))
            _nb_unary_all(np.ascontiguousarray(W.numpy().T), self._np[0], self._np[1], self._np[2], U)
            return torch.from_numpy(U), first, last, trans
        return torch.sparse.mm(self.X_sp, W.T.contiguous()), first, last, trans

    def _corners_torch(self, idx: torch.Tensor, with_sqnorm: bool):
        """Loss-augmented decoding of blocks ``idx`` and the terms of eq. (6): returns a dict with
        padded labels, valid mask, loss (L/n), aug score, <M_i, theta_i>, dot*(lam n), sq*(lam n)^2."""
        K = self.model.K
        pos, valid = padded_index(self.offsets, idx)
        lengths = valid.sum(1)
        if idx.shape[0] == self.n:
            U, first, last, trans = self._potentials()
            Ub = U[pos] * valid[..., None]
        else:                                   # only the rows of these blocks: O(batch), not O(N)
            W, first, last, trans = self.model.split(self.w)
            Ub = self._unary_rows(W, pos.reshape(-1)).view(*pos.shape, K) * valid[..., None]
        gt = torch.where(valid, self.Y[pos], -1)
        labels, aug = viterbi(Ub, lengths, first, last, trans, gt=gt)
        wrong = ((labels != gt) & valid).sum(1).to(self.dtype)
        loss_norm = wrong / lengths.to(self.dtype)
        score_s = aug - loss_norm
        Mu = self.Mu[pos] * valid[..., None]
        Mt = self.Mt[idx]
        m_theta = (Mu * Ub).sum((1, 2)) + (Mu[torch.arange(len(idx)), 0] @ first) \
            + (Mu[torch.arange(len(idx)), lengths - 1] @ last) + (Mt * trans).sum((1, 2))
        out = {"labels": labels, "valid": valid, "loss": loss_norm / self.n, "aug": aug, "m_theta": m_theta,
               "dot": score_s - m_theta, "pos": pos}
        if with_sqnorm:
            D = (Fn.one_hot(labels.clamp(min=0), K).to(self.dtype) - Mu) * valid[..., None]
            Tm = int(lengths.max())
            gidx = self.goff[idx][:, None, None] + lengths[:, None, None] * torch.arange(Tm, device=self.device)[
                None, :, None] + torch.arange(Tm, device=self.device)[None, None, :]
            vv = valid[:, :, None] & valid[:, None, :]
            G = torch.where(vv, self.G[gidx.clamp(max=self.G.shape[0] - 1)], 0)
            em = torch.einsum("bsk,bst,btk->b", D, G, D)
            ar = torch.arange(len(idx), device=self.device)
            Dt = self._trans_of_padded(labels, valid) - Mt
            out["sq"] = em + (D[ar, 0] ** 2).sum(1) + (D[ar, lengths - 1] ** 2).sum(1) + (Dt ** 2).sum((1, 2))
        return out

    def _unary_rows(self, W: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """U[r] = W x_r for the given rows only, by a gather over their stored features."""
        starts = self.fptr[rows]
        counts = self.fptr[rows + 1] - starts
        local = torch.repeat_interleave(torch.arange(rows.shape[0], device=self.device), counts)
        first_nz = torch.cumsum(counts, 0) - counts
        nz = starts[local] + torch.arange(local.shape[0], device=self.device) - first_nz[local]
        U = torch.zeros(rows.shape[0], W.shape[0], dtype=self.dtype, device=self.device)
        return U.index_add_(0, local, self.fval[nz, None] * W.T[self.fidx[nz]])

    def _trans_of_padded(self, labels, valid):
        B, T = labels.shape
        K = self.model.K
        out = torch.zeros(B, K, K, dtype=self.dtype, device=self.device)
        if T > 1:
            both = valid[:, 1:] & valid[:, :-1]
            b = torch.arange(B, device=self.device)[:, None].expand(B, T - 1)
            out.index_put_((b[both], labels[:, 1:][both], labels[:, :-1][both]),
                           torch.ones(int(both.sum()), dtype=self.dtype, device=self.device), accumulate=True)
        return out

    def _add_stats(self, s: int, e: int, coef: float, D: torch.Tensor, Dt: torch.Tensor, shadow: bool = True) -> None:
        """w += coef * A_i(D, Dt) for the sequence at rows s..e (torch path); the shadow follows."""
        self._add_stats_to(self.w, s, e, coef, D, Dt)
        if shadow and self.shadow is not None:
            self._add_stats_to(self.shadow, s, e, coef * self.shadow_coef, D, Dt)

    def _add_stats_to(self, target, s, e, coef, D, Dt) -> None:
        W, first, last, trans = self.model.split(target)
        a, b = int(self.fptr[s]), int(self.fptr[e])
        rows = segment_ids(self.fptr[s:e + 1] - self.fptr[s])
        W.index_add_(1, self.fidx[a:b], (coef * D[rows] * self.fval[a:b, None]).T)
        first.add_(coef * D[0])
        last.add_(coef * D[-1])
        trans.add_(coef * Dt)

    def gap_pass(self) -> GapPass:
        """All block gaps at the current w: g_i = (aug_score_i - <M_i, theta_i>)/n - ell_i, since
        lam <w_i, w> = (<S(y_i), theta_i> - <M_i, theta_i>)/n and H_i = aug_score_i - <S(y_i), theta_i>."""
        U, first, last, trans = self._potentials()
        if self._cpu:
            labels, aug, m_theta, gt_score, wrong = _nb_gap_pass(U.numpy(), *self._np[3:5], first.numpy(),
                                                                 last.numpy(), trans.numpy(), self._np[11],
                                                                 self._np[12])
            labels, aug, m_theta, gt_score = map(torch.from_numpy, (labels, aug, m_theta, gt_score))
            loss = torch.from_numpy(wrong) / self.lengths.to(self.dtype) / self.n
        else:
            c = self._corners_torch(torch.arange(self.n, device=self.device), with_sqnorm=False)
            labels, aug, m_theta = c["labels"][c["valid"]], c["aug"], c["m_theta"]
            loss = c["loss"]
            gt_score = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(
                0, self.seg, U.gather(1, self.Y[:, None])[:, 0])
            gt_score += first[self.Y[self.first_pos]] + last[self.Y[self.last_pos]]
            gt_score += (_trans_counts(self.Y, self.seg, self.n, self.model.K).to(self.dtype) * trans).sum((1, 2))
        H = aug - gt_score
        gaps = (aug - m_theta) / self.n - self.ell_i
        return GapPass(labels=labels, loss=loss, H=H, block_gaps=gaps)

    def _point_of(self, labels: torch.Tensor):
        """Statistics of ragged labels: (one-hot (N, K), transition counts (n, K, K))."""
        K = self.model.K
        return Fn.one_hot(labels, K).to(self.dtype), _trans_counts(labels, self.seg, self.n, K).to(self.dtype)

    def _w_from_stats(self, Mu: torch.Tensor, Mt_sum: torch.Tensor) -> torch.Tensor:
        """sum_i A_i(S(y_i) - M_i) / (lam n) for stacked statistics (the exact map from duals to w)."""
        K = self.model.K
        D = Fn.one_hot(self.Y, K).to(self.dtype) - Mu
        w = torch.empty_like(self.w)
        W, first, last, trans = self.model.split(w)
        W.copy_(torch.sparse.mm(self.XT_sp, D).T)
        first.copy_(D[self.first_pos].sum(0))
        last.copy_(D[self.last_pos].sum(0))
        trans.copy_(self.gt_trans - Mt_sum)
        return w / (self.lam * self.n)

    def corner_point(self, gp: GapPass):
        oh, tc = self._point_of(gp.labels.to(self.device))
        return self._w_from_stats(oh, tc.sum(0)), float(gp.loss.sum())

    def move_all(self, gp: GapPass, w_s: torch.Tensor, ell_s: float, gamma: float) -> None:
        oh, tc = self._point_of(gp.labels.to(self.device))
        self.Mu.mul_(1 - gamma).add_(oh, alpha=gamma)
        self.Mt.mul_(1 - gamma).add_(tc, alpha=gamma)
        self.ell_i.mul_(1 - gamma).add_(gp.loss.to(self.device, self.dtype), alpha=gamma)
        self.w.mul_(1 - gamma).add_(w_s, alpha=gamma)
        self._ell[0] = self.ell_i.sum()

    def recompute(self) -> None:
        self.w.copy_(self._w_from_stats(self.Mu, self.Mt.sum(0)))
        self._ell[0] = self.ell_i.sum()

    def block_w(self, i: int) -> torch.Tensor:
        """Dense w_i of one block (for tests and inspection; never used by the solvers)."""
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        Xi = self.X_sp.index_select(0, torch.arange(s, e, device=self.device)).to_dense()
        phi_gt = self.model.joint_feature(Xi, self.Y[s:e])
        w = torch.zeros_like(self.w)
        W, first, last, trans = self.model.split(w)
        W.copy_(self.Mu[s:e].T @ Xi)
        first.copy_(self.Mu[s])
        last.copy_(self.Mu[e - 1])
        trans.copy_(self.Mt[i])
        return (phi_gt - w) / (self.lam * self.n)

    # -- regularization path ------------------------------------------------------------------
    def rescale(self, lam_new: float, rho: float) -> None:
        """Mixes the statistics toward the ground truth (alpha_i <- rho alpha_i + (1 - rho) delta(y_i)),
        in place so the numba views stay valid; w follows exactly from the statistics."""
        lam_new = check_positive(lam_new, "lam_new")
        K = self.model.K
        self.Mu.mul_(rho).add_(Fn.one_hot(self.Y, K).to(self.dtype), alpha=1.0 - rho)
        self.Mt.mul_(rho).add_(_trans_counts(self.Y, self.seg, self.n, K).to(self.dtype), alpha=1.0 - rho)
        self.ell_i.mul_(rho)
        self.lam = lam_new
        self.recompute()

    def _scores(self, U, first, last, trans, labels) -> torch.Tensor:
        """<w, phi(x_i, y)> of ragged labels (N,) for every sequence, from the potentials of w."""
        sc = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(
            0, self.seg, U.gather(1, labels[:, None])[:, 0])
        sc += first[labels[self.first_pos]] + last[labels[self.last_pos]]
        return sc + (_trans_counts(labels, self.seg, self.n, self.model.K).to(self.dtype) * trans).sum((1, 2))

    def _potentials_of(self, w):
        saved = self.w.clone()
        self.w.copy_(w)
        try:
            return tuple(t.clone() for t in self._potentials())
        finally:
            self.w.copy_(saved)

    def max_margins(self, w: torch.Tensor) -> torch.Tensor:
        w = w.to(self.device, self.dtype)
        labels = self.model.decode(w, self.data).to(self.device)
        pots = self._potentials_of(w)
        return self._scores(*pots, labels) - self._scores(*pots, self.Y)

    def block_wdots(self) -> torch.Tensor:
        """lam <w_i, w> = (<S(y_i), theta_i> - <M_i, theta_i>) / n (module docstring)."""
        U, first, last, trans = self._potentials()
        m_theta = torch.zeros(self.n, dtype=self.dtype, device=self.device).index_add_(0, self.seg, (self.Mu * U).sum(1))
        m_theta += self.Mu[self.first_pos] @ first + self.Mu[self.last_pos] @ last + (self.Mt * trans).sum((1, 2))
        return (self._scores(U, first, last, trans, self.Y) - m_theta) / self.n

    def state_dict(self) -> dict:
        return {"w": self.w.clone(), "ell": self._ell.clone(), "ell_i": self.ell_i.clone(),
                "Mu": self.Mu.clone(), "Mt": self.Mt.clone(), "lam": self.lam}

    def load_state_dict(self, state: dict) -> None:
        for key in ("w", "ell_i", "Mu", "Mt"):
            dst = getattr(self, key)
            check(tuple(state[key].shape) == tuple(dst.shape), f"state[{key!r}]", f"shape {tuple(dst.shape)}",
                  tuple(state[key].shape))
            dst.copy_(state[key])
        self._ell.copy_(state["ell"])
        if float(state["lam"]) != self.lam:
            raise SSVMInputError(f"state['lam']: expected {self.lam}, got {state['lam']}")


# -- numba kernels (CPU, float64) ---------------------------------------------------------------
# fastmath lets LLVM vectorize the floating-point reductions (the unary dot products dominate the
# batch-1 step); results stay deterministic for a given build, and exactness is tested against the
# torch path to 1e-9.
_FAST = {"reassoc", "contract", "nsz", "arcp"}


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _nb_block_unary(i, fptr, fidx, fval, off, W, U):
    """U[t, k] = <W[k], x_t> for the positions of block i (CSR features)."""
    s = off[i]
    T = off[i + 1] - s
    K = W.shape[0]
    for t in range(T):
        for k in range(K):
            U[t, k] = 0.0
        for j in range(fptr[s + t], fptr[s + t + 1]):
            v = fval[j]
            f = fidx[j]
            for k in range(K):
                U[t, k] += v * W[k, f]


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _nb_m_theta(i, off, U, first, last, trans, Mu, Mt):
    """<M_i, theta_i>: the expected score of block i's current dual point."""
    s = off[i]
    T = off[i + 1] - s
    K = U.shape[1]
    m = 0.0
    for t in range(T):
        for k in range(K):
            m += Mu[s + t, k] * U[t, k]
    for k in range(K):
        m += Mu[s, k] * first[k] + Mu[s + T - 1, k] * last[k]
    for a in range(K):
        for b in range(K):
            m += Mt[i, a, b] * trans[a, b]
    return m


@nb.njit(cache=True, nogil=True)
def _nb_build_delta(i, p_cur, P, q_cur, Q, off, Mu, Mt, Du, Dt):
    """D = S(P) - S(Q) for two points of block i, each a labeling or (``*_cur``) the current dual
    point M_i: unary part Du (T, K), transition part Dt (K, K) [next, prev]."""
    s = off[i]
    T = off[i + 1] - s
    K = Mu.shape[1]
    for t in range(T):
        for k in range(K):
            Du[t, k] = (Mu[s + t, k] if p_cur else 0.0) - (Mu[s + t, k] if q_cur else 0.0)
        if not p_cur:
            Du[t, P[t]] += 1.0
        if not q_cur:
            Du[t, Q[t]] -= 1.0
    for a in range(K):
        for b in range(K):
            Dt[a, b] = (Mt[i, a, b] if p_cur else 0.0) - (Mt[i, a, b] if q_cur else 0.0)
    for t in range(T - 1):
        if not p_cur:
            Dt[P[t + 1], P[t]] += 1.0
        if not q_cur:
            Dt[Q[t + 1], Q[t]] -= 1.0


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _nb_delta_sqnorm(i, Du, Dt, off, G, goff):
    """||A_i(D)||^2 = sum_k D_k^T G_i D_k + |D_0|^2 + |D_{T-1}|^2 + |Dt|_F^2."""
    s = off[i]
    T = off[i + 1] - s
    K = Du.shape[1]
    g0 = goff[i]
    sq = 0.0
    for k in range(K):
        for t in range(T):
            dt = Du[t, k]
            if dt == 0.0:
                continue
            acc = 0.0
            for u in range(T):
                acc += G[g0 + t * T + u] * Du[u, k]
            sq += dt * acc
    for k in range(K):
        sq += Du[0, k] * Du[0, k] + Du[T - 1, k] * Du[T - 1, k]
    for a in range(K):
        for b in range(K):
            sq += Dt[a, b] * Dt[a, b]
    return sq


@nb.njit(cache=True, nogil=True, fastmath=_FAST, inline="always")
def _nb_add_position(s, t, T, k, coef, fptr, fidx, fval, W, first, last):
    """Add coef * (the features of position t, the first/last indicators) to state k's weights."""
    for j in range(fptr[s + t], fptr[s + t + 1]):
        W[k, fidx[j]] += coef * fval[j]
    if t == 0:
        first[k] += coef
    if t == T - 1:
        last[k] += coef


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _nb_delta_move(i, c, gamma, Du, Dt, fptr, fidx, fval, off, W, first, last, trans, Mu, Mt,
                   sh_on, sh_c, SW, Sfirst, Slast, Strans):
    """w += c A_i(D) and M_i += gamma D (sparse in the nonzeros of D); with ``sh_on`` the shadow
    vector (SW, Sfirst, Slast, Strans) gets sh_c times the same change."""
    s = off[i]
    T = off[i + 1] - s
    K = W.shape[0]
    cs = c * sh_c
    for t in range(T):
        for k in range(K):
            dk = Du[t, k]
            if dk != 0.0:
                _nb_add_position(s, t, T, k, c * dk, fptr, fidx, fval, W, first, last)
                if sh_on:
                    _nb_add_position(s, t, T, k, cs * dk, fptr, fidx, fval, SW, Sfirst, Slast)
                Mu[s + t, k] += gamma * dk
    for a in range(K):
        for b in range(K):
            if Dt[a, b] != 0.0:
                trans[a, b] += c * Dt[a, b]
                if sh_on:
                    Strans[a, b] += cs * Dt[a, b]
                Mt[i, a, b] += gamma * Dt[a, b]


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _nb_fw_corner(i, fptr, fidx, fval, off, Y, G, goff, W, first, last, trans, Mu, Mt, U, delta, newd, bp, Du, Dt,
                  ys):
    """Batch-1 loss-augmented oracle for block i and the terms of eq. (6) in units of 1/(lam n):
    returns (L(y*), <S(y*) - M_i, theta_i>, ||A_i(S(y*) - M_i)||^2) and writes y* into ys."""
    s = off[i]
    T = off[i + 1] - s
    _nb_block_unary(i, fptr, fidx, fval, off, W, U)
    aug = viterbi_segment(U, 0, T, first, last, trans, Y[s:s + T], True, ys, delta, newd, bp)
    wrong = 0
    for t in range(T):
        if ys[t] != Y[s + t]:
            wrong += 1
    loss = wrong / T
    dot = (aug - loss) - _nb_m_theta(i, off, U, first, last, trans, Mu, Mt)
    _nb_build_delta(i, False, ys, True, ys, off, Mu, Mt, Du, Dt)
    return loss, dot, _nb_delta_sqnorm(i, Du, Dt, off, G, goff)


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _nb_corner_gaps(i, labels, fptr, fidx, fval, off, Y, W, first, last, trans, Mu, Mt, U, out):
    """For each row y of ``labels`` (m, T_i): <S(y), theta_i> + L(y) - <M_i, theta_i>, i.e. n times
    (block gap w.r.t. corner y + ell_i)."""
    s = off[i]
    T = off[i + 1] - s
    _nb_block_unary(i, fptr, fidx, fval, off, W, U)
    m_theta = _nb_m_theta(i, off, U, first, last, trans, Mu, Mt)
    for r in range(labels.shape[0]):
        v = first[labels[r, 0]] + last[labels[r, T - 1]]
        wrong = 0
        for t in range(T):
            v += U[t, labels[r, t]]
            if labels[r, t] != Y[s + t]:
                wrong += 1
            if t + 1 < T:
                v += trans[labels[r, t + 1], labels[r, t]]
        out[r] = v + wrong / T - m_theta


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _nb_gap_pass(U, off, Y, first, last, trans, Mu, Mt):
    """Loss-augmented Viterbi for every block; returns labels (N,), aug scores, <M_i, theta_i>,
    ground-truth scores and mismatch counts (n,)."""
    N, K = U.shape
    n = off.shape[0] - 1
    labels = np.empty(N, dtype=np.int64)
    aug = np.empty(n)
    m_theta = np.empty(n)
    gt_score = np.empty(n)
    wrong = np.empty(n)
    _viterbi_all(U, off, first, last, trans, Y, True, labels, aug)
    for i in range(n):
        s = off[i]
        T = off[i + 1] - s
        mt = 0.0
        gs = first[Y[s]] + last[Y[s + T - 1]]
        wr = 0.0
        for t in range(T):
            r = s + t
            for k in range(K):
                mt += Mu[r, k] * U[r, k]
            gs += U[r, Y[r]]
            if t + 1 < T:
                gs += trans[Y[r + 1], Y[r]]
            if labels[r] != Y[r]:
                wr += 1.0
        for k in range(K):
            mt += Mu[s, k] * first[k] + Mu[s + T - 1, k] * last[k]
        for a in range(K):
            for b in range(K):
                mt += Mt[i, a, b] * trans[a, b]
        m_theta[i] = mt
        gt_score[i] = gs
        wrong[i] = wr
    return labels, aug, m_theta, gt_score, wrong


@nb.njit(cache=True, nogil=True)
def _nb_add_psi(i, coef, ys, fptr, fidx, fval, off, Y, W, first, last, trans):
    """w += coef * psi_i(ys) = coef * (phi(x_i, y_i) - phi(x_i, ys))."""
    s = off[i]
    T = off[i + 1] - s
    for t in range(T):
        a, b = Y[s + t], ys[t]
        if a != b:
            for j in range(fptr[s + t], fptr[s + t + 1]):
                W[a, fidx[j]] += coef * fval[j]
                W[b, fidx[j]] -= coef * fval[j]
    first[Y[s]] += coef
    first[ys[0]] -= coef
    last[Y[s + T - 1]] += coef
    last[ys[T - 1]] -= coef
    for t in range(T - 1):
        trans[Y[s + t + 1], Y[s + t]] += coef
        trans[ys[t + 1], ys[t]] -= coef


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _nb_unary_all(WT, fptr, fidx, fval, U):
    """U[r, k] = sum_j fval[j] * W[k, fidx[j]] over the stored entries of row r (WT = W^T, (F, K))."""
    N, K = U.shape
    for r in range(N):
        for k in range(K):
            U[r, k] = 0.0
        for j in range(fptr[r], fptr[r + 1]):
            v = fval[j]
            f = fidx[j]
            for k in range(K):
                U[r, k] += v * WT[f, k]


@nb.njit(cache=True)
def _nb_gram(fptr, fidx, fval, off, goff, G):
    """Per-sequence Gram matrices G_i[t, u] = <x_t, x_u> from CSR rows with sorted column indices."""
    n = off.shape[0] - 1
    for i in range(n):
        s = off[i]
        T = off[i + 1] - s
        for t in range(T):
            for u in range(t, T):
                a, a_end = fptr[s + t], fptr[s + t + 1]
                b, b_end = fptr[s + u], fptr[s + u + 1]
                acc = 0.0
                while a < a_end and b < b_end:
                    if fidx[a] == fidx[b]:
                        acc += fval[a] * fval[b]
                        a += 1
                        b += 1
                    elif fidx[a] < fidx[b]:
                        a += 1
                    else:
                        b += 1
                G[goff[i] + t * T + u] = acc
                G[goff[i] + u * T + t] = acc
