"""log Z and the arc marginals of non-projective trees by the matrix-tree theorem (Tutte 1948; Koo,
Globerson, Carreras & Collins 2007; Smith & Smith 2007), batched in torch (any device; LAPACK's LU on the
CPU, cuSOLVER on CUDA).

Convention of :mod:`ssvm_torch.trees`: ``S[m, h]`` scores word m taking head h, position 0 is the root. With
A(h -> m) = exp(S[m, h] - c_m), c_m = max_h S[m, h] (a per-word shift: every tree gives each word one
head, so log Z moves by sum_m c_m exactly and every entry is <= 1), the Laplacian over the words 1..n is

    L[h, m] = -A(h -> m)  (h != m),      L[m, m] = sum_{h >= 1} A(h -> m)  (+ A(0 -> m) for multi-root)

and Z = det L (multi-root: the root is one more node whose row and column are deleted). Single-root trees
(exactly one root child): L with its first row replaced by the root potentials, L[1, m] = A(0 -> m)
(Koo et al. 2007, Prop. 1). The marginals are the gradient of log det, written from X = L^{-1}:

    multi-root:   mu(h -> m) = A(h -> m) (X[m, m] - X[m, h]),   mu(0 -> m) = A(0 -> m) X[m, m]
    single-root:  mu(h -> m) = A(h -> m) ([m != 1] X[m, m] - [h != 1] X[m, h]),   mu(0 -> m) = A(0 -> m) X[m, 1]

(word indices 1..n; X[m, h] read with the Laplacian's row / column order). Padding words get identity
rows and columns (det and the words' block of X unchanged). Computed in float64 whatever the input dtype
(float32 scores of 150-word sentences keep their accuracy); log Z is returned in the input dtype.
"""
from __future__ import annotations

import torch


def _laplacian(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool):
    """(L (B, n, n), A (B, N, N) the shifted potentials with zeros where no arc may go, shift (B,)) in float64."""
    S = S.detach().to(torch.float64)
    B, N, _ = S.shape
    pos = torch.arange(N, device=S.device)
    word = (pos[None, :] >= 1) & (pos[None, :] <= lengths[:, None])            # (B, N)
    allowed = word[:, :, None] & ((pos[None, None, :] == 0) | word[:, None, :]) & (pos[:, None] != pos[None, :])
    masked = torch.where(allowed, S, torch.full_like(S, float("-inf")))
    rowmax = masked.amax(2)                                                      # (B, N)
    ok_row = torch.isfinite(rowmax)
    shift = torch.where(word & ok_row, rowmax, torch.zeros_like(rowmax))
    A = torch.where(allowed, torch.exp(masked - shift[:, :, None]), torch.zeros_like(S))
    W = A[:, 1:, 1:]                                                             # [m', h']
    L = -W.transpose(1, 2)                                                       # L[h', m'] = -A(h -> m)
    diag = W.sum(2) + (A[:, 1:, 0] if multiroot else 0.0)
    pad = ~word[:, 1:]
    L = L + torch.diag_embed(torch.where(pad, torch.ones_like(diag), diag))
    if not multiroot:
        L[:, 0, :] = A[:, 1:, 0]
        L[:, 0, :] = torch.where(pad, torch.zeros_like(L[:, 0, :]), L[:, 0, :])
        L[:, 0, 0] = torch.where(lengths > 0, L[:, 0, 0], torch.ones_like(L[:, 0, 0]))
    return L, A, shift.sum(1), ok_row | ~word


def _solve(S, lengths, multiroot, want_marginals):
    """(log Z (B,) float64, marginals (B, N, N) float64 or None)."""
    B, N, _ = S.shape
    if N == 1:
        z = torch.zeros(B, dtype=torch.float64, device=S.device)
        return z, (torch.zeros(B, 1, 1, dtype=torch.float64, device=S.device) if want_marginals else None)
    L, A, shift, rows_ok = _laplacian(S, lengths, multiroot)
    LU, piv, info = torch.linalg.lu_factor_ex(L)
    diag = LU.diagonal(dim1=1, dim2=2)
    perm_sign = torch.where((piv != torch.arange(1, N, device=S.device, dtype=piv.dtype)).sum(1) % 2 == 1, -1.0, 1.0)
    sign = perm_sign * torch.where(diag < 0, -1.0, 1.0).prod(1)
    logz = diag.abs().log().sum(1) + shift
    bad = (info != 0) | (sign <= 0) | ~rows_ok.all(1) | ~torch.isfinite(logz)
    logz = torch.where(bad, torch.full_like(logz, float("-inf")), logz)
    logz = torch.where(lengths > 0, logz, torch.zeros_like(logz))
    if not want_marginals:
        return logz, None
    eye = torch.eye(N - 1, dtype=torch.float64, device=S.device).expand(B, -1, -1)
    X = torch.linalg.lu_solve(LU, piv, eye)                                      # X = L^{-1}
    Xd = X.diagonal(dim1=1, dim2=2)                                              # X[m', m']
    # d log det L / d L[i, j] = X[j, i]; A(h -> m) sits in L[m', m'] (+) and L[h', m'] (-)
    d_word = Xd[:, :, None] - X                                                  # [m', h']: X[m',m'] - X[m',h']
    if not multiroot:
        first = torch.zeros(N - 1, dtype=torch.float64, device=S.device)
        first[0] = 1.0
        d_word = (1.0 - first)[None, :, None] * Xd[:, :, None] - (1.0 - first)[None, None, :] * X
        d_root = X[:, :, 0]                                                      # X[m', 0]
    else:
        d_root = Xd
    M = torch.zeros(B, N, N, dtype=torch.float64, device=S.device)
    M[:, 1:, 1:] = A[:, 1:, 1:] * d_word
    M[:, 1:, 0] = A[:, 1:, 0] * d_root
    M = torch.where(bad[:, None, None], torch.full_like(M, float("nan")), M)
    return logz, M


class MatrixTreeLogZ(torch.autograd.Function):
    """log Z of non-projective trees (B,), with the marginals as its gradient (module docstring)."""

    @staticmethod
    def forward(ctx, S, lengths, multiroot):
        logz, M = _solve(S, lengths, multiroot, S.requires_grad)
        ctx.save_for_backward(M if M is not None else S.new_zeros(0))
        ctx.dtype = S.dtype
        return logz.to(S.dtype)

    @staticmethod
    def backward(ctx, grad):
        (M,) = ctx.saved_tensors
        return (grad.to(torch.float64)[:, None, None] * M).to(ctx.dtype), None, None


def log_partition(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """log Z (B,) of the non-projective trees of every sentence (0 for length 0, -inf where no tree exists),
    differentiable: its gradient is the arc marginals."""
    return MatrixTreeLogZ.apply(S, lengths, multiroot)


def marginals(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(marginals (B, N, N) float64, M[b, m, h] = P(h -> m), zero off the sentence; log Z (B,) float64);
    NaN rows where no tree exists."""
    logz, M = _solve(S, lengths, multiroot, True)
    return M, logz
