"""log Z and the arc marginals of non-projective trees by the matrix-tree theorem (Tutte 1948; Koo,
Globerson, Carreras & Collins 2007; Smith & Smith 2007), batched in torch (any device; LAPACK's LU on the
CPU, cuSOLVER on CUDA).

Convention of :mod:`ssvm_torch.trees`: ``S[m, h]`` scores word m taking head h, position 0 is the root. With
A(h -> m) = exp S[m, h], the Laplacian over the words 1..n is

    L[h, m] = -A(h -> m)  (h != m),      L[m, m] = sum_{h >= 1} A(h -> m)  (+ A(0 -> m) for multi-root)

and Z = det L (multi-root: the root is one more node whose row and column are deleted). Single-root trees
(exactly one root child): L with its first row replaced by the root potentials, L[1, m] = A(0 -> m)
(Koo et al. 2007, Prop. 1). The marginals are the gradient of log det, written from X = L^{-1}:

    multi-root:   mu(h -> m) = A(h -> m) (X[m, m] - X[m, h]),   mu(0 -> m) = A(0 -> m) X[m, m]
    single-root:  mu(h -> m) = A(h -> m) ([m != 1] X[m, m] - [h != 1] X[m, h]),   mu(0 -> m) = A(0 -> m) X[m, 1]

(word indices 1..n; X[m, h] read with the Laplacian's row / column order).

**Cancellation.** A sentence whose scores are very peaked around a cycle (two words that prefer each other by
hundreds over everything else) has det L' as a difference of nearly equal terms: LU loses it (its sign can
flip). Such rows (a pivot of the balanced L' below :data:`PIVOT_MIN`, or no positive det) are redone by the
Grassmann-Taksar-Heyman elimination of :func:`gth_log_partition`: Gaussian elimination of the Laplacian in
which every pivot is recomputed as a sum of positive weights (the arcs into the node and its root mass),
in the log domain, so nothing is ever subtracted; its gradient (the marginals) comes by autograd.

**Range.** Scores that differ by hundreds (trained or accumulated potentials) put exp S far outside float64,
and a per-word shift is not enough for single-root trees (a root row whose entries all underflow makes L
exactly singular while Z is not 0). So L is built in the log domain, log |L| entry by entry (the diagonal
by a logsumexp), balanced by row and column scalings u, v (alternating max-normalisation, :data:`ROUNDS`
rounds, every row and column then has an entry of magnitude 1) before exponentiating:
L = D_u L' D_v, log det L = log det L' + sum u + sum v, X = D_v^-1 L'^-1 D_u^-1, and every factor the
marginals multiply is an entry of L' (<= 1). Padding words get identity rows and columns.

**Precision and synchronisation.** Every row first takes the direct per-word shift, all rows at once and
with no host synchronisation (a row of wide range whose arcs underflow there shows a zero or tiny pivot);
then one synchronisation sends the rows that need it to the balanced path or the GTH elimination. That
first pass is float64, except for float32 scores whose gradient is wanted (training) on the CPU, or on CUDA
where the Triton kernel takes the batch (up to 64 words): it is then float32, as torch-struct's, with a
check torch-struct lacks: each word's head marginals must sum to 1 within :data:`CHECK_TOL`, and a row that
fails (or has a pivot below :data:`PIVOT_MIN32`) is redone in float64.
:func:`marginals` and log Z without a gradient are float64 throughout; log Z is returned in the input dtype.
"""
from __future__ import annotations

import functools

import torch

from . import triton_matrix_tree
from .checks import tracing

#: rounds of the alternating row / column max-normalisation of log |L|
ROUNDS = 3
NEG_INF = float("-inf")
#: a smaller LU pivot of L (entries <= 1, each column's largest 1) signals cancellation: the row goes to the GTH
#: elimination
PIVOT_MIN = 1e-6
#: rows whose finite scores span less than this take the direct per-word shift (e^-SPAN is a normal float64)
SPAN = 600.0
#: the float32 screen (:func:`_screen`): a larger pivot threshold, and the tolerance of the check that each
#: word's head marginals sum to 1; a row failing either is redone in float64
PIVOT_MIN32 = 1e-5
CHECK_TOL = 1e-4
#: an absent arc in the GTH elimination: finite, so that no logaddexp or its gradient meets -inf - (-inf)
NEG = -1e30


def _safe_lae(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    hi = torch.maximum(a, b)
    return hi + torch.log1p(torch.exp(-(a - b).abs()))


def gth_log_partition(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """log Z (B,) of non-projective trees by the Grassmann-Taksar-Heyman elimination in the log domain
    (module docstring), differentiable by autograd. Eliminating word k with pivot d_k: every arc i -> j gains
    the path i -> k -> j, A(i -> j) += A(i -> k) A(k -> j) / d_k, and the root mass r_j += r_k A(k -> j) / d_k;
    d_k = sum_i A(i -> k) + r_k is a sum of positive terms (the Schur complement's diagonal keeps its column
    sum), and det L = prod_k d_k. Single-root: the pivots leave r_k out (the order-t part of det L(t r)),
    and Z = prod_{k < n} d_k x r_last. Pivots are taken largest first."""
    S = S.to(torch.float64)
    B, N, _ = S.shape
    n = N - 1
    dev = S.device
    pos = torch.arange(1, N, device=dev)
    word = pos[None, :] <= lengths[:, None]                                      # (B, n)
    ok = word[:, :, None] & word[:, None, :] & ~torch.eye(n, dtype=torch.bool, device=dev)
    logA = torch.where(ok, S[:, 1:, 1:].transpose(1, 2), torch.full((B, n, n), NEG, dtype=S.dtype, device=dev))
    logA = torch.where(torch.isfinite(logA), logA, torch.full_like(logA, NEG))  # [b, i, j] = arc i -> j (words)
    logr = torch.where(word & torch.isfinite(S[:, 1:, 0]), S[:, 1:, 0], torch.full_like(S[:, 1:, 0], NEG))
    alive = word.clone()
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=dev)
    logz = torch.zeros(B, dtype=S.dtype, device=dev)
    rows = torch.arange(B, device=dev)
    left = lengths.clone()
    for _ in range(n):
        active = left > (0 if multiroot else 1)
        if not bool(active.any()):
            break
        into = torch.logsumexp(torch.where(alive[:, :, None], logA, torch.full_like(logA, NEG)), 1)
        d = _safe_lae(into, logr) if multiroot else into
        d = torch.where(alive, d, torch.full_like(d, float("-inf")))
        k = d.argmax(1)
        dk = d[rows, k]
        logz = logz + torch.where(active, dk, torch.zeros_like(dk))
        alive = alive.clone()
        alive[rows, k] = alive[rows, k] & ~active
        via = logA[rows, :, k][:, :, None] + logA[rows, k, :][:, None, :] - dk[:, None, None]
        keep = alive[:, :, None] & alive[:, None, :] & active[:, None, None] & off_diagonal
        logA = torch.where(keep, _safe_lae(logA, via), logA)
        flow = logr[rows, k][:, None] + logA[rows, k, :] - dk[:, None]
        logr = torch.where(alive & active[:, None], _safe_lae(logr, flow), logr)
        left = left - active.long()
    if not multiroot:
        last = torch.where(alive, logr, torch.full_like(logr, NEG)).logsumexp(1)
        logz = logz + torch.where(lengths > 0, last, torch.zeros_like(last))
    return torch.where(lengths > 0, logz, torch.zeros_like(logz))


def _log_laplacian(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool):
    """(log |L| (B, n, n), the sign of each entry (B, n, n), logA (B, N, N) the arcs' log-potentials with -inf
    where no arc may go, word mask (B, N)) in float64."""
    S = S.detach().to(torch.float64)
    B, N, _ = S.shape
    pos = torch.arange(N, device=S.device)
    word = (pos[None, :] >= 1) & (pos[None, :] <= lengths[:, None])            # (B, N)
    allowed = word[:, :, None] & ((pos[None, None, :] == 0) | word[:, None, :]) & (pos[:, None] != pos[None, :])
    logA = torch.where(allowed, S, torch.full_like(S, NEG_INF))
    words = logA[:, 1:, 1:]                                                      # [m', h']
    logL = words.transpose(1, 2).clone()                                         # log |L[h', m']| = log A(h -> m)
    diag_terms = torch.cat([words, logA[:, 1:, :1]], 2) if multiroot else words
    diag = torch.logsumexp(diag_terms, 2)                                        # (B, n)
    pad = ~word[:, 1:]
    diag = torch.where(pad, torch.zeros_like(diag), diag)                        # identity on padding words
    n = N - 1
    eye = torch.eye(n, dtype=torch.bool, device=S.device)
    logL = torch.where(eye, diag[:, None, :].expand(-1, n, -1), logL)
    sign = torch.where(eye, 1.0, -1.0).to(torch.float64).expand(B, n, n).clone()
    if not multiroot:
        root = torch.where(pad, torch.full_like(diag, NEG_INF), logA[:, 1:, 0])
        root[:, 0] = torch.where(lengths > 0, root[:, 0], torch.zeros_like(root[:, 0]))
        logL[:, 0, :] = root
        sign[:, 0, :] = 1.0
    return logL, sign, logA, word


def _balance(logL: torch.Tensor):
    """Row and column log-scalings u (B, n), v (B, n) with every row and column of logL - u - v at max 0."""
    B, n, _ = logL.shape
    u = torch.zeros(B, n, dtype=logL.dtype, device=logL.device)
    v = torch.zeros_like(u)
    for _ in range(ROUNDS):
        u = (logL - v[:, None, :]).amax(2)
        u = torch.where(torch.isfinite(u), u, torch.zeros_like(u))
        v = (logL - u[:, :, None]).amax(1)
        v = torch.where(torch.isfinite(v), v, torch.zeros_like(v))
    return u, v


@functools.lru_cache(maxsize=32)
def _word_pairs(N: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """((N, N) bool, [m, h]: m a word (not the root) and h != m; (N - 1,) int32 1..N-1, the LU pivots of no
    row exchange), made once per size and device: the direct path runs once per batch, and every tensor
    it makes is one more launch on CUDA (the path is launch-bound there at B 256, n 40: docs/devices.md)."""
    pos = torch.arange(N, device=device)
    return ((pos[:, None] != pos[None, :]) & (pos[:, None] >= 1),
            torch.arange(1, N, device=device, dtype=torch.int32))


def _direct(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool, want_marginals: bool):
    """(log Z, marginals or None, the smallest |LU pivot|, det sign) by the plain per-word shift: A(h -> m) =
    exp(S[m, h] - max_h S[m, h]) <= 1 with its maximum 1, in S's dtype. Written on one masked copy of the
    scores, in few operations: on CUDA each is a launch, and at the sizes of a training batch the launches,
    not LAPACK's work, are the cost (docs/devices.md, the 2026-12-04 H200 run)."""
    B, N, _ = S.shape
    pairs, no_swap = _word_pairs(N, S.device)
    inside = torch.arange(N, device=S.device) <= lengths[:, None]                   # (B, N), the root included
    x = torch.where(inside[:, :, None] & inside[:, None, :] & pairs, S, NEG_INF)    # becomes A, then the marginals
    shift = x.amax(2, keepdim=True).nan_to_num_(neginf=0.0)                         # rows without arcs: 0
    x.sub_(shift).exp_()                                                            # A, 0 where no arc may go
    W = x[:, 1:, 1:]                                                                # [m', h']
    L = W.transpose(1, 2).neg()
    diag = W.sum(2)
    if multiroot:
        diag += x[:, 1:, 0]
    L.diagonal(dim1=1, dim2=2).copy_(torch.where(inside[:, 1:], diag, 1.0))         # identity on padding words
    if not multiroot:
        L[:, 0, :] = x[:, 1:, 0]
        L[:, 0, 0].masked_fill_(lengths == 0, 1.0)
    LU, piv, _ = torch.linalg.lu_factor_ex(L)
    pivots = LU.diagonal(dim1=1, dim2=2)
    size = pivots.abs()
    logz = size.log().sum(1) + shift[:, 1:, 0].sum(1)
    # det L's sign: a row exchange or a negative pivot each flip it (a zero pivot shows in the smallest pivot)
    flips = (piv != no_swap).sum(1) + (pivots < 0).sum(1)
    det_sign = 1.0 - 2.0 * (flips % 2)
    if not want_marginals:
        return logz, None, size.amin(1), det_sign
    X = torch.linalg.lu_solve(LU, piv, torch.eye(N - 1, dtype=S.dtype, device=S.device).expand(B, -1, -1))
    Xd = X.diagonal(dim1=1, dim2=2).clone()
    root = X[:, :, 0].clone() if not multiroot else Xd
    D = X.neg_()                                                                    # -X[m', h'], then + X[m', m']
    if multiroot:
        D.add_(Xd[:, :, None])
    else:
        D[:, :, 0] = 0.0                                                            # - [h' != 1] X[m', h']
        D[:, 1:, :].add_(Xd[:, 1:, None])                                           # + [m' != 1] X[m', m']
    x[:, 1:, 1:].mul_(D)
    x[:, 1:, 0].mul_(root)                                                          # row 0 (the root's) is 0
    return logz, x, size.amin(1), det_sign


def _balanced(S, lengths, multiroot, want_marginals):
    """The same from log |L| balanced by row and column scalings (module docstring): rows of any range."""
    B, N, _ = S.shape
    logL, sign, logA, word = _log_laplacian(S, lengths, multiroot)
    u, v = _balance(logL)
    Lp = sign * torch.exp(logL - u[:, :, None] - v[:, None, :])                 # the balanced L'
    LU, piv, info = torch.linalg.lu_factor_ex(Lp)
    pivots = LU.diagonal(dim1=1, dim2=2)
    swaps = (piv != torch.arange(1, N, device=S.device, dtype=piv.dtype)).sum(1) % 2
    det_sign = torch.where(swaps == 1, -1.0, 1.0) * torch.where(pivots < 0, -1.0, 1.0).prod(1)
    det_sign = torch.where(info != 0, torch.zeros_like(det_sign), det_sign)
    logz = pivots.abs().log().sum(1) + u.sum(1) + v.sum(1)
    if not want_marginals:
        return logz, None, pivots.abs().amin(1), det_sign
    eye = torch.eye(N - 1, dtype=torch.float64, device=S.device).expand(B, -1, -1)
    Xp = torch.linalg.lu_solve(LU, piv, eye)                                     # X' = L'^-1, X = D_v^-1 X' D_u^-1
    Xd = Xp.diagonal(dim1=1, dim2=2)                                             # X'[m', m']
    words = logA[:, 1:, 1:]                                                      # log A(h -> m) at [m', h']
    # A(h -> m) X[m', j] = exp(log A - v_m' - u_j) X'[m', j]; each exponent is an entry of log |L'| (<= 0)
    e_own = words - v[:, :, None] - u[:, :, None]
    e_other = words - v[:, :, None] - u[:, None, :]
    if not multiroot:                   # single-root: row 1 of L holds the root, not word 1's arcs or diagonal
        e_own[:, 0, :] = NEG_INF
        e_other[:, :, 0] = NEG_INF
    d_word = torch.exp(e_own) * Xd[:, :, None] - torch.exp(e_other) * Xp         # A(h -> m)(X[m',m'] - X[m',h'])
    if multiroot:
        root = torch.exp(logA[:, 1:, 0] - v - u) * Xd                            # A(0 -> m) X[m', m']
    else:
        root = torch.exp(logA[:, 1:, 0] - v - u[:, :1]) * Xp[:, :, 0]            # A(0 -> m) X[m', 0]
    M = torch.zeros(B, N, N, dtype=torch.float64, device=S.device)
    ok = word[:, 1:, None]
    M[:, 1:, 1:] = torch.where(ok & torch.isfinite(words), d_word, torch.zeros_like(d_word))
    M[:, 1:, 0] = torch.where(word[:, 1:] & torch.isfinite(logA[:, 1:, 0]), root, torch.zeros_like(root))
    return logz, M, pivots.abs().amin(1), det_sign


def _solve_float64(S, lengths, multiroot, want_marginals):
    """(log Z (B,) float64, marginals (B, N, N) float64 or None; NaN rows where no tree exists): the direct
    path for rows whose scores span less than SPAN, the balanced one for the others, and the GTH elimination
    for every row whose LU looks unreliable (module docstring)."""
    B, N, _ = S.shape
    S = S.detach().to(torch.float64)
    if N == 1:
        z = torch.zeros(B, dtype=torch.float64, device=S.device)
        return z, (torch.zeros(B, 1, 1, dtype=torch.float64, device=S.device) if want_marginals else None)
    hi, lo = S.amax((1, 2)), S.amin((1, 2))
    wide = (hi - lo >= SPAN) & (lengths > 0)
    # the rows that the direct path of _solve could not take (few): two questions in one synchronisation
    finite, any_wide = torch.stack([torch.isfinite(lo).all() & torch.isfinite(hi).all(), wide.any()]).tolist()
    if not finite:
        finite = torch.isfinite(S)
        span = torch.where(finite, S, torch.full_like(S, NEG_INF)).amax((1, 2)) - \
            torch.where(finite, S, torch.full_like(S, float("inf"))).amin((1, 2))
        wide = (span >= SPAN) & (lengths > 0)
        any_wide = bool(wide.any())
    if not any_wide:
        logz, M, pivot, det_sign = _direct(S, lengths, multiroot, want_marginals)
    else:
        rows = wide.nonzero().flatten()
        parts = [_balanced(S[rows], lengths[rows], multiroot, want_marginals)]
        narrow = (~wide).nonzero().flatten()
        if len(narrow):
            parts.append(_direct(S[narrow], lengths[narrow], multiroot, want_marginals))
        order = torch.cat([rows, narrow])
        logz, M, pivot, det_sign = (None if parts[0][k] is None else
                                    torch.cat([p[k] for p in parts]).index_copy(0, order, torch.cat([p[k] for p in parts]))
                                    for k in range(4))
    shaky = _unreliable(logz, pivot, det_sign, lengths, PIVOT_MIN)
    logz = torch.where(lengths > 0, logz, torch.zeros_like(logz))
    redo = shaky.nonzero().flatten()
    if len(redo):
        with torch.enable_grad():
            leaf = S[redo].requires_grad_(True)
            exact = gth_log_partition(leaf, lengths[redo], multiroot)
            grad = torch.autograd.grad(exact.sum(), leaf)[0] if want_marginals else None
        exact = exact.detach()
        exact = torch.where(exact > NEG / 2, exact, torch.full_like(exact, NEG_INF))   # no tree at all
        logz = logz.index_copy(0, redo, exact)
    if not want_marginals or not len(redo):
        # a row whose log Z is not finite after LU is shaky, so without redone rows every log Z is finite
        return logz, M
    pos = torch.arange(N, device=S.device)
    word = (pos[None, :] >= 1) & (pos[None, :] <= lengths[redo][:, None])
    M = M.index_copy(0, redo, torch.where(word[:, :, None], grad, torch.zeros_like(grad)))
    bad = ~torch.isfinite(logz)
    if bool(bad.any()):
        M = torch.where(bad[:, None, None], torch.full_like(M, float("nan")), M)
    return logz, M


def _screen(S, lengths, multiroot, want_marginals):
    """The direct path of every row at once in S's dtype, without a host synchronisation (on CUDA in float32 of
    up to 64 words one Triton launch, :mod:`~ssvm_torch.trees.triton_matrix_tree`), and the rows it may
    have got wrong (B,) bool: an LU pivot below the dtype's threshold or no positive det (cancellation, or
    arcs that underflowed: module docstring), a log Z not finite, and in float32 any word whose head
    marginals do not sum to 1 within :data:`CHECK_TOL` (every word takes exactly one head, so the sum checks
    X = L^-1 for one reduction)."""
    low = S.dtype == torch.float32
    if low and want_marginals and _kernel_takes(S):                                      # one launch on CUDA
        logz, M, pivot, det_sign, err = triton_matrix_tree.direct(S, lengths, multiroot)
        return logz, M, _unreliable(logz, pivot, det_sign, lengths, PIVOT_MIN32, err)
    logz, M, pivot, det_sign = _direct(S, lengths, multiroot, want_marginals)
    err = None
    if low and want_marginals:
        words = (torch.arange(S.shape[1], device=S.device) <= lengths[:, None])[:, 1:]
        err = (M[:, 1:].sum(2) - words.to(M.dtype)).abs().amax(1)
    return logz, M, _unreliable(logz, pivot, det_sign, lengths, PIVOT_MIN32 if low else PIVOT_MIN, err)


def _unreliable(logz, pivot, det_sign, lengths, pivot_min: float, err=None) -> torch.Tensor:
    """(B,) bool: the sentences whose direct (or balanced) result may be wrong: det L not positive, log Z not
    finite, an LU pivot below ``pivot_min``, or (``err``, float32) a head-marginal sum off 1 by more than
    :data:`CHECK_TOL` (NaN too); empty sentences never."""
    bad = (det_sign <= 0) | ~torch.isfinite(logz) | (pivot < pivot_min)
    if err is not None:
        bad = bad | ~(err <= CHECK_TOL)
    return bad & (lengths > 0)


def _float32_first_pass(S: torch.Tensor, want_marginals: bool, low_precision: bool) -> bool:
    """Whether the direct path's first pass runs in float32 (else float64): float32 scores whose marginals are
    wanted under ``low_precision``, on the CPU, or on CUDA where the Triton kernel takes the batch. CUDA's
    float32 torch path was slower than its float64 one in both H200 runs (n 40 and 100: the path is
    launch-bound, and float32 adds the check's operations; docs/devices.md, "H200, 2026-12-04"), so batches
    beyond the kernel's :data:`~ssvm_torch.trees.triton_matrix_tree.MAX_WORDS` go to float64 there."""
    if not (low_precision and want_marginals and S.dtype == torch.float32):
        return False
    return not S.is_cuda or _kernel_takes(S)


def _kernel_takes(S: torch.Tensor) -> bool:
    """Whether the Triton kernel serves the float32 direct path of ``S`` (and the call is not being traced)."""
    return triton_matrix_tree.available(S) and not tracing()


def _solve(S, lengths, multiroot, want_marginals, low_precision=False):
    """(log Z (B,) float64, marginals (B, N, N) or None; NaN rows where no tree exists). Every row takes the
    direct path (:func:`_screen`: float32 where :func:`_float32_first_pass` says so, the marginals then
    float32; else float64), and one host synchronisation sends the rows it may have got wrong to
    :func:`_solve_float64` (the balanced path for rows of wide range, the GTH elimination for cancellation)."""
    B, N, _ = S.shape
    S = S.detach()
    if N == 1:
        return _solve_float64(S, lengths, multiroot, want_marginals)
    if not _float32_first_pass(S, want_marginals, low_precision):
        S = S.to(torch.float64)
    logz, M, bad = _screen(S, lengths, multiroot, want_marginals)
    redo = bad.nonzero().flatten()                                               # the one synchronisation
    logz = logz.to(torch.float64)
    if len(redo):
        z, sure = _solve_float64(S[redo], lengths[redo], multiroot, want_marginals)
        logz = logz.index_copy(0, redo, z)
        if want_marginals:
            M = M.index_copy(0, redo, sure.to(M.dtype))
    return torch.where(lengths > 0, logz, 0.0), M


class MatrixTreeLogZ(torch.autograd.Function):
    """log Z of non-projective trees (B,), with the marginals as its gradient (module docstring)."""

    @staticmethod
    def forward(ctx, S, lengths, multiroot):
        logz, M = _solve(S, lengths, multiroot, S.requires_grad, low_precision=True)
        ctx.save_for_backward(M if M is not None else S.new_zeros(0))
        ctx.dtype = S.dtype
        return logz.to(S.dtype)

    @staticmethod
    def backward(ctx, grad):
        (M,) = ctx.saved_tensors
        return (grad.to(M.dtype)[:, None, None] * M).to(ctx.dtype), None, None


def log_partition(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """log Z (B,) of the non-projective trees of every sentence (0 for length 0, -inf where no tree exists),
    differentiable: its gradient is the arc marginals."""
    return MatrixTreeLogZ.apply(S, lengths, multiroot)


def marginals(S: torch.Tensor, lengths: torch.Tensor, multiroot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(marginals (B, N, N) float64, M[b, m, h] = P(h -> m), zero off the sentence; log Z (B,) float64);
    NaN rows where no tree exists."""
    logz, M = _solve(S, lengths, multiroot, True)
    return M, logz
