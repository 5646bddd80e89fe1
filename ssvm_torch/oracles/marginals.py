"""The chain marginal oracle: sufficient statistics of the Gibbs distribution p(y) = exp s(y) / Z of
ragged chains, s(y) = sum_t U_t[y_t] + first[y_0] + last[y_{T-1}] + sum_t trans[y_t, y_{t-1}].

Both marginal-based dual solvers reduce to it: the entropic (KL) Bregman projection of the dual
extragradient (Taskar, Lacoste-Julien & Jordan 2006, Sec. 4) and the exponentiated-gradient update of
the factored dual (Collins et al. 2008, eq. (10)) map log-potentials on the chain's parts to their
marginals, i.e. to the point of the marginal polytope (= the convex hull of labelings' statistics
on a chain) that stores like :class:`~ssvm_torch.stores.chain.ChainDual` hold per block.

Two backends behind one call:

* ``numba``: a log-space forward-backward, one thread per sequence (CPU float64);
* ``torch-struct``: the project's one torch-struct wrapper
  (:func:`ssvm_torch.oracles.crf.chain_expectations`, the log semiring's gradient), any device; it is
  the reference the numba kernel is tested against, and the CUDA path.

``benchmarks/bench_solvers.py --part oracle`` measures both (the choice of the default is there).
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch
import torch.nn.functional as Fn

from ..devices import from_host, to_host
from ..errors import check, check_choice
from .crf import chain_expectations

BACKENDS = ("auto", "numba", "torch-struct")


@nb.njit(cache=True, nogil=True)
def _logsumexp(v):
    m = v.max()
    if m == -np.inf:
        return m
    return m + np.log(np.exp(v - m).sum())


@nb.njit(cache=True, nogil=True, parallel=True)
def nb_chain_marginals(U, offsets, first, last, trans, Mu, Mt, logZ):
    """Forward-backward in log space for every sequence b (rows offsets[b]:offsets[b+1] of U);
    first/last (B, K) and trans (B, K, K) [next, prev] per sequence. Writes the label marginals
    Mu (rows, K), the expected transition counts Mt (B, K, K) and log Z (B,)."""
    B = offsets.shape[0] - 1
    K = U.shape[1]
    for b in nb.prange(B):
        s, e = offsets[b], offsets[b + 1]
        T = e - s
        a = np.empty((T, K))
        be = np.empty((T, K))
        v = np.empty(K)
        for k in range(K):
            a[0, k] = U[s, k] + first[b, k]
        for t in range(1, T):
            for k in range(K):
                for j in range(K):
                    v[j] = a[t - 1, j] + trans[b, k, j]
                a[t, k] = U[s + t, k] + _logsumexp(v)
        for k in range(K):
            be[T - 1, k] = last[b, k]
        for t in range(T - 2, -1, -1):
            for j in range(K):
                for k in range(K):
                    v[k] = trans[b, k, j] + U[s + t + 1, k] + be[t + 1, k]
                be[t, j] = _logsumexp(v)
        for k in range(K):
            v[k] = a[T - 1, k] + be[T - 1, k]
        z = _logsumexp(v)
        logZ[b] = z
        for t in range(T):
            for k in range(K):
                Mu[s + t, k] = np.exp(a[t, k] + be[t, k] - z)
        for k in range(K):
            for j in range(K):
                Mt[b, k, j] = 0.0
        for t in range(1, T):
            for k in range(K):
                for j in range(K):
                    Mt[b, k, j] += np.exp(a[t - 1, j] + trans[b, k, j] + U[s + t, k] + be[t, k] - z)


def _per_sequence(t: torch.Tensor, B: int, shape: tuple, name: str) -> torch.Tensor:
    check(torch.is_tensor(t) and tuple(t.shape) in (shape, (B, *shape)), name,
          f"a tensor of shape {shape} or {(B, *shape)}", getattr(t, "shape", type(t)))
    return t.expand(B, *shape)


def chain_marginals_ragged(U: torch.Tensor, lengths: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
                           trans: torch.Tensor, backend: str = "auto"):
    """Marginals of ragged chains: ``U`` (M, K) the unary log-potentials of the sequences' positions
    concatenated, ``lengths`` (B,) with sum M, ``first``/``last`` (K,) or (B, K), ``trans`` (K, K) or
    (B, K, K) [next, prev]. Returns (Mu (M, K), Mt (B, K, K), logZ (B,)) on U's device and dtype:
    Mu_t[k] = p(y_t = k), Mt[k, j] = sum_t p(y_t = k, y_{t-1} = j), log Z = logsumexp_y s(y).
    ``backend``: numba (CPU float64), torch-struct (any device), auto = numba where it applies."""
    check_choice(backend, "backend", BACKENDS)
    check(torch.is_tensor(U) and U.dim() == 2 and U.is_floating_point(), "U", "a float tensor (M, K)",
          getattr(U, "shape", type(U)))
    M, K = U.shape
    check(torch.is_tensor(lengths) and lengths.dim() == 1 and not lengths.is_floating_point() and len(lengths) >= 1,
          "lengths", "a non-empty 1-d integer tensor", getattr(lengths, "shape", type(lengths)))
    B = lengths.shape[0]
    if int(lengths.sum()) != M or bool((lengths < 1).any()):       # one host read per call, not per position
        check(False, "lengths", f"values >= 1 summing to U's {M} rows",
              f"sum {int(lengths.sum())}, min {int(lengths.min())}")
    first, last = (_per_sequence(t, B, (K,), n) for t, n in ((first, "first"), (last, "last")))
    trans = _per_sequence(trans, B, (K, K), "trans")
    numba_ok = U.device.type == "cpu" and U.dtype == torch.float64
    if backend == "numba":
        check(numba_ok, "backend", "'numba' with CPU float64 potentials", f"{U.device}, {U.dtype}")
    if backend == "numba" or (backend == "auto" and numba_ok):
        offsets = np.zeros(B + 1, dtype=np.int64)
        np.cumsum(to_host(lengths), out=offsets[1:])
        Mu, Mt, logZ = np.empty((M, K)), np.empty((B, K, K)), np.empty(B)
        nb_chain_marginals(np.ascontiguousarray(to_host(U)), offsets, *(np.ascontiguousarray(to_host(t))
                           for t in (first, last, trans)), Mu, Mt, logZ)
        return tuple(from_host(a, U.device) for a in (Mu, Mt, logZ))
    return _torch_struct(U, lengths, first, last, trans)


def _torch_struct(U, lengths, first, last, trans):
    B, K = lengths.shape[0], U.shape[1]
    T = int(lengths.max())
    offsets = Fn.pad(torch.cumsum(lengths, 0), (1, 0))
    t = torch.arange(T, device=U.device)
    valid = t[None, :] < lengths[:, None]
    rows = (offsets[:-1, None] + t[None, :])[valid]
    padded = U.new_zeros(B, T, K)
    padded[valid] = U[rows]
    Mu, _, _, Mt, logZ = chain_expectations(padded, lengths, first, last, trans)
    return Mu[valid], Mt, logZ
