"""The chain marginal oracle: sufficient statistics of the Gibbs distribution p(y) = exp s(y) / Z of
ragged chains, s(y) = sum_t U_t[y_t] + first[y_0] + last[y_{T-1}] + sum_t trans[y_t, y_{t-1}].

Both marginal-based dual solvers reduce to it: the entropic (KL) Bregman projection of the dual
extragradient (Taskar, Lacoste-Julien & Jordan 2006, Sec. 4) and the exponentiated-gradient update of
the factored dual (Collins et al. 2008, eq. (10)) map log-potentials on the chain's parts to their
marginals, i.e. to the point of the marginal polytope (= the convex hull of labelings' statistics
on a chain) that stores like :class:`~ssvm_torch.stores.chain.ChainDual` hold per block.

Two backends behind one call, both the chain package's recursions:

* ``numba`` (CPU float64): :func:`~ssvm_torch.chain.numba_fb.nb_ragged_marginals`, one thread per
  sequence, the scaled forward-backward with the log-space one where its scaling fails;
* ``torch`` (any device): :func:`~ssvm_torch.chain.losses.chain_expectations`, the gradient of the
  torch forward recursion of log Z; the CUDA path.

``torch-struct`` (:mod:`ssvm_torch.chain.torch_struct`, another library's log-space recursion) is
the independent reference both are tested against; ``auto`` never picks it.

``benchmarks/bench_solvers.py --part oracle`` measures both (the choice of the default is there).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as Fn

from ..devices import from_host, to_host
from ..errors import check, check_choice
from .losses import chain_expectations
from .numba_fb import nb_ragged_marginals
from .torch_struct import reference_expectations

BACKENDS = ("auto", "numba", "torch", "torch-struct")


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
    ``backend``: numba (CPU float64), torch (any device), auto = numba where it applies;
    ``torch-struct`` the independent reference (:mod:`ssvm_torch.chain.torch_struct`)."""
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
        nb_ragged_marginals(np.ascontiguousarray(to_host(U)), offsets, *(np.ascontiguousarray(to_host(t))
                           for t in (first, last, trans)), Mu, Mt, logZ)
        return tuple(from_host(a, U.device) for a in (Mu, Mt, logZ))
    return _padded(U, lengths, first, last, trans,
                   reference_expectations if backend == "torch-struct" else chain_expectations)


def _padded(U, lengths, first, last, trans, expectations):
    B, K = lengths.shape[0], U.shape[1]
    T = int(lengths.max())
    offsets = Fn.pad(torch.cumsum(lengths, 0), (1, 0))
    t = torch.arange(T, device=U.device)
    valid = t[None, :] < lengths[:, None]
    rows = (offsets[:-1, None] + t[None, :])[valid]
    padded = U.new_zeros(B, T, K)
    padded[valid] = U[rows]
    Mu, _, _, Mt, logZ = expectations(padded, lengths, first, last, trans)
    return Mu[valid], Mt, logZ
