"""The torch path of the dependency-tree block store (any device): the same block steps as the compiled
kernels of :mod:`ssvm_torch.oracles.tree_kernels`, in torch ops on the store's tensors, with the decoders of
:mod:`ssvm_torch.trees` (the torch Eisner; Chu-Liu-Edmonds on the host, one copy each way per batch). A
mixin of :class:`~ssvm_torch.stores.tree.TreeDual` (it reads the store's state tensors)."""
from __future__ import annotations

import torch

from ..devices import to_host
from ..trees import ops
from .base import BatchCorners, Corner

#: sentences per batched decode of the torch gap pass (bounds the padded (B, N, N) scores)
PASS_CHUNK = 256


class TreeTorchPath:
    """The torch half of :class:`~ssvm_torch.stores.tree.TreeDual`."""

    def _t_arcs(self, i: int):
        """(n_i, first arc, first word, m (n^2,), h (n^2,)): the block's arcs and their (modifier, head)."""
        n, base, g0 = int(self.lengths[i]), int(self.arc_off[i]), int(self.offsets[i])
        k = torch.arange(n * n, device=self.device)
        m = k // n + 1
        r = k - (m - 1) * n
        return n, base, g0, m, torch.where(r < m, r, r + 1)

    def _t_features(self, first_arc: int, n_arcs: int):
        """(ids of the arcs' features, the arc each belongs to (relative)) for arcs first_arc..+n_arcs."""
        counts = self.ptr[first_arc + 1:first_arc + n_arcs + 1] - self.ptr[first_arc:first_arc + n_arcs]
        lo, hi = int(self.ptr[first_arc]), int(self.ptr[first_arc + n_arcs])
        owner = torch.repeat_interleave(torch.arange(n_arcs, device=self.device), counts)
        return self.ids[lo:hi].long(), owner

    def _t_tokens(self, i: int):
        """(ids of block i's head tokens' features, the token each belongs to (0..n_i))."""
        n, t0 = int(self.lengths[i]), int(self.offsets[i]) + i
        counts = self.tptr[t0 + 1:t0 + n + 2] - self.tptr[t0:t0 + n + 1]
        lo, hi = int(self.tptr[t0]), int(self.tptr[t0 + n + 1])
        return self.tids[lo:hi].long(), torch.repeat_interleave(torch.arange(n + 1, device=self.device), counts)

    def _t_theta(self, i: int) -> torch.Tensor:
        n, base, _, _, h = self._t_arcs(i)
        f, owner = self._t_features(base, n * n)
        theta = torch.zeros(n * n, dtype=self.dtype, device=self.device).index_add_(0, owner, self.w[f])
        tf, towner = self._t_tokens(i)
        u = torch.zeros(n + 1, dtype=self.dtype, device=self.device).index_add_(0, towner, self.w[tf])
        return theta + u[h]

    def _t_oracle(self, i: int, theta: torch.Tensor):
        """(heads (n,), <S(y*), theta>, <G, theta>, wrong) of block i's loss-augmented tree (the gold tree in
        the space, as the compiled kernel has it)."""
        n, _, g0, m, h = self._t_arcs(i)
        gold, lg = self.gold[g0:g0 + n], self.lgold[g0:g0 + n]          # lg: -1 at unobserved words (no cost)
        S = torch.full((1, n + 1, n + 1), float("-inf"), dtype=self.dtype, device=self.device)
        S[0, m, h] = theta + self.costs[i] * ((h != lg[m - 1]) & (lg[m - 1] >= 0)).to(self.dtype)
        row, _ = ops.best(S, self.lengths[i:i + 1], self.model.projective, self.model.multiroot, "torch")
        heads = row[0, 1:n + 1]
        words = torch.arange(1, n + 1, device=self.device)
        score = theta[(words - 1) * n + torch.where(heads < words, heads, heads - 1)].sum()
        gold_score = theta[(words - 1) * n + torch.where(gold < words, gold, gold - 1)].sum()
        wrong = int(((heads != lg) & (lg >= 0)).sum())
        if not bool(self.gold_ok[i]) and float(score + self.costs[i] * wrong) < float(gold_score):
            return gold.clone(), gold_score, gold_score, 0
        return heads, score, gold_score, wrong

    def _t_delta(self, i: int, P, Q) -> torch.Tensor:
        n, base = int(self.lengths[i]), int(self.arc_off[i])
        words = torch.arange(1, n + 1, device=self.device)

        def point(X):
            if X is None:
                return self.M[base:base + n * n]
            if hasattr(X, "mu"):                            # a point of the arborescence polytope (EG)
                return X.mu.to(self.device, self.dtype)
            y = torch.as_tensor(X, device=self.device).long()
            out = torch.zeros(n * n, dtype=self.dtype, device=self.device)
            out[(words - 1) * n + torch.where(y < words, y, y - 1)] = 1.0
            return out
        return point(P) - point(Q)

    def _t_image(self, pieces) -> torch.Tensor:
        """v = sum over (i, D) of sum_a D_a f_a (head tokens' features through D's column sums), dense (d,)."""
        v = torch.zeros_like(self.w)
        for i, D in pieces:
            n, base, _, _, h = self._t_arcs(i)
            f, owner = self._t_features(base, n * n)
            v.index_add_(0, f, D[owner])
            col = torch.zeros(n + 1, dtype=self.dtype, device=self.device).index_add_(0, h, D)
            tf, towner = self._t_tokens(i)
            v.index_add_(0, tf, col[towner])
        return v

    def _t_move(self, v: torch.Tensor, scale: float) -> None:
        self.w.add_(v, alpha=scale)
        if self.shadow is not None:
            self.shadow.add_(v, alpha=scale * self.shadow_coef)

    def _t_fw_corner(self, i: int) -> Corner:
        theta = self._t_theta(i)
        heads, score, _, wrong = self._t_oracle(i, theta)
        n, base = int(self.lengths[i]), int(self.arc_off[i])
        m_theta = float(self.M[base:base + n * n] @ theta)
        loss = float(self.costs[i]) * wrong / self.N
        v = self._t_image([(i, self._t_delta(i, heads, None))])
        inv = self._inv()
        dot = float(score) - m_theta
        return Corner(heads, loss, dot * inv, float(v @ v) * inv * inv, dot / self.N - float(self.ell_i[i]) + loss)

    def _t_corner_gaps(self, i: int, labelings):
        theta = self._t_theta(i)
        n, base, g0, _, _ = self._t_arcs(i)
        m_theta = self.M[base:base + n * n] @ theta
        gold = self.lgold[g0:g0 + n]
        words = torch.arange(1, n + 1, device=self.device)
        out = []
        for y in labelings:
            y = torch.as_tensor(y, device=self.device).long()
            out.append(theta[(words - 1) * n + torch.where(y < words, y, y - 1)].sum()
                       + self.costs[i] * ((y != gold) & (gold >= 0)).sum())
        return to_host((torch.stack(out) - m_theta) / self.N - self.ell_i[i])

    def _t_pair_sqnorm(self, i: int, P, Q) -> float:
        v = self._t_image([(i, self._t_delta(i, P, Q))])
        return float(v @ v) * self._inv() ** 2

    def _t_pair_move(self, i: int, P, Q, gamma: float) -> None:
        D = self._t_delta(i, P, Q)
        self._t_move(self._t_image([(i, D)]), -gamma * self._inv())
        n, base = int(self.lengths[i]), int(self.arc_off[i])
        self.M[base:base + n * n] += gamma * D

    def _t_add_psi(self, i: int, gold, labels, coef: float) -> None:
        self.w.add_(self._t_image([(i, self._t_delta(i, gold, labels))]), alpha=coef)

    def _t_pass_terms(self, costs=None):
        """(labels (W,), aug, <G, theta>, <M_i, theta>, wrong) of every block, in batches of PASS_CHUNK."""
        costs = self.costs if costs is None else torch.as_tensor(costs, device=self.device, dtype=self.dtype)
        model = self.model.with_kernels("torch")
        labels = torch.empty_like(self.gold)
        aug, gold_scores, m_theta = (torch.empty(self.n, dtype=self.dtype, device=self.device) for _ in range(3))
        wrong = torch.empty(self.n, dtype=torch.int64, device=self.device)
        for lo in range(0, self.n, PASS_CHUNK):
            idx = torch.arange(lo, min(lo + PASS_CHUNK, self.n), device=self.device)
            theta = model.arc_scores(self.w, self.data, idx)
            lengths = self.lengths[idx]
            gold, lg = self.data.padded_heads(idx), self.data.padded_loss_heads(idx)
            heads, _ = ops.best(ops.augment(theta, lg, lengths, costs[idx]), lengths, model.projective,
                                model.multiroot, "torch")
            score, gscore = ops.score(theta, heads, lengths), ops.score(theta, gold, lengths)
            k = ops.wrong_heads(heads, lg, lengths)
            take_gold = ~self.gold_ok[idx] & (score + costs[idx] * k < gscore)
            heads = torch.where(take_gold[:, None], gold, heads)
            score = torch.where(take_gold, gscore, score)
            k = torch.where(take_gold, torch.zeros_like(k), k)
            Mpad = self._t_padded(idx, self.M)
            finite = torch.isfinite(theta)
            m_theta[idx] = torch.where(finite, Mpad * torch.where(finite, theta, 0.0), 0.0).sum((1, 2))
            aug[idx], gold_scores[idx], wrong[idx] = score + costs[idx] * k, gscore, k
            pos = torch.arange(heads.shape[1], device=self.device)
            words = (pos[None, :] >= 1) & (pos[None, :] <= lengths[:, None])
            labels[self.offsets[lo]:self.offsets[idx[-1] + 1]] = heads[words]
        return labels, aug, gold_scores, m_theta, wrong

    def _t_padded(self, idx: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        """Per-arc values (A,) of the blocks ``idx`` in the tree layout (B, N, N), zero elsewhere."""
        lengths = self.lengths[idx]
        B, N = idx.shape[0], int(lengths.max()) + 1
        n_arcs = lengths * lengths
        local = torch.arange(int(n_arcs.sum()), device=self.device)
        starts = torch.cumsum(n_arcs, 0) - n_arcs
        row = torch.repeat_interleave(torch.arange(B, device=self.device), n_arcs)
        k = local - starts[row]
        n = lengths[row]
        m = k // n + 1
        r = k - (m - 1) * n
        out = torch.zeros(B, N, N, dtype=flat.dtype, device=self.device)
        out[row, m, torch.where(r < m, r, r + 1)] = flat[self.arc_off[idx][row] + k]
        return out

    def _t_add_arcs(self, arcs: torch.Tensor, coef: torch.Tensor, out: torch.Tensor) -> None:
        """out += sum over the given arcs of coef_a f_a (their head tokens' features included)."""
        for ptr, ids, rows in ((self.ptr, self.ids, arcs), (self.tptr, self.tids, self._arc_tokens()[arcs])):
            counts = ptr[rows + 1] - ptr[rows]
            nz = torch.repeat_interleave(ptr[rows] - torch.cumsum(counts, 0) + counts, counts) + \
                torch.arange(int(counts.sum()), device=self.device)
            out.index_add_(0, ids[nz].long(), torch.repeat_interleave(coef, counts))

    def _t_statistics_image(self, labels: torch.Tensor, coef: float, out: torch.Tensor) -> torch.Tensor:
        """out += coef sum_a (G_a - S(y)_a) f_a over every block, for flat labels (W,)."""
        for arcs, sign in ((self._gold_arcs(), 1.0), (self._arcs_of(labels.long()), -1.0)):
            self._t_add_arcs(arcs, torch.full((arcs.shape[0],), sign * coef, dtype=self.dtype, device=self.device), out)
        return out

    def _t_w_of(self, M: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out = sum_a (G_a - M_a) f_a / (lam n) over every block (``out`` zeroed by the caller)."""
        G = torch.zeros_like(M)
        G[self._gold_arcs()] = 1.0
        self._t_add_arcs(torch.arange(M.shape[0], device=self.device), G - M, out)
        return out.mul_(self._inv())

    def _t_batch_corners(self, idx: torch.Tensor, blocks: list) -> BatchCorners:
        labels, loss, gaps, pieces = [], [], [], []
        for i in blocks:
            theta = self._t_theta(i)
            heads, score, _, wrong = self._t_oracle(i, theta)
            n, base = int(self.lengths[i]), int(self.arc_off[i])
            li = self.costs[i] * wrong / self.N
            gaps.append((score - self.M[base:base + n * n] @ theta) / self.N - self.ell_i[i] + li)
            loss.append(li)
            labels.append(heads)
            pieces.append((i, self._t_delta(i, heads, None)))
        v = self._t_image(pieces)
        loss_t, gaps_t = torch.stack(loss).to(self.dtype), torch.stack(gaps).to(self.dtype)
        return BatchCorners(idx, loss_t, gaps_t, None, float((loss_t - self.ell_i[idx]).sum()),
                            moves=(labels, v), parts={"labels": labels}, sqnorm=float(v @ v) * self._inv() ** 2)

    def _t_batch_move(self, corners: BatchCorners, gamma: float) -> None:
        labels, v = corners.moves
        for i, y in zip(corners.idx.tolist(), labels):
            D = self._t_delta(i, y, None)
            n, base = int(self.lengths[i]), int(self.arc_off[i])
            self.M[base:base + n * n] += gamma * D
        self._t_move(v, -gamma * self._inv())
