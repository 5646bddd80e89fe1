"""torch-struct's ``LinearChainCRF`` as an independent reference of the chain package: log-partition and
marginals (all sufficient statistics) of a padded chain batch in the log semiring, with the
package's conventions (:mod:`ssvm_torch.chain`: unary (B, T, K), first, last, trans [next, prev]).
No operation dispatches here: the tests and ``benchmarks/`` compare the package's backends with it
(another library's log-space recursion), and ``chain_marginals_ragged(..., backend="torch-struct")``
names it explicitly. :func:`edge_potentials` (public) is the score layout torch-struct reads.

torch-struct 0.5's pitfalls, each handled here and pinned by tests/test_nn.py:

* its edge potentials are ``lp[b, n, y_{n+1}, y_n]`` (current, previous), so unaries, ``first``
  and ``last`` are folded into the edges (the first unary into edge 0, the last bias into the
  edge entering each sequence's last position);
* a length-1 sequence has no edge, so torch-struct loses its unary and scores it log K (an
  all-length-1 batch, with no edges at all, fails), so those rows are computed here as logsumexp(U_0 + first + last);
* ``max(lengths)`` must equal the padded length: every chunk is cut to its own longest sequence;
* one call over a large batch holds O(B T log T K^2) memory: batches are cut in ``chunk`` rows;
* it calls ``requires_grad_`` on the tensor it is given, so it only ever sees a fresh tensor;
* marginals are the gradient of log Z; they are computed on a detached leaf
  (``create_graph=False``), so nothing of the caller's graph is kept alive.
"""
from __future__ import annotations

import warnings

import torch

from .padded import check_chain


def edge_potentials(unary, lengths, first, last, trans) -> torch.Tensor:
    """torch-struct's (B, T-1, K, K) ``lp[b, n, cur, prev]`` holding every score of the chain:
    the sum over a labeling's edges equals s(y) (sequences of length >= 2). ``first``/``last``
    (K,) or per sequence (B, K), ``trans`` (K, K) or per sequence (B, K, K)."""
    B, T, K = unary.shape
    tr = trans[:, None] if trans.dim() == 3 else trans[None, None]
    lp = tr + unary[:, 1:, :, None]                                    # cur's unary on the edge entering it
    head = (unary[:, 0] + first)[:, None, :]                           # prev = position 0
    lp = torch.cat([lp[:, :1] + head[:, None], lp[:, 1:]], 1)
    at_end = (torch.arange(T - 1, device=unary.device)[None, :] == (lengths - 2)[:, None])
    end = last[:, None, :, None] if last.dim() == 2 else last[None, None, :, None]
    return lp + at_end[:, :, None, None].to(lp.dtype) * end


def reference_log_partition(unary, lengths, first, last, trans, chunk: int = 256) -> torch.Tensor:
    """log Z_i = logsumexp_y s_i(y): (B,), differentiable (torch-struct's forward algorithm in the
    log semiring; length-1 rows directly)."""
    from torch_struct import LinearChainCRF

    check_chain(unary, lengths, first, last, trans, per_sequence=True)
    B = unary.shape[0]
    out = []
    one = lengths == 1

    def rows_of(t, s, e, dim):               # a per-sequence parameter's rows s:e, a shared one as is
        return t[s:e] if t.dim() == dim else t
    for s in range(0, B, chunk):
        e = min(B, s + chunk)
        U, L = unary[s:e], lengths[s:e]
        f, la, tr = rows_of(first, s, e, 2), rows_of(last, s, e, 2), rows_of(trans, s, e, 3)
        part = torch.logsumexp(U[:, 0] + f + la, 1)                    # right for the length-1 rows
        many = ~one[s:e]
        if bool(many.any()):
            rows = torch.nonzero(many)[:, 0]
            Lm = L[rows]
            Tm = int(Lm.max())
            lp = edge_potentials(U[rows, :Tm], Lm, *(t[rows] if t.dim() == d else t
                                                     for t, d in ((f, 2), (la, 2), (tr, 3))))
            with warnings.catch_warnings():        # torch-struct 0.5 does not declare arg_constraints
                warnings.filterwarnings("ignore", message=".*arg_constraints.*")
                z = LinearChainCRF(lp + 0.0, lengths=Lm).partition     # + 0.0: a fresh tensor for requires_grad_
            part = part.index_put((rows,), z.to(part.dtype))
        out.append(part)
    return torch.cat(out)


def reference_marginals(unary, lengths, first, last, trans, chunk: int = 256) -> torch.Tensor:
    """Per-position label marginals p(y_t = k | x) (B, T, K), zero beyond ``lengths``; no graph kept."""
    with torch.enable_grad():
        leaf = unary.detach().clone().requires_grad_(True)
        logz = reference_log_partition(leaf, lengths, first.detach(), last.detach(), trans.detach(), chunk)
        (grad,) = torch.autograd.grad(logz.sum(), leaf)
    return grad.detach()


def reference_expectations(unary, lengths, first, last, trans, chunk: int = 256):
    """The sufficient statistics of p(y) = exp s(y) / Z per sequence: label marginals (B, T, K) (zero
    beyond ``lengths``), expected first and last labels (B, K), expected transition counts
    (B, K, K) [next, prev] and log Z (B,), all as gradients of log Z (torch-struct in the log
    semiring); ``first``/``last``/``trans`` shared or per sequence. No graph is kept."""
    B, K = unary.shape[0], unary.shape[2]
    with torch.enable_grad():
        leaves = [unary.detach().clone().requires_grad_(True)]
        for t, shape in ((first, (B, K)), (last, (B, K)), (trans, (B, K, K))):
            leaves.append(t.detach().expand(*shape).clone().requires_grad_(True))
        logz = reference_log_partition(*leaves[:1], lengths, *leaves[1:], chunk=chunk)
        grads = torch.autograd.grad(logz.sum(), leaves)
    return (*(g.detach() for g in grads), logz.detach())
