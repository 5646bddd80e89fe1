"""Dynamic programs over monotone alignment paths (ssvm_torch/align/paths.py): the log partition function, the best
path, the marginals, and the cost-augmented versions the structured losses need, for batches of score tensors
(B, N, M, 3), scores[b, i, j, move] the score of entering cell (i, j) by ``move`` (torch-struct's ``AlignmentCRF``
layout; its implementation needs the ``genbmm`` CUDA extension, these are plain torch on any device).

The recursion runs over anti-diagonals d = i + j (the wavefront: every cell of a diagonal depends on the two before
it only), so one step is one vectorised operation over a diagonal's cells and a grid takes N + M - 1 steps:

    a(i, j) = (+) { a(i, j-1) + s(i, j, RIGHT),  a(i-1, j-1) + s(i, j, DIAGONAL),  a(i-1, j) + s(i, j, DOWN) }

with (+) = logsumexp (log Z) or max (the best path), a(-1, -1) = 0 for the diagonal entry of (0, 0) and, for local
paths, for the diagonal entry of every cell (a path may start anywhere); the value is a(n-1, m-1) (global) or the
(+) over every cell of the row's grid and the empty path's 0 (local). Gradients are autograd's through the
recursion: the marginals of log Z, the best path's indicators for the max. Scores may be -inf (a forbidden move);
internally they are clamped to ``NEG`` so that unreachable cells keep finite values and zero gradients.

On CPU tensors (``kernels="auto"`` or ``"numba"``) the same recursions run compiled, cell by cell, one batch row per
thread (align/numba_ops.py), with a hand-written reverse pass for log Z (first derivatives; the torch path also
differentiates twice) and the best path's move indicators as the max's gradient.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from ..chain.checks import check_draws
from ..errors import SSVMInputError, check, check_choice
from ..grad_mode import records_autograd
from . import numba_ops
from .paths import DIAGONAL, DOWN, RIGHT

#: "auto": the compiled kernels (align/numba_ops.py) for CPU tensors, the torch wavefront elsewhere
KERNELS = ("auto", "numba", "torch")

#: the score of an impossible move inside the recursion (finite: no NaN gradients through unreachable cells)
NEG = -1e30


#: the score dtypes accepted; half precision is computed in float32 (:func:`as_computed`)
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def as_computed(t: torch.Tensor) -> torch.Tensor:
    """``t`` in the dtype the dynamic programs compute in: float32 for half precision (its 5 or 8 exponent bits
    overflow a log-sum-exp over a few hundred moves), else its own."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def check_scores(scores, x_lengths=None, y_lengths=None, field: str = "scores"):
    """(scores, x_lengths, y_lengths) checked by name: a float tensor (B, N, M, 3) without NaN or +inf (half
    precision computed in float32, as the other layers': chain/ops.py, trees/checks.py), lengths int64 (B,) in
    [1, N] and [1, M] (default N and M) on the scores' device."""
    check(torch.is_tensor(scores) and scores.dtype in FLOATS and scores.dim() == 4
          and scores.shape[3] == 3 and scores.shape[1] >= 1 and scores.shape[2] >= 1, field,
          "a float tensor (B, N, M, 3): the score of entering cell (i, j) right, diagonally, down",
          f"{getattr(scores, 'dtype', type(scores).__name__)} {tuple(getattr(scores, 'shape', ()))}")
    scores = as_computed(scores)
    if scores.numel():
        # NaN if any is NaN: one pass finds both faults (over one move where the moves share a cell's score: a
        # reduction over an axis of stride 0, from_similarity's DTW scores, reads 14x slower)
        top = (scores[..., 0] if scores.stride(3) == 0 else scores).max()
        check(not bool(torch.isnan(top) | (top == float("inf"))), field, "finite scores or -inf (a forbidden move)",
              "NaN or +inf")
    B, N, M, _ = scores.shape
    out = []
    for name, lengths, top in (("x_lengths", x_lengths, N), ("y_lengths", y_lengths, M)):
        if lengths is None:
            out.append(torch.full((B,), top, dtype=torch.int64, device=scores.device))
            continue
        check(torch.is_tensor(lengths) and not lengths.is_floating_point() and tuple(lengths.shape) == (B,), name,
              f"an integer tensor ({B},)", f"{getattr(lengths, 'dtype', type(lengths).__name__)} "
              f"{tuple(getattr(lengths, 'shape', ()))}")
        lengths = lengths.to(scores.device, torch.int64)
        check(bool(((lengths >= 1) & (lengths <= top)).all()), name, f"lengths in [1, {top}]",
              lengths.tolist()[:8])
        out.append(lengths)
    return scores, out[0], out[1]


def _skewed(scores: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor) -> torch.Tensor:
    """(B, N + M - 1, N, 3): diagonal d's cells (i, d - i) by row i, ``NEG`` off the grid, beyond a row's lengths
    and where the score is -inf. A strided view of the flattened grid: cell (i, d - i) is flat entry i M + d - i =
    d + i (M - 1), so diagonal d is a stride of M - 1 from entry d (the entries it reaches off the grid are masked)."""
    B, N, M, _ = scores.shape
    dev = scores.device
    i = torch.arange(N, device=dev)
    inside = (i[None, :, None] < x_lengths[:, None, None]) & (torch.arange(M, device=dev)[None, None, :]
                                                              < y_lengths[:, None, None])
    s = torch.where(inside[..., None], scores.clamp(min=NEG), scores.new_full((), NEG))    # -inf -> NEG too
    flat = torch.cat([s.reshape(B, N * M, 3), s.new_full((B, N, 3), NEG)], 1)            # room for the last reach
    view = flat.as_strided((B, N + M - 1, N, 3), (flat.stride(0), 3, 3 * (M - 1), 1))
    j = torch.arange(N + M - 1, device=dev)[:, None] - i[None, :]
    on_grid = ((j >= 0) & (j < M))[None, :, :, None]
    return torch.where(on_grid, view, view.new_full((), NEG))


def _shift(a: torch.Tensor) -> torch.Tensor:
    """a[:, i - 1] at i (NEG at i = 0): the previous row's value on a diagonal."""
    return torch.cat([a.new_full((a.shape[0], 1), NEG), a[:, :-1]], 1)


def _lse3(a, b, c):
    """log(exp(a) + exp(b) + exp(c)) shifted by the (constant) largest term: every exponent <= 0 and the sum >= 1,
    so first and second derivatives stay finite where the terms differ by more than exp's range (torch.logaddexp's
    second derivative is NaN there: exp overflows in its denominator), as they do next to ``NEG``."""
    hi = torch.maximum(torch.maximum(a, b), c).detach()
    return hi + torch.log(torch.exp(a - hi) + torch.exp(b - hi) + torch.exp(c - hi))


def _lse2(a, b):
    hi = torch.maximum(a, b).detach()
    return hi + torch.log(torch.exp(a - hi) + torch.exp(b - hi))


def _sweep(skewed: torch.Tensor, local: bool, reduce: str, twice: bool = False):
    """The recursion (module docstring) over the diagonals: (values a (B, D, N), the chosen move (B, D, N) for
    ``reduce="max"``, ties to the lowest move, else None). ``twice``: the max-shifted logsumexp (:func:`_lse3`),
    whose second derivatives stay finite (the entropy's gradient); else torch.logaddexp, a third faster."""
    B, D, N, _ = skewed.shape
    none = skewed.new_full((B, N), NEG)
    outside = none.clone()
    outside[:, 0] = 0.0                                  # (0, 0) entered diagonally from outside the grid
    if local:
        outside = torch.zeros_like(none)                 # any cell may be a local path's first
    prev2, prev1, values, moves = none, none, [], []
    for d, phi in enumerate(skewed.unbind(1)):           # views: one gradient stack, not one per step
        if local:
            diagonal_from = (torch.maximum if reduce == "max" else _lse2 if twice else torch.logaddexp)(
                _shift(prev2), outside)
        else:
            diagonal_from = outside if d == 0 else _shift(prev2)
        right, down = prev1 + phi[..., RIGHT], _shift(prev1) + phi[..., DOWN]
        diagonal = diagonal_from + phi[..., DIAGONAL]
        if reduce == "max":
            best, arg = torch.stack([right, diagonal, down], -1).max(-1)
            moves.append(arg)
        else:
            best = (_lse3(right, diagonal, down) if twice else
                    torch.logaddexp(torch.logaddexp(right, diagonal), down))
        values.append(best)
        prev2, prev1 = prev1, best
    return torch.stack(values, 1), (torch.stack(moves, 1) if moves else None)


def _value(a: torch.Tensor, x_lengths, y_lengths, local: bool, reduce: str) -> torch.Tensor:
    """(B,): a at (n - 1, m - 1) (global), or the (+) of every cell and the empty path's 0 (local)."""
    B = a.shape[0]
    if not local:
        return a[torch.arange(B, device=a.device), x_lengths + y_lengths - 2, x_lengths - 1]
    flat = torch.cat([a.reshape(B, a.shape[1] * a.shape[2]), a.new_zeros(B, 1)], 1)
    return flat.max(1).values if reduce == "max" else torch.logsumexp(flat, 1)


def _check_reachable(value: torch.Tensor, field: str = "scores") -> None:
    """Refuses, naming ``field``, the rows whose value says no path has a finite score: the scores' own -inf moves
    or, for ``field`` a partial path (align/partial.py), its observed cells with them."""
    if bool((value < NEG / 2).any()):
        why = "whose every path takes a -inf move" if field == "scores" else \
            "whose observed cells no path of finite score agrees with"
        raise SSVMInputError(f"{field}: expected at least one path of finite score per row, got rows "
                             f"{torch.nonzero(value < NEG / 2).flatten().tolist()[:8]} {why}")


def use_compiled(scores: torch.Tensor, kernels: str) -> bool:
    """Whether ``kernels`` on the scores' device means the compiled CPU kernels (numba_ops.py)."""
    check_choice(kernels, "kernels", KERNELS)
    if kernels == "numba":
        check(scores.device.type == "cpu", "kernels", "'numba' on CPU tensors (use 'auto' or 'torch')",
              str(scores.device))
    return kernels != "torch" and scores.device.type == "cpu"


def _host(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a NumPy array, strides kept (an expanded view, e.g. from_similarity's, is not copied:
    the kernels read any strides)."""
    return t.detach().numpy()


class _CompiledLogZ(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, n, m, local):
        S = _host(scores)
        alpha, weights, out = np.empty(S.shape[:3]), np.empty(S.shape), np.empty(S.shape[0])
        numba_ops.forward_logz(S, _host(n), _host(m), local, alpha, weights, out)
        ctx.n, ctx.m, ctx.alpha, ctx.weights, ctx.logz, ctx.local, ctx.dtype = _host(n), _host(m), alpha, weights, \
            out, local, scores.dtype
        return torch.from_numpy(out).to(scores.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        # the kernel writes the gradient in the scores' dtype (its arithmetic is float64): no float64 copy to convert
        grad = torch.empty(ctx.weights.shape, dtype=ctx.dtype).numpy()
        adj = np.empty(ctx.alpha.shape)
        numba_ops.backward_logz(ctx.n, ctx.m, ctx.local, ctx.alpha, ctx.weights, ctx.logz,
                                _host(grad_out.to(torch.float64)), adj, grad)
        return torch.from_numpy(grad), None, None, None


def _compiled_best(scores, n, m, local):
    """(value (B,) float64 numpy, path (B, N, M) int64 tensor) by the compiled max recursion."""
    S = _host(scores)
    value, move = np.empty(S.shape[0]), np.zeros(S.shape[:3], dtype=np.int64)
    path = np.full(S.shape[:3], -1, dtype=np.int64)
    numba_ops.best_paths(S, _host(n), _host(m), local, value, move, path)
    return value, torch.from_numpy(path)


class _CompiledMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, n, m, local):
        value, path = _compiled_best(scores, n, m, local)
        ctx.save_for_backward(path)
        return torch.from_numpy(value).to(scores.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        (path,) = ctx.saved_tensors
        taken = torch.nn.functional.one_hot(path.clamp(min=0), 3).to(grad_out.dtype) * (path >= 0)[..., None]
        return taken * grad_out[:, None, None, None], None, None, None


def _recursion_value(scores, x_lengths, y_lengths, local: bool, kernels: str, reduce: str,
                     twice: bool = False, field: str = "scores") -> torch.Tensor:
    """log Z (``reduce="logsumexp"``) or the best score (``"max"``) per row, by the compiled kernels or the torch
    wavefront, differentiable (``twice``: the torch wavefront with finite second derivatives); a row without a
    finite path refused."""
    scores, n, m = check_scores(scores, x_lengths, y_lengths)
    if use_compiled(scores, kernels) and not twice:
        value = (_CompiledMax if reduce == "max" else _CompiledLogZ).apply(scores, n, m, local)
    else:
        a, _ = _sweep(_skewed(scores, n, m), local, reduce, twice)
        value = _value(a, n, m, local, reduce)
    _check_reachable(value, field)
    return value


def log_partition(scores, x_lengths=None, y_lengths=None, local: bool = False, kernels: str = "auto", *,
                  field: str = "scores") -> torch.Tensor:
    """log Z (B,): the logsumexp of the score of every path (global or ``local``), differentiable. A row without
    a path of finite score is refused naming ``field`` (a caller that restricted the scores names what did)."""
    return _recursion_value(scores, x_lengths, y_lengths, local, kernels, "logsumexp", field=field)


def max_score(scores, x_lengths=None, y_lengths=None, local: bool = False, kernels: str = "auto", *,
              field: str = "scores") -> torch.Tensor:
    """The best path's score (B,), differentiable (its gradient is the best path's move indicators); ``field`` as
    in :func:`log_partition`."""
    return _recursion_value(scores, x_lengths, y_lengths, local, kernels, "max", field=field)


@records_autograd
def marginals(scores, x_lengths=None, y_lengths=None, local: bool = False, kernels: str = "auto") -> torch.Tensor:
    """P(the path enters (i, j) by move) (B, N, M, 3): the gradient of log Z (0 outside each row's grid); float32
    for half-precision scores."""
    with torch.enable_grad():
        s = as_computed(scores.detach()).requires_grad_(True)
        logz = log_partition(s, x_lengths, y_lengths, local, kernels)
        return torch.autograd.grad(logz.sum(), s)[0]


def decode(scores, x_lengths=None, y_lengths=None, local: bool = False, kernels: str = "auto") -> torch.Tensor:
    """The best path of each row (B, N, M) int64 (paths.py's form): the recursion's max with its moves kept, then
    followed back from the last cell (ties to the lowest move; for a local path, the first best cell in row-major
    order, and the empty path where no path scores above 0)."""
    scores, n, m = check_scores(scores, x_lengths, y_lengths)
    if use_compiled(scores, kernels):
        value, path = _compiled_best(scores, n, m, local)
        _check_reachable(torch.from_numpy(value))
        return path
    with torch.no_grad():
        a, moves = _sweep(_skewed(scores, n, m), local, "max")
        value = _value(a, n, m, local, "max")
        _check_reachable(value)
        return _follow(a, moves, scores.shape[2], n, m, local)


def _follow(a, moves, M, n, m, local) -> torch.Tensor:
    """The best paths (B, N, M) from the torch sweep's values and moves (on their device)."""
    B, D, N = a.shape
    rows = torch.arange(B, device=a.device)
    path = torch.full((B, N, M), -1, dtype=torch.int64, device=a.device)
    if local:
        cells = a.new_full((B, N, M), NEG)
        i_idx = torch.arange(N, device=a.device)[:, None]
        j_idx = torch.arange(M, device=a.device)[None, :]
        cells[:, i_idx, j_idx] = a[:, (i_idx + j_idx).expand(N, M), i_idx.expand(N, M)]
        flat = cells.reshape(B, N * M)
        best = flat.argmax(1)
        i, j = best // M, best % M
        active = flat[rows, best] > 0.0                   # else the empty path (score 0) is at least as good
    else:
        i, j = n - 1, m - 1
        active = torch.ones(B, dtype=torch.bool, device=a.device)
    for _ in range(D):                                   # a path has at most D cells; no early stop, no sync
        mv = moves[rows, (i + j).clamp(0, D - 1), i]
        path[rows[active], i[active], j[active]] = mv[active]
        # a path's first cell: (0, 0), a border cell, or (local) where starting afresh was the best diagonal entry
        fresh = (mv == DIAGONAL) & ((i == 0) | (j == 0) | (local & _fresh_start(a, rows, i, j)))
        active = active & ~fresh
        i, j = torch.where(active, i - (mv != RIGHT).long(), i), torch.where(active, j - (mv != DOWN).long(), j)
    return path


def _fresh_start(a, rows, i, j) -> torch.Tensor:
    """For a local path entering (i, j) diagonally: whether starting afresh (0) beats continuing from a(i-1, j-1)
    (ties: start afresh, the shorter path)."""
    ip, jp = (i - 1).clamp(min=0), (j - 1).clamp(min=0)
    return a[rows, ip + jp, ip] <= 0.0


@records_autograd
def entropy(scores, x_lengths=None, y_lengths=None, local: bool = False, kernels: str = "auto") -> torch.Tensor:
    """H(p) (B,) of the path distribution p(P) = exp(s(P) - log Z): log Z - sum_{cells, moves} mu s (mu the
    marginals). Differentiable through the torch wavefront (it differentiates twice); with the compiled kernels the
    value only, so a ``scores`` that requires grad takes the torch path."""
    with torch.enable_grad():
        s = as_computed(scores) if scores.requires_grad else as_computed(scores.detach()).requires_grad_(True)
        logz = _recursion_value(s, x_lengths, y_lengths, local, kernels, "logsumexp", twice=scores.requires_grad)
        mu = torch.autograd.grad(logz.sum(), s, create_graph=scores.requires_grad)[0]
    finite = s > NEG
    return logz - torch.where(finite, mu * torch.where(finite, s, s.new_zeros(())), s.new_zeros(())).sum((1, 2, 3))


def kl(scores, other_scores, x_lengths=None, y_lengths=None, local: bool = False,
       kernels: str = "auto") -> torch.Tensor:
    """KL(p || q) (B,) of the path distributions of ``scores`` (p) and ``other_scores`` (q: the same shape and
    device): E_p[s_p(P) - s_q(P)] - log Z_p + log Z_q, the expectation by p's marginals mu_p; +inf where p gives
    weight to a move that q forbids (-inf). Differentiable w.r.t. both (mu_p's own gradient through the torch
    wavefront where ``scores`` requires grad, as :func:`entropy`)."""
    logz_p, logz_q, exp_p, exp_q = _expectations(scores, other_scores, x_lengths, y_lengths, local, kernels)
    return exp_p - logz_p + logz_q - exp_q


def cross_entropy(scores, other_scores, x_lengths=None, y_lengths=None, local: bool = False,
                  kernels: str = "auto") -> torch.Tensor:
    """H(p, q) = -E_p[log q(P)] = log Z_q - E_p[s_q(P)] (B,) = H(p) + KL(p || q), p and q as in :func:`kl`."""
    _, logz_q, _, exp_q = _expectations(scores, other_scores, x_lengths, y_lengths, local, kernels)
    return logz_q - exp_q


@records_autograd
def _expectations(scores, other_scores, x_lengths, y_lengths, local, kernels):
    """(log Z_p, log Z_q, E_p[s_p], E_p[s_q]) per row; ``other_scores`` checked by name. Where p never enters a
    cell by a move (mu_p = 0: -inf, or beyond a row's grid) that move adds nothing, whatever either score."""
    check(torch.is_tensor(other_scores) and torch.is_tensor(scores) and other_scores.shape == scores.shape
          and other_scores.device == scores.device, "other_scores",
          f"a tensor of the scores' shape {tuple(getattr(scores, 'shape', ()))} on {getattr(scores, 'device', None)}",
          f"{tuple(getattr(other_scores, 'shape', ()))} on {getattr(other_scores, 'device', None)}")
    check_scores(other_scores, x_lengths, y_lengths, "other_scores")
    twice = scores.requires_grad
    with torch.enable_grad():
        s = as_computed(scores) if twice else as_computed(scores.detach()).requires_grad_(True)
        logz_p = _recursion_value(s, x_lengths, y_lengths, local, kernels, "logsumexp", twice=twice)
        mu = torch.autograd.grad(logz_p.sum(), s, create_graph=twice)[0]
    logz_q = _recursion_value(other_scores, x_lengths, y_lengths, local, kernels, "logsumexp")
    if not twice:                                   # nothing to differentiate on p's side
        s, logz_p = s.detach(), logz_p.detach()
    q = as_computed(other_scores)
    zero = s.new_zeros(())
    # where() on both sides: 0 * -inf in the branch not taken would make a NaN gradient; a move p takes and q
    # forbids makes E_p[s_q] -inf through an indicator, so that the row's gradient stays finite (NaN would reach
    # the shared parameters of a network even when that row's loss is masked out)
    exp_p = torch.where(s > NEG, mu * torch.where(s > NEG, s, zero), zero).sum((1, 2, 3))
    on, allowed = mu > 0, q > NEG
    exp_q = torch.where(on & allowed, mu * torch.where(allowed, q, zero), zero).sum((1, 2, 3))
    exp_q = exp_q.masked_fill((on & ~allowed).flatten(1).any(1), float("-inf"))
    return logz_p, logz_q, exp_p, exp_q


def sample(scores, x_lengths=None, y_lengths=None, local: bool = False, n: int = 1, generator=None,
           kernels: str = "auto") -> torch.Tensor:
    """``n`` exact samples of the path distribution per row, (B, n, N, M) int64 paths on the scores' device,
    batch-first as the k best paths (:func:`~ssvm_torch.align.kbest.kbest`) and every other layer's samples: the
    forward pass, then backward sampling from the last cell (global) or from a cell drawn with probability
    exp(a(i, j) - log Z) (local; the empty path with exp(-log Z)), each move drawn by its share of the cell's
    logsumexp and a local diagonal entry between continuing and starting afresh by theirs. Compiled on CPU tensors
    (align/numba_ops.py), the torch wavefront's values elsewhere; the two draw the same distribution from different
    uniform streams. ``generator``: a torch.Generator on the scores' device (the uniforms are drawn there)."""
    scores, x_n, y_m = check_scores(scores, x_lengths, y_lengths)
    check_draws(n, generator, scores.device)
    B, N, M, _ = scores.shape
    # rows r = sample * B + b of the uniforms and of the draws, read back batch-first
    uniforms = torch.rand(n * B, 2 * (N + M) + 1, generator=generator, dtype=torch.float64, device=scores.device)
    if not use_compiled(scores, kernels):
        draws = _torch_samples(scores.detach(), x_n, y_m, local, uniforms).reshape(n, B, N, M)
        return draws.transpose(0, 1).contiguous()
    host, nh, mh = _host(scores), _host(x_n), _host(y_m)
    alpha, weights, logz = np.empty(host.shape[:3]), np.empty(host.shape), np.empty(B)
    numba_ops.forward_logz(host, nh, mh, local, alpha, weights, logz)
    _check_reachable(torch.from_numpy(logz))
    path = np.full((n, B, N, M), -1, dtype=np.int64)
    numba_ops.sample_paths(nh, mh, local, alpha, weights, logz, uniforms.reshape(n, B, uniforms.shape[1]).numpy(), path)
    return torch.from_numpy(path).transpose(0, 1).contiguous()


def _torch_samples(scores, n, m, local: bool, uniforms) -> torch.Tensor:
    """The backward sampling of :func:`sample` on the torch wavefront's values, all samples of all rows at once
    (rows r = sample * B + b), on the scores' device: (n B, N, M) paths."""
    B, N, M, _ = scores.shape
    dev = scores.device
    sk = _skewed(scores, n, m)
    a, _ = _sweep(sk, local, "logsumexp")
    logz = _value(a, n, m, local, "logsumexp")
    _check_reachable(logz)
    R, D = uniforms.shape[0], a.shape[1]
    b = torch.arange(R, device=dev) % B
    u = uniforms.to(a.dtype)

    def value(i, j):                                       # a(i, j), NEG off the grid (an empty local path's
        ok = (i >= 0) & (j >= 0)                           # rows carry i = N: clamped, never written)
        return torch.where(ok, a[b, (i + j).clamp(0, D - 1), i.clamp(0, N - 1)], a.new_full((), NEG))
    if local:
        cells = torch.full((B, N, M), NEG, dtype=a.dtype, device=dev)
        ii, jj = torch.arange(N, device=dev)[:, None], torch.arange(M, device=dev)[None, :]
        cells[:, ii, jj] = a[:, (ii + jj).expand(N, M), ii.expand(N, M)]
        logits = torch.cat([cells.reshape(B, N * M), a.new_zeros(B, 1)], 1)[b]       # the empty path last
        cum = torch.softmax(logits, 1).cumsum(1)
        pick = (u[:, :1] >= cum[:, :-1]).sum(1)
        i, j = pick // M, pick % M
        active = pick < N * M
    else:
        i, j = n[b] - 1, m[b] - 1
        active = torch.ones(R, dtype=torch.bool, device=dev)
    rows = torch.arange(R, device=dev)
    path = torch.full((R, N, M), -1, dtype=torch.int64, device=dev)
    zero = a.new_zeros(())
    for step in range(D):                                  # a path has at most D cells; no early stop, no sync
        d = (i + j).clamp(0, D - 1)
        here, phi = value(i, j), sk[b, d, i.clamp(0, N - 1)]
        prev = value(i - 1, j - 1)
        start = torch.where((i == 0) & (j == 0), zero, a.new_full((), NEG))
        from_prev = torch.logaddexp(prev, zero) if local else torch.maximum(prev, start)
        logits = torch.stack([value(i, j - 1) + phi[:, 0], from_prev + phi[:, 1], value(i - 1, j) + phi[:, 2]], 1)
        p = torch.exp(logits - here[:, None])
        mv = (u[:, 1 + step, None] >= p.cumsum(1)[:, :2]).sum(1)
        mv = torch.where(p.gather(1, mv[:, None])[:, 0] > 0, mv, p.argmax(1))     # rounding past the shares' sum
        path[rows[active], i[active], j[active]] = mv[active]
        # a path's first cell: (0, 0), a border cell, or (local) where starting afresh was drawn
        fresh = (mv == DIAGONAL) & ((i == 0) | (j == 0) | (local & (u[:, 1 + D + step] >= torch.exp(prev - from_prev))))
        active = active & ~fresh
        i, j = torch.where(active, i - (mv != RIGHT).long(), i), torch.where(active, j - (mv != DOWN).long(), j)
    return path
