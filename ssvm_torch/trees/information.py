"""Entropy, KL divergence and cross-entropy of the first-order tree CRF p(y) = exp s(y) / Z of arc scores (the
conventions of :mod:`ssvm_torch.trees`: S (B, N, N) [modifier, head], s(y) = sum_m S[m, y_m]), projective or not.

The scores enter p linearly, so with the arc marginals mu = d log Z / dS (exponential-family identities):

    H(p) = log Z_p - <mu_p, S_p>,        KL(p || q) = <mu_p, S_p - S_q> - log Z_p + log Z_q,
    dH / dS_p = -Hess_p S_p,             dKL / dS_p = Hess_p (S_p - S_q),   dKL / dS_q = mu_q - mu_p,

Hess_p = d^2 log Z_p / dS^2 = Cov_p of the arc indicators. The values take the layer's own log Z and marginals
(the compiled inside-outside and matrix-tree kernels, float64). The Hessian-vector products of the backward:
for projective trees on the CPU, Eisner's inside-outside in the expectation semiring
(:mod:`ssvm_torch.trees.numba_expectation`); elsewhere a log Z written in torch operations differentiated twice,
the log-semiring inside pass of Eisner's algorithm (:mod:`ssvm_torch.trees.torch_eisner`) for projective trees
and the log-determinant of Koo et al. (2007)'s Laplacian for every tree, each modifier's column shifted by its
largest arc score (det(L D) = det L det D).
The products are evaluated in float64; terms of arcs with zero marginal are 0, so -inf scores (no arc) enter
nothing. :class:`Information` holds the identities for any structure whose trees score the sum of their parts'
scores (a (B, M, M) part table): :class:`ArcFactored` here, the second-order trees (:class:`SiblingFactored`, arcs
and adjacent-sibling pairs packed into one table; its products by the forward-mode inside-outside of
:mod:`ssvm_torch.trees.numba_sibling_expectation` on the CPU, autograd twice through the torch inside pass elsewhere),
the binary span trees of :mod:`ssvm_torch.spans.information`.
"""
from __future__ import annotations

import numpy as np
import torch

from . import ops, sibling_ops, torch_eisner, torch_sibling
from .checks import arc_mask, use_numba
from .relations import label_log_probs
from .numba_expectation import hessian_vector_batch
from .numba_sibling_expectation import sibling_hessian_vector_batch


def arc_potentials(S: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, the shifts (B, N, 1)): A = exp(S - max_h S[m, h]) [modifier, head] over the arcs that may go (0
    elsewhere), each modifier's arcs shifted by their largest score (det(L D) = det L det D, the marginals
    unchanged)."""
    x = torch.where(arc_mask(lengths, S.shape[1]), S, torch.full_like(S, float("-inf")))
    shift = x.detach().amax(2, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    return torch.exp(x - shift), shift


def laplacian(A: torch.Tensor, lengths: torch.Tensor, multiroot: bool, identity_off_words: bool) -> torch.Tensor:
    """Koo et al. 2007's Laplacian of the arc potentials A (B, N, N) over the words: L[h', m'] = -A(h -> m),
    L[m', m'] = the potentials into m (the root's too when ``multiroot``), else its first row the root arcs;
    the identity (or 0, for a derivative) on the rows and columns past a sentence's words. Linear in A."""
    B, N, _ = A.shape
    W = A[:, 1:, 1:]
    word = torch.arange(1, N, device=A.device)[None, :] <= lengths[:, None]
    diag = W.sum(2) + (A[:, 1:, 0] if multiroot else 0.0)
    pad = 1.0 if identity_off_words else 0.0
    eye = torch.eye(N - 1, dtype=torch.bool, device=A.device)
    L = torch.where(eye, torch.where(word, diag, torch.full_like(diag, pad))[:, None, :], -W.transpose(1, 2))
    if not multiroot:
        first = torch.where(lengths[:, None] > 0, A[:, 1:, 0], pad * eye[0].to(A.dtype).expand(B, -1))
        L = torch.cat([first[:, None, :], L[:, 1:, :]], 1)
    return L


def _coefficients(X: torch.Tensor, multiroot: bool):
    """(D (B, n, n) [m', h'], R (B, n)) with mu(h -> m) = A(h -> m) D[m', h'] and mu(root -> m) = A(root -> m) R[m']
    for X = L^-1 (Koo et al. 2007, as :func:`ssvm_torch.trees.matrix_tree._direct` writes them); linear in X."""
    Xd = X.diagonal(dim1=1, dim2=2)
    if multiroot:
        return Xd[:, :, None] - X, Xd
    n = X.shape[1]
    not_first = (torch.arange(n, device=X.device) > 0).to(X.dtype)
    return Xd[:, :, None] * not_first[None, :, None] - X * not_first[None, None, :], X[:, :, 0]


def _laplacian_log_partition(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """log Z of every tree of each row by the matrix-tree theorem in torch operations (twice differentiable),
    ``torch.linalg.slogdet`` of :func:`laplacian`: the reference of :func:`laplacian_hessian_product`."""
    A, shift = arc_potentials(S, lengths)
    return torch.linalg.slogdet(laplacian(A, lengths, multiroot, True))[1] + shift[:, 1:, 0].sum(1)


def laplacian_hessian_product(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool, v: torch.Tensor):
    """Hess v (B, N, N) for every tree by the matrix-tree theorem in closed form: with X = L^-1 the marginals are
    linear in (A, X), dA = A * v, dL = L(dA) and dX = -X dL X, so the directional derivative of the marginals is
    dA * D(X) + A * D(dX): one inverse and two products, float64, any device."""
    S, v = S.detach().to(torch.float64), v.to(torch.float64)
    A, _ = arc_potentials(S, lengths)
    X = torch.linalg.inv(laplacian(A, lengths, multiroot, True))
    dA = A * torch.where(A > 0, v, torch.zeros_like(v))
    dX = -X @ laplacian(dA, lengths, multiroot, False) @ X
    (D, R), (dD, dR) = _coefficients(X, multiroot), _coefficients(dX, multiroot)
    out = torch.zeros_like(S)
    out[:, 1:, 1:] = dA[:, 1:, 1:] * D + A[:, 1:, 1:] * dD
    out[:, 1:, 0] = dA[:, 1:, 0] * R + A[:, 1:, 0] * dR
    return out


def torch_log_partition(S: torch.Tensor, lengths: torch.Tensor, projective: bool, multiroot: bool) -> torch.Tensor:
    """log Z (B,) in torch operations only, differentiable twice (the Hessian-vector products' path)."""
    if projective:
        return torch_eisner.log_partition(S, lengths, multiroot)
    return _laplacian_log_partition(S, lengths, multiroot)


def hessian_product(S: torch.Tensor, lengths: torch.Tensor, projective: bool, multiroot: bool,
                    v: torch.Tensor, compiled: bool = False, autograd: bool = False) -> torch.Tensor:
    """Hess_p v (B, N, N) float64: the derivative of the arc marginals along v, sum_b d^2 log Z_b / dS_b^2 v_b.
    Projective trees: ``compiled`` (the CPU) the expectation-semiring inside-outside of
    :mod:`ssvm_torch.trees.numba_expectation`, else autograd twice through the torch inside pass; every tree: the
    closed form of :func:`laplacian_hessian_product`, or with ``autograd`` (the tests' reference) autograd twice
    through the log-determinant."""
    if S.shape[1] == 1:                 # the root alone: log Z = 0 whatever S holds
        return torch.zeros(S.shape, dtype=torch.float64, device=S.device)
    if compiled and projective:
        Sh, Vh = (x.detach().to(torch.float64).contiguous().numpy() for x in (S, v))
        out = np.zeros(Sh.shape)
        hessian_vector_batch(Sh, Vh, lengths.to(torch.int64).contiguous().numpy(), multiroot, out)
        return torch.from_numpy(out)
    if not projective and not autograd:
        return laplacian_hessian_product(S, lengths, multiroot, v)
    with torch.enable_grad():
        leaf = S.detach().to(torch.float64).requires_grad_(True)
        logz = torch_log_partition(leaf, lengths, projective, multiroot)
        (mu,) = torch.autograd.grad(logz.sum(), leaf, create_graph=True)
        (hv,) = torch.autograd.grad((mu * v.to(torch.float64)).sum(), leaf)
    return hv


def on_support(M: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """X where the marginal M is positive, else 0 (an arc of probability 0 contributes nothing, even at -inf)."""
    return torch.where(M > 0, X, torch.zeros_like(X))


def finite_or_zero(X: torch.Tensor) -> torch.Tensor:
    """X with its infinities 0: a backward's direction for a KL that is +inf (p weighs a part q forbids) takes
    its finite terms, so the row's gradient is finite, not the NaN of 0 * inf where the row is masked out."""
    return torch.where(torch.isfinite(X), X, torch.zeros_like(X))


def entropy_value(M: torch.Tensor, logz: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """H = log Z - <mu, S> per row, float64."""
    return logz.to(torch.float64) - (M.to(torch.float64) * on_support(M, S.to(torch.float64))).sum((1, 2))


def kl_value(Mp, logzp, S, logzq, Q) -> torch.Tensor:
    """KL(p || q) = <mu_p, S - Q> - log Z_p + log Z_q per row, float64; +inf where p puts weight on an arc q
    forbids (-inf)."""
    S64, Q64, Mp64 = S.to(torch.float64), Q.to(torch.float64), Mp.to(torch.float64)
    diff = torch.where(Mp > 0, S64 - Q64, torch.zeros_like(S64))
    return (Mp64 * diff).sum((1, 2)) - logzp.to(torch.float64) + logzq.to(torch.float64)


class _LabelEntropy(torch.autograd.Function):
    """(lse (...), H (...)) of label scores (..., L): logsumexp and the entropy of the softmax, one pass each way;
    backward d lse / d lab = p, d H / d lab = -p (log p + H)."""

    @staticmethod
    def forward(ctx, lab):
        lse, logp, p = label_log_probs(lab)
        logp = logp.clamp(min=torch.finfo(lab.dtype).min)           # 0 log 0 = 0 at -inf labels
        H = -(p * logp).sum(-1)
        ctx.save_for_backward(p, logp, H)
        return lse, H

    @staticmethod
    def backward(ctx, g_lse, g_H):
        p, logp, H = ctx.saved_tensors
        return p * (g_lse[..., None] - g_H[..., None] * (logp + H[..., None]))


class _LabelDivergence(torch.autograd.Function):
    """(lse_q (...), KL (...)) of label scores p, q (..., L): logsumexp of q and KL(softmax p || softmax q) (+inf
    where p weighs a label q forbids); backward d KL / d lab_p = p (log p/q - KL), d KL / d lab_q = q - p,
    d lse_q / d lab_q = q."""

    @staticmethod
    def forward(ctx, lab, other):
        _, logp, p = label_log_probs(lab)
        lse_q, logq, q = label_log_probs(other)
        d = torch.where(p > 0, logp - logq, torch.zeros_like(logp))
        K = (p * d).sum(-1)
        ctx.save_for_backward(p, q, d, K)
        return lse_q, K

    @staticmethod
    def backward(ctx, g_lse, g_K):
        p, q, d, K = ctx.saved_tensors
        g_K = g_K[..., None]
        # +inf where p weighs a label q forbids: the finite terms' gradient (finite_or_zero), not inf - inf
        return g_K * p * finite_or_zero(d - K[..., None]), g_K * (q - p) + g_lse[..., None] * q


def label_information(lab: torch.Tensor, other: torch.Tensor | None = None):
    """(lse_p, FH, lse_q, FK) of labels that factor over a structure's parts given the structure (the relations of
    arcs, the labels of spans), lab and other (..., L) each part's label scores under p and q: lse = logsumexp over
    the labels (what the part's score gains), FH = H(label | part) under p and FK = KL(p(label | part) ||
    q(label | part)), the part values :class:`Information` takes in expectation (chain rule: H(y, r) = H(y) +
    E_y sum_parts H(r | part)). -inf labels are allowed: a label of probability 0 adds nothing (+inf KL where p
    gives weight to a label q forbids); a part whose labels are all -inf gets lse -inf and finite, unused values
    (no NaN in any gradient). lse_q and FK are None without ``other``. Each pair is one autograd function with
    its closed-form backward (a few passes over the (..., L) scores)."""
    lse, FH = _LabelEntropy.apply(lab)
    if other is None:
        return lse, FH, None, None
    lse_q, FK = _LabelDivergence.apply(lab, other)
    return lse, FH, lse_q, FK


class ArcFactored:
    """The first-order dependency trees of one kind as a log-linear structure for :class:`Information`: one
    inside-outside or factorization for (marginals, log Z), the Hessian-vector products above."""

    def __init__(self, projective: bool, multiroot: bool, kernels: str):
        self.projective, self.multiroot, self.kernels = projective, multiroot, kernels

    def marginals_and_log_partition(self, S, lengths):
        return ops.marginals_and_log_partition(S, lengths, self.projective, self.multiroot, self.kernels)

    def hessian_product(self, S, lengths, v):
        return hessian_product(S, lengths, self.projective, self.multiroot, v, use_numba(S, self.kernels))


class SiblingFactored:
    """The second-order (adjacent-sibling) projective trees (:mod:`ssvm_torch.trees.sibling`) as a log-linear
    structure for :class:`Information`: the parts, arcs S (B, N, N) and sibling pairs SB (B, N, N, N), packed into
    one table (B, 1, N^2 + N^3) by :meth:`pack`; (marginals, log Z) from one second-order inside-outside (compiled
    on the CPU), the Hessian-vector products by :meth:`hessian_product`."""

    def __init__(self, N: int, multiroot: bool, kernels: str):
        self.N, self.multiroot, self.kernels = N, multiroot, kernels

    @staticmethod
    def pack(S: torch.Tensor, SB: torch.Tensor) -> torch.Tensor:
        return torch.cat([S.flatten(1), SB.flatten(1)], 1)[:, None, :]

    def unpack(self, P: torch.Tensor):
        B, N = P.shape[0], self.N
        return P[:, 0, :N * N].reshape(B, N, N), P[:, 0, N * N:].reshape(B, N, N, N)

    def marginals_and_log_partition(self, P, lengths):
        M, MS, logz = sibling_ops.marginals_and_log_partition(*self.unpack(P), lengths, self.multiroot, self.kernels)
        return self.pack(M.to(torch.float64), MS.to(torch.float64)), logz

    def hessian_product(self, P, lengths, v, autograd: bool = False):
        """Hess v (B, 1, N^2 + N^3) float64: on the CPU the compiled forward-mode pass of
        :mod:`ssvm_torch.trees.numba_sibling_expectation`; elsewhere (or with ``autograd``, the tests' reference)
        autograd twice through the torch inside pass."""
        if self.N == 1:                 # the root alone: log Z = 0 whatever P holds
            return torch.zeros(P.shape, dtype=torch.float64, device=P.device)
        if use_numba(P, self.kernels) and not autograd:
            S, SB = (x.detach().to(torch.float64).contiguous().numpy() for x in self.unpack(P))
            V, VB = (x.detach().to(torch.float64).contiguous().numpy() for x in self.unpack(v))
            out, out_sib = np.zeros(S.shape), np.zeros(SB.shape)
            sibling_hessian_vector_batch(S, SB, V, VB, lengths.to(torch.int64).contiguous().numpy(), self.multiroot,
                                         out, out_sib)
            return self.pack(torch.from_numpy(out), torch.from_numpy(out_sib))
        with torch.enable_grad():
            S, SB = (x.detach().to(torch.float64).requires_grad_(True) for x in self.unpack(P))
            logz = torch_sibling.log_partition(S, SB, lengths, self.multiroot)
            # unused allowed: under three positions (N <= 2) no word has a sibling and SB is not in the graph
            mu = torch.autograd.grad(logz.sum(), (S, SB), create_graph=True, allow_unused=True,
                                     materialize_grads=True)
            vS, vSB = self.unpack(v.to(torch.float64))
            hv = torch.autograd.grad((mu[0] * vS).sum() + (mu[1] * vSB).sum(), (S, SB), allow_unused=True,
                                     materialize_grads=True)
        return self.pack(*hv)


class Information(torch.autograd.Function):
    """(H(p) (B,), KL(p || q) (B,): 0 without ``Q``) of the CRFs p, q of the part scores S, Q (B, M, M) of a
    ``structure`` whose trees score the sum of their parts' scores (:class:`ArcFactored`, :class:`SiblingFactored`;
    the span trees of :mod:`ssvm_torch.spans.information`), in S's dtype; the backward the Hessian-vector
    products of the module docstring, from the structure.

    ``FH``, ``FK`` (B, M, M) or None: per-part values added in expectation under p, H + <mu_p, FH> and
    KL + <mu_p, FK>, with d<mu_p, F>/dS = Hess_p F and d<mu_p, F>/dF = mu_p. A labeled CRF whose relations
    factor over the arcs given the tree (p(y, r) = p(y) prod_m p(r_m | arc)) has H = H(tree) + <mu, the arcs'
    relation entropies> and KL = KL(tree) + <mu_p, the arcs' relation KLs> (the chain rule of entropy and KL)."""

    @staticmethod
    def forward(ctx, S, Q, lengths, structure, FH=None, FK=None):
        Sd = S.detach()
        Mp, logzp = structure.marginals_and_log_partition(Sd, lengths)
        H = entropy_value(Mp, logzp, Sd)
        if Q is None:
            D, Mq, Qd = torch.zeros_like(H), Mp, Sd
        else:
            Qd = Q.detach()
            Mq, logzq = structure.marginals_and_log_partition(Qd, lengths)
            D = kl_value(Mp, logzp, Sd, logzq, Qd)
        expect = lambda F: (Mp.to(torch.float64) * on_support(Mp, F.detach().to(torch.float64))).sum((1, 2))  # noqa
        if FH is not None:
            H = H + expect(FH)
        if FK is not None:
            D = D + expect(FK)
        ctx.save_for_backward(Sd, Qd, Mp, Mq, lengths, *(F.detach() if F is not None else None for F in (FH, FK)))
        ctx.structure, ctx.has_q = structure, Q is not None
        return H.to(S.dtype), D.to(S.dtype)

    @staticmethod
    def backward(ctx, gH, gD):
        S, Q, Mp, Mq, lengths, FH, FK = ctx.saved_tensors
        g = lambda x: x.to(torch.float64)[:, None, None]     # noqa: E731
        v = -g(gH) * on_support(Mp, S.to(torch.float64))
        if ctx.has_q:
            v = v + g(gD) * finite_or_zero(on_support(Mp, S.to(torch.float64) - Q.to(torch.float64)))
        if FH is not None:
            v = v + g(gH) * on_support(Mp, FH.to(torch.float64))
        if FK is not None:
            v = v + g(gD) * finite_or_zero(on_support(Mp, FK.to(torch.float64)))
        gS = ctx.structure.hessian_product(S, lengths, v).to(S.dtype)
        gQ = (g(gD) * (Mq.to(torch.float64) - Mp.to(torch.float64))).to(Q.dtype) if ctx.has_q else None
        gFH = None if FH is None else (g(gH) * Mp.to(torch.float64)).to(FH.dtype)
        gFK = None if FK is None else (g(gD) * Mp.to(torch.float64)).to(FK.dtype)
        return gS, gQ, None, None, gFH, gFK
