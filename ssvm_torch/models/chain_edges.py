"""A linear chain with edge-observation features: transitions conditioned on the observation.

Sha & Pereira (2003) pair every observation predicate with the label pair c(y_{t-1}, y_t) as well
as with the label y_t. This model adds such features for a separate set of *edge attributes*
(``ChainData.E``, e.g. the POS tag or the word at t, templates ``edge:p[0]``): the joint feature
map of :class:`~ssvm_torch.models.chain.ChainModel` is extended by the block

    edge    ``d_0 + a*P + p``    sum_{t >= 1} e_t[a] [(y_t, y_{t-1}) = pair p]

with d_0 the chain's d and P label pairs: the pairs (next, prev) seen in the training labels (the
*supported* pairs, as CRFsuite and Sha & Pereira use), so d = d_0 + A_e P. The model stays
first-order: Viterbi runs with a per-position transition matrix trans + sum_a e_t[a] E[a]
(oracles/edge_kernels.py). Decoding and the compact store run as numba kernels on CPU float64;
the padded torch oracle interface (``scores`` / ``decode``) is not provided for this model.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.types import ChainData
from ..devices import from_host, to_host
from ..errors import SSVMInputError, check
from ..oracles.edge_kernels import nb_viterbi_edges
from .chain import ChainModel
from .chain_index import csr_row_nonzeros, padded_index

CHUNK_BLOCKS = 1024        # sequences whose unaries are computed together (CoNLL: ~24k tokens, 8 MB)


def block_chunks(n: int, size: int | None = None):
    """[b0, b1) ranges of ``size`` (default :data:`CHUNK_BLOCKS`) sequences covering range(n)."""
    size = size or CHUNK_BLOCKS
    return [(b0, min(n, b0 + size)) for b0 in range(0, n, size)]


class EdgeChainModel(ChainModel):
    """:class:`ChainModel` plus edge-observation weights E (A_e, P) over the supported label pairs
    ``pairs`` (P, 2) int64 rows (next, prev)."""

    kind = "chain-edges"

    def __init__(self, n_features: int, n_states: int, n_edge_features: int, pairs, loss: str = "normalized",
                 emission: str = "label-major"):
        super().__init__(n_features, n_states, loss, emission)
        pairs = torch.as_tensor(np.asarray(pairs, dtype=np.int64)).reshape(-1, 2)
        check(int(n_edge_features) >= 1, "n_edge_features", "an int >= 1", n_edge_features)
        check(pairs.shape[0] >= 1 and int(pairs.min()) >= 0 and int(pairs.max()) < self.K, "pairs",
              f"label pairs (next, prev) in [0, {self.K - 1}]", tuple(pairs.shape))
        check(len({tuple(p) for p in pairs.tolist()}) == pairs.shape[0], "pairs", "distinct label pairs", "repeats")
        self.n_edge_features, self.pairs = int(n_edge_features), pairs
        self.P = pairs.shape[0]
        self.d0 = self.d
        self.d = self.d0 + self.n_edge_features * self.P
        pair_of = np.full((self.K, self.K), -1, dtype=np.int64)
        pair_of[pairs[:, 0].numpy(), pairs[:, 1].numpy()] = np.arange(self.P)
        self.pair_of = pair_of

    @classmethod
    def for_data(cls, data: ChainData, loss: str = "normalized", emission: str = "label-major") -> "EdgeChainModel":
        """Weights for the edge attributes of ``data`` and the label pairs of its training labels."""
        check(data.E is not None, "data.E", "edge attributes (ChainData.E)", None)
        starts = torch.zeros(data.Y.shape[0], dtype=torch.bool)
        starts[data.offsets[:-1]] = True
        inner = ~starts[1:]                              # (t-1, t) inside one sequence
        pairs = torch.unique(torch.stack([data.Y[1:][inner], data.Y[:-1][inner]], 1), dim=0)
        if pairs.shape[0] == 0:
            raise SSVMInputError("data: edge-observation features need at least one sequence of length >= 2")
        return cls(data.X.shape[1], data.n_states, data.E.shape[1], pairs, loss, emission)

    def describe(self) -> dict:
        return {**super().describe(), "kind": self.kind, "transition": [self.d0 - self.K * self.K, self.d0],
                "edge": [self.d0, self.d], "edge_index": "a*P + p, p = pairs.index((y_t, y_{t-1}))",
                "pairs": self.pairs.tolist(), "n_edge_features": self.n_edge_features, "d": self.d}

    def check_data(self, data: ChainData, field: str = "data") -> None:
        super().check_data(data, field)
        check(data.E is not None and data.E.shape[1] == self.n_edge_features, f"{field}.E",
              f"edge attributes with {self.n_edge_features} columns",
              None if data.E is None else data.E.shape[1])

    def edge_weights(self, w: torch.Tensor) -> torch.Tensor:
        """The view E (A_e, P) of the edge block of w."""
        check(w.dim() == 1 and w.shape[0] == self.d, "w", f"a vector of length d = {self.d}", tuple(w.shape))
        return w[self.d0:].view(self.n_edge_features, self.P)

    def edge_csr(self, data: ChainData):
        """(row pointers, attribute ids, values) of the edge attributes as float64 numpy arrays."""
        E = data.E
        return (to_host(E.crow_indices()).astype(np.int64), to_host(E.col_indices()).astype(np.int64),
                to_host(E.values()).astype(np.float64))

    def _numba_only(self, w: torch.Tensor, what: str) -> None:
        if w.device.type != "cpu" or w.dtype != torch.float64 or self.kernels == "torch":
            raise SSVMInputError(f"{what}: a chain with edge-observation features decodes with the numba kernels "
                                 f"(CPU float64, kernels 'auto' or 'numba'), got {w.device} {w.dtype}, kernels "
                                 f"{self.kernels!r}")

    def predict_ragged(self, w: torch.Tensor, data: ChainData) -> torch.Tensor:
        """Max-scoring labels (N,) of every position with per-position transitions (numba)."""
        self.check_data(data)
        self._numba_only(w, "predict")
        return self._viterbi(w, data, observed_only=False)

    def predict(self, w: torch.Tensor, data: ChainData, idx=None) -> torch.Tensor:
        """Plain decoding of the sequences ``idx`` (default all) as padded labels (B, T_max), -1 beyond each
        length: :meth:`predict_ragged` on their subset (the padded torch oracle does not exist here)."""
        sub = data if idx is None else data.subset(torch.as_tensor(idx).reshape(-1).to(data.offsets.device))
        flat = self.predict_ragged(w, sub)
        pos, valid = padded_index(sub.offsets.to(flat.device))
        return torch.where(valid, flat[pos], -1)

    def complete(self, w: torch.Tensor, data: ChainData) -> torch.Tensor:
        """h_i = argmax over the labelings agreeing with the observed labels of <w, phi(x_i, h)> (the CCCP
        completion of the latent SSVM, ssvm_torch/latent.py): the edge Viterbi with every other label at an
        observed position at -inf; ragged (N,) labels, ``data.Y`` at the observed positions. A sequence no
        allowed labeling agrees with (tag constraints) is refused by name."""
        if not data.partial:
            return data.Y.clone()
        self.check_data(data)
        self._numba_only(w, "complete")
        return self._viterbi(w, data, observed_only=True)

    def _viterbi(self, w: torch.Tensor, data: ChainData, observed_only: bool) -> torch.Tensor:
        W, first, last, trans = self.split(w)
        off = to_host(data.offsets).astype(np.int64)
        eptr, eidx, evals = self.edge_csr(data)
        E = np.ascontiguousarray(to_host(self.edge_weights(w)))
        out, scores = np.empty(int(off[-1]), dtype=np.int64), np.empty(data.n)
        if observed_only:
            Y, seen = to_host(data.Y).astype(np.int64), to_host(data.observed)
        for b0, b1 in block_chunks(data.n):            # the unaries of a chunk at a time: (chunk tokens, K)
            p0, p1 = int(off[b0]), int(off[b1])
            U = self.host_unaries(W, data, p0, p1)
            if observed_only:                            # only the observed label at an observed position
                rows = np.nonzero(seen[p0:p1])[0]
                keep = U[rows, Y[p0:p1][rows]]
                U[rows] = -np.inf
                U[rows, Y[p0:p1][rows]] = keep
            nb_viterbi_edges(U, off[b0:b1 + 1] - p0, to_host(first), to_host(last),
                             to_host(trans), eptr[p0:p1 + 1], eidx, evals, E, self.pairs[:, 0].numpy(),
                             self.pairs[:, 1].numpy(), np.zeros(1, dtype=np.int64), np.zeros(b1 - b0), out[p0:p1],
                             scores[b0:b1], self.pen_host)
        if observed_only and not np.isfinite(scores).all():
            raise SSVMInputError(f"data.Y: sequence {int(np.nonzero(~np.isfinite(scores))[0][0])}: no labeling allowed "
                                 "by the tag constraints agrees with its observed labels")
        return from_host(out, w.device)

    def joint_feature(self, Xc: torch.Tensor, labels: torch.Tensor, Ec: torch.Tensor | None = None) -> torch.Tensor:
        """phi(x, y) of one sequence (dense (d,)): the chain's blocks and, with the dense edge rows
        Ec (T, A_e), the edge block."""
        phi = super().joint_feature(Xc, labels)              # the chain's blocks; the edge block is zero
        if Ec is not None:
            E = phi[self.d0:].view(self.n_edge_features, self.P)
            for t in range(1, labels.shape[0]):
                p = int(self.pair_of[int(labels[t]), int(labels[t - 1])])
                if p >= 0:
                    E[:, p] += Ec[t]
        return phi

    def add_psi(self, targets, data: ChainData, idx, labels, coefs) -> None:
        """targets[j] += sum_b coefs[j][b] psi_b(labels_b) in place, sparse: the chain's blocks by
        :meth:`ChainModel.add_psi`, the edge block by the stored edge attributes of each transition whose label
        pair is supported (the gold pair's column up, the labeling's down; :meth:`joint_feature`'s sums)."""
        dev = targets[0].device
        batch = self._psi_batch(data, idx, labels, dev)                 # one subset for both parts
        self._add_chain_psi(targets, batch, coefs)
        sub, pos, valid, labels, gold = batch
        B, T = valid.shape
        both = valid[:, 1:]
        pair_of = torch.as_tensor(self.pair_of, device=dev)
        gold_pair = pair_of[gold[:, 1:][both], gold[:, :-1][both]]
        pair = pair_of[labels[:, 1:][both].clamp(min=0), labels[:, :-1][both].clamp(min=0)]
        E = sub.E.to(dev)
        local, nz = csr_row_nonzeros(E.crow_indices().to(torch.int64), pos[:, 1:][both])
        col, val = E.col_indices().to(torch.int64)[nz], E.values()[nz]
        for target, coef in zip(targets, coefs):
            step = coef.to(device=dev, dtype=target.dtype)[:, None].expand(B, T - 1)[both][local] * val.to(target.dtype)
            flat = target[self.d0:]
            for p, sign in ((gold_pair[local], 1.0), (pair[local], -1.0)):
                keep = p >= 0
                flat.index_add_(0, col[keep] * self.P + p[keep], sign * step[keep])

    def phi(self, data: ChainData, idx, labels) -> torch.Tensor:
        """Dense joint features of padded labelings (B, T_max): (B, d). Small data only."""
        idx = torch.as_tensor(idx, device=data.Y.device).reshape(-1)
        labels = torch.as_tensor(labels, device=data.Y.device).reshape(len(idx), -1)
        sub = data.subset(idx)
        Xc, Ec = self.features(sub), sub.E.to_dense()
        out, start = [], 0
        for b in range(len(idx)):
            T = int(sub.lengths[b])
            out.append(self.joint_feature(Xc[start:start + T], labels[b, :T], Ec[start:start + T]))
            start += T
        return torch.stack(out)

    def scores(self, w, data, idx):
        raise SSVMInputError("scores: a chain with edge-observation features has per-position transitions; it runs on "
                             "the compact chain store and predict_ragged (numba), not the padded torch oracle")

