"""The linear-chain CRF over position-dependent edge potentials: torch-struct's ``LinearChainCRF`` (Rush 2020),
with compiled CPU kernels, a torch path for every device, and the toolkit's three losses.

A chain of length L over labels {0..K-1} scores a labeling z_0..z_{L-1} as

    s(z) = sum_{n=0}^{L-2} phi[n, z_{n+1}, z_n],        phi (B, N-1, K, K), indexed [position, next, prev]

(torch-struct's event shape and index order; the package's (K, K) ``trans`` is [next, prev] too, so the factorized
chain of :mod:`ssvm_torch.chain` is the case phi[n] = trans + U[n + 1][:, None] (+ U[0][None, :] + first at n = 0,
+ last at n = L-2): :func:`~ssvm_torch.chain.edge_potentials`). What the factorized chain cannot say is a transition
that depends on the input: a bilinear or network score of each adjacent pair, an HMM's per-position terms
(:func:`edges_from_hmm`). ``lengths`` (B,) gives each row's L in 1..N (None: every row N); a row of length 1 has K
labelings of score 0 (torch-struct's convention), a row of length 0 one empty labeling. -inf forbids a move; a row
left without a finite labeling is refused by name, as NaN or +inf potentials are.

Backends (``kernels``): ``numba`` (CPU float32/float64: :mod:`~ssvm_torch.chain.numba_edge_chain`, float64
accumulation, the default there), ``torch`` (any device: a log-space scan over positions and autograd, the
reference); ``auto`` picks numba on the CPU outside tracing. Losses, with Hamming's Delta(z, y) = the number of
positions where z differs from the gold y: the CRF's negative log-likelihood log Z - s(y), the structured hinge
max_z [s(z) + Delta(z, y)] - s(y) and the softmax-margin loss log sum_z exp(s(z) + Delta(z, y)) - s(y) (Gimpel &
Smith 2010), Delta folded into the potentials (:func:`loss_augmented`). The public functions check their
arguments once; the losses and the decoders built on the others call their unchecked forms.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import SSVMInputError, check, check_choice
from ..grad_mode import records_autograd
from .checks import refuse_bad_scores, tracing
from .numba_edge_chain import nb_edge_forward_backward, nb_edge_nbest, nb_edge_viterbi
from .torch_edge_chain import NEG_INF, decode_scan, log_partition_scan, nbest_scan

KERNELS = ("auto", "numba", "torch")


def check_edges(edges, lengths=None, tags=None) -> torch.Tensor:
    """Refuse, naming the field, potentials that are not a (B, N-1, K, K) floating tensor with NaN or +inf entries,
    lengths outside 0..N (or not (B,) integers on the potentials' device), and tags that are not (B, N) integers in
    0..K-1 at every position of their row; returns the lengths (B,) int64 (N for every row when None)."""
    check(torch.is_tensor(edges) and edges.is_floating_point() and edges.dim() == 4
          and edges.shape[2] == edges.shape[3] and edges.shape[2] >= 1, "edges",
          "a floating (B, N-1, K, K) tensor of potentials phi[b, n, next, prev]",
          tuple(edges.shape) if torch.is_tensor(edges) else type(edges).__name__)
    B, N = edges.shape[0], edges.shape[1] + 1
    refuse_bad_scores(edges, "edges")
    if lengths is None:
        lengths = torch.full((B,), N, dtype=torch.int64, device=edges.device)
    else:
        check(torch.is_tensor(lengths) and lengths.shape == (B,) and not lengths.is_floating_point()
              and lengths.dtype != torch.bool and lengths.device == edges.device, "lengths",
              f"a ({B},) integer tensor on {edges.device}", f"{tuple(lengths.shape)} {lengths.dtype} {lengths.device}"
              if torch.is_tensor(lengths) else type(lengths).__name__)
        lengths = lengths.to(torch.int64)
        if not tracing() and lengths.numel():
            lo, hi = int(lengths.min()), int(lengths.max())
            check(lo >= 0 and hi <= N, "lengths", f"row lengths in 0..{N} (the edges hold N - 1 = {N - 1} "
                  "positions' potentials)", f"{lo}..{hi}")
    if tags is not None:
        K = edges.shape[2]
        check(torch.is_tensor(tags) and tags.shape == (B, N) and not tags.is_floating_point()
              and tags.dtype != torch.bool, "tags", f"a ({B}, {N}) integer tensor",
              f"{tuple(tags.shape)} {tags.dtype}" if torch.is_tensor(tags) else type(tags).__name__)
        if not tracing():
            inside = torch.arange(N, device=tags.device)[None, :] < lengths.to(tags.device)[:, None]
            bad = inside & ((tags < 0) | (tags >= K))
            if bool(bad.any()):
                b, n = (int(x) for x in bad.nonzero()[0])
                raise SSVMInputError(f"tags: expected labels in 0..{K - 1} at every position of a row, row {b} has "
                                     f"{int(tags[b, n])} at position {n}")
    return lengths


def _use_numba(edges: torch.Tensor, kernels: str) -> bool:
    check_choice(kernels, "kernels", KERNELS)
    ok = edges.device.type == "cpu" and edges.dtype in (torch.float32, torch.float64) and not tracing()
    if kernels == "numba" and not ok:
        raise SSVMInputError(f"kernels: 'numba' needs CPU float32/float64 edges outside tracing, got {edges.device} "
                             f"{edges.dtype}")
    return ok and kernels != "torch"


def _fail_no_labeling(logz: torch.Tensor, lengths: torch.Tensor) -> None:
    if tracing() or bool(torch.isfinite(logz).all()):
        return
    b = int((~torch.isfinite(logz)).nonzero()[0, 0])
    raise SSVMInputError(f"edges: expected at least one labeling of finite score for every row, row {b} (length "
                         f"{int(lengths[b])}) has none (its -inf potentials forbid every path)")


def _numba_solve(edges: torch.Tensor, lengths: torch.Tensor, want: bool):
    """(log Z (B,) float64, the marginals in the edges' dtype or None) by the compiled forward-backward; the
    exponentials it runs on are made here, shifted per position by the largest finite potential (torch's vectorized
    exp: :mod:`~ssvm_torch.chain.numba_edge_chain`)."""
    phi = edges.detach().contiguous()
    shift = phi.amax((2, 3))
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))     # a position with no finite move
    P = (phi - shift[..., None, None]).exp_()
    logz = np.empty(phi.shape[0])
    nb_edge_forward_backward(phi.numpy(), P.numpy(), shift.to(torch.float64).numpy(), lengths.numpy(), logz, want)
    return torch.from_numpy(logz), (P if want else None)


class _NumbaLogZ(torch.autograd.Function):
    """log Z (B,) with the edge marginals as its gradient, both from one compiled forward-backward."""

    @staticmethod
    def forward(ctx, edges, lengths):
        logz, M = _numba_solve(edges, lengths, edges.requires_grad)
        _fail_no_labeling(logz, lengths)
        ctx.save_for_backward(M if M is not None else edges.new_zeros(0))
        return logz.to(edges.dtype)

    @staticmethod
    def backward(ctx, grad):
        (M,) = ctx.saved_tensors
        return grad.to(M.dtype)[:, None, None, None] * M, None


def log_partition(edges: torch.Tensor, lengths: torch.Tensor | None = None, kernels: str = "auto") -> torch.Tensor:
    """log Z (B,) = log sum_z exp s(z) of every row, differentiable: its gradient is the edge marginals."""
    return _log_partition(edges, check_edges(edges, lengths), kernels)


def _log_partition(edges, lengths, kernels):
    if _use_numba(edges, kernels):
        return _NumbaLogZ.apply(edges, lengths)
    logz = log_partition_scan(edges, lengths)
    _fail_no_labeling(logz, lengths)
    return logz


def marginals(edges: torch.Tensor, lengths: torch.Tensor | None = None, kernels: str = "auto") -> torch.Tensor:
    """mu (B, N-1, K, K): mu[b, n, a, c] = P(z_{n+1} = a, z_n = c) under row b's CRF, 0 beyond its L - 1 edges
    (torch-struct's ``marginals``). No gradient."""
    return _marginals(edges, check_edges(edges, lengths), kernels)


@records_autograd
def _marginals(edges, lengths, kernels):
    if _use_numba(edges, kernels):
        logz, M = _numba_solve(edges, lengths, True)
        _fail_no_labeling(logz, lengths)
        return M
    if edges.shape[1] == 0:                                          # N = 1: no edge to have a marginal
        return torch.zeros_like(edges)
    with torch.enable_grad():
        leaf = edges.detach().requires_grad_(True)
        logz = log_partition_scan(leaf, lengths)
        _fail_no_labeling(logz, lengths)
        (mu,) = torch.autograd.grad(logz.sum(), leaf)
    return mu


def decode(edges: torch.Tensor, lengths: torch.Tensor | None = None, kernels: str = "auto"):
    """(tags (B, N) int64, -1 beyond each row's length; scores (B,)): the best labeling of every row (ties to the
    smallest label) and its score. No gradient (:func:`score` of the tags is differentiable)."""
    return _decode(edges, check_edges(edges, lengths), kernels)


def _decode(edges, lengths, kernels):
    if _use_numba(edges, kernels):
        phi = np.ascontiguousarray(edges.detach().numpy())
        tags = np.empty((phi.shape[0], phi.shape[1] + 1), dtype=np.int64)
        scores = np.empty(phi.shape[0])
        nb_edge_viterbi(phi, lengths.numpy(), tags, scores)
        tags, scores = torch.from_numpy(tags), torch.from_numpy(scores).to(edges.dtype)
    else:
        tags, scores = decode_scan(edges.detach(), lengths)
    _fail_no_labeling(scores, lengths)
    return tags, scores


def nbest(edges: torch.Tensor, lengths: torch.Tensor | None = None, n: int = 1, kernels: str = "auto"):
    """(tags (B, n, N) int64, scores (B, n)): the n highest-scoring labelings of every row in non-increasing score
    order (torch-struct's ``topk``), -1 past each row's length and for the ranks a row lacks (fewer than n labelings
    of finite score: their scores are -inf). The compiled n-best recursion on the CPU (ties to the lower label),
    elsewhere the same recursion with ``topk`` over each label's (previous label, rank) candidates. No gradient."""
    lengths = check_edges(edges, lengths)
    check(isinstance(n, int) and not isinstance(n, bool) and n >= 1, "n", "an int >= 1", repr(n))
    return _nbest(edges, lengths, n, kernels)


def _nbest(edges, lengths, n, kernels):
    B, N1, K, _ = edges.shape
    if _use_numba(edges, kernels):
        tags = np.full((B, n, N1 + 1), -1, dtype=np.int64)
        scores = np.full((B, n), -np.inf)
        nb_edge_nbest(np.ascontiguousarray(edges.detach().numpy()), lengths.numpy(), n, tags, scores)
        tags, scores = torch.from_numpy(tags), torch.from_numpy(scores).to(edges.dtype)
    else:
        tags, scores = nbest_scan(edges.detach(), lengths, n)
    _fail_no_labeling(scores[:, 0], lengths)
    return tags, scores


def position_marginals(edges: torch.Tensor, lengths: torch.Tensor | None = None, kernels: str = "auto"):
    """p(z_n = k) (B, N, K) of every row's CRF, 0 past its length (a row of length 1: uniform), read off the edge
    marginals: the next labels' sums of each edge, and the first position from the first edge's previous labels."""
    return _position_marginals(edges, check_edges(edges, lengths), kernels)


def _position_marginals(edges, lengths, kernels):
    B, N1, K, _ = edges.shape
    mu = _marginals(edges, lengths, kernels)
    first = mu[:, :1].sum(2) if N1 else edges.new_zeros(B, 1, K)              # (B, 1, K) over the previous label
    first = torch.where((lengths == 1)[:, None, None], torch.full_like(first, 1.0 / K), first)
    out = torch.cat([first, mu.sum(3)], 1)
    inside = torch.arange(N1 + 1, device=edges.device)[None, :, None] < lengths[:, None, None]
    return torch.where(inside, out, torch.zeros_like(out))


def mbr_decode(edges: torch.Tensor, lengths: torch.Tensor | None = None, cost: torch.Tensor | None = None,
               n: int = 1, kernels: str = "auto"):
    """The labeling of least expected task loss (B, N) and its summed gain (B,) (minus its expected loss), or with
    ``n`` > 1 the n labelings of least expected loss (B, n, N) and theirs (B, n), -1 past each row's length:
    Kall et al. 2005's posterior-Viterbi, as the chain layer's (:mod:`ssvm_torch.chain.mbr`): the expected loss
    sum_n sum_g p(z_n = g) C[g, z'_n] of a token cost C (K, K) [gold, predicted] (None: Hamming, each position's
    most probable label where the moves allow) is minimised by the best path of the gains -E[C[., k]] over the
    moves the CRF allows (a -inf potential stays forbidden). No gradient."""
    from .mbr import expected_gain
    lengths = check_edges(edges, lengths)
    B, N1, K, _ = edges.shape
    if cost is None:
        cost = 1.0 - torch.eye(K, dtype=torch.float64, device=edges.device)
    check(torch.is_tensor(cost) and cost.shape == (K, K) and bool(torch.isfinite(cost).all()), "cost",
          f"a finite ({K}, {K}) tensor [gold, predicted]", tuple(cost.shape) if torch.is_tensor(cost) else cost)
    check(isinstance(n, int) and not isinstance(n, bool) and n >= 1, "n", "an int >= 1", repr(n))
    with torch.no_grad():
        gain = expected_gain(_position_marginals(edges, lengths, kernels).to(torch.float64), cost)   # (B, N, K)
        moves = gain[:, 1:, :, None].expand(B, N1, K, K).clone()
        if N1:
            moves[:, 0] += gain[:, 0, None, :]
        moves = torch.where(torch.isneginf(edges.detach()), torch.full_like(moves, NEG_INF), moves)
        tags, gains = _nbest(moves, lengths, n, kernels)
        # a row of length 1 has no edge to carry its one position's gains: its n best labels, directly
        top, label = gain[:, 0].topk(min(n, K), -1)
        pad = n - top.shape[1]
        top = torch.cat([top, top.new_full((B, pad), NEG_INF)], 1)
        label = torch.cat([label, label.new_full((B, pad), -1)], 1)
        one = (lengths == 1)[:, None]
        gains = torch.where(one, top, gains)
        tags[:, :, 0] = torch.where(one, label, tags[:, :, 0])
        return (tags[:, 0], gains[:, 0]) if n == 1 else (tags, gains)


def score(edges: torch.Tensor, tags: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """s(tags) (B,) = sum_{n < L-1} phi[n, tags[n+1], tags[n]], differentiable."""
    return _score(edges, tags, check_edges(edges, lengths, tags))


def _score(edges, tags, lengths):
    B, N1, K, _ = edges.shape
    if N1 == 0:
        return edges.new_zeros(B)
    t = tags.clamp(0, K - 1).to(torch.int64)
    pair = t[:, 1:] * K + t[:, :-1]                                  # (B, N-1) index of (next, prev)
    picked = edges.reshape(B, N1, K * K).gather(2, pair[..., None])[..., 0]
    live = torch.arange(N1, device=edges.device)[None, :] + 1 < lengths[:, None]
    return torch.where(live, picked, torch.zeros_like(picked)).sum(1)


def loss_augmented(edges: torch.Tensor, tags: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The potentials of s(z) + Delta(z, tags) (the hinge's and the softmax-margin's): phi + Hamming, [a != y_{n+1}]
    on every edge's next label and [c != y_0] on the first edge's previous label (a row of length 1 has no edge to
    carry its one position's term: the losses add it, :func:`_single`). Arguments as :func:`score` checks them."""
    B, N1, K, _ = edges.shape
    labels = torch.arange(K, device=edges.device)
    t = tags.clamp(0, K - 1).to(torch.int64)
    wrong_next = (labels[None, None, :] != t[:, 1:, None]).to(edges.dtype)          # (B, N-1, K)
    live = (torch.arange(N1, device=edges.device)[None, :] + 1 < lengths[:, None]).to(edges.dtype)
    aug = edges + (wrong_next * live[..., None])[..., None]
    first = (labels[None, :] != t[:, :1]).to(edges.dtype) * live[:, :1]            # (B, K)
    return torch.cat([aug[:, :1] + first[:, None, None, :], aug[:, 1:]], 1)


def crf_nll(edges, tags, lengths=None, kernels: str = "auto") -> torch.Tensor:
    """The CRF's negative log-likelihood log Z - s(tags) per row (B,)."""
    lengths = check_edges(edges, lengths, tags)
    return _log_partition(edges, lengths, kernels) - _score(edges, tags, lengths)


def hinge(edges, tags, lengths=None, kernels: str = "auto") -> torch.Tensor:
    """The structured hinge max_z [s(z) + Delta(z, tags)] - s(tags) per row (B,) (Hamming Delta), its gradient the
    loss-augmented labeling's edge indicators minus the gold ones."""
    lengths = check_edges(edges, lengths, tags)
    B, N1, K, _ = edges.shape
    if N1 == 0:
        return _single(edges, lengths, 1.0 if K > 1 else 0.0)
    aug = loss_augmented(edges, tags, lengths)
    best, _ = _decode(aug.detach(), lengths, kernels)
    return _score(aug, best, lengths) - _score(edges, tags, lengths) + _single(edges, lengths, 1.0 if K > 1 else 0.0)


def softmax_margin(edges, tags, lengths=None, kernels: str = "auto") -> torch.Tensor:
    """The softmax-margin loss log sum_z exp(s(z) + Delta(z, tags)) - s(tags) per row (B,) (Gimpel & Smith 2010)."""
    lengths = check_edges(edges, lengths, tags)
    K = edges.shape[2]
    # a row of length 1: log Z of its Delta alone, log(1 + (K - 1) e), in place of log K
    term = _single(edges, lengths, float(np.log1p((K - 1) * np.e) - np.log(K)))
    if edges.shape[1] == 0:
        return _log_partition(edges, lengths, kernels) + term
    return (_log_partition(loss_augmented(edges, tags, lengths), lengths, kernels) - _score(edges, tags, lengths)
            + term)


def _single(edges: torch.Tensor, lengths: torch.Tensor, value: float) -> torch.Tensor:
    """``value`` for the rows of length 1 (whose one position no edge carries), 0 elsewhere: (B,)."""
    return (lengths == 1).to(edges.dtype) * value


def _information(edges, lengths, other=None):
    """(H(p) (B,), KL(p || q) (B,) or None) by the normalized entropy semiring of
    :func:`ssvm_torch.chain.information.information_rows` (Li & Eisner 2009), the edges as its per-position moves
    with zero unaries and ends; a row p gives no labeling of is refused by name."""
    from .information import information_rows
    B, N1, K, _ = edges.shape
    zeros = edges.new_zeros(K)
    q = None if other is None else (other.new_zeros(B, N1 + 1, K), zeros, zeros, other, None)
    H, D = information_rows(edges.new_zeros(B, N1 + 1, K), lengths, zeros, zeros, edges, None, q)
    _fail_no_labeling(torch.where(torch.isnan(H), torch.full_like(H, NEG_INF), H), lengths)
    return H, D


def _check_other(edges: torch.Tensor, other) -> None:
    check(torch.is_tensor(other) and other.shape == edges.shape and other.dtype == edges.dtype
          and other.device == edges.device, "other_edges", f"potentials like edges ({tuple(edges.shape)}, "
          f"{edges.dtype}, {edges.device})", f"{tuple(other.shape)}, {other.dtype}, {other.device}"
          if torch.is_tensor(other) else type(other).__name__)
    refuse_bad_scores(other, "other_edges")


def entropy(edges: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """H(p) = -sum_z p(z) log p(z) per row (B,) (log K for a row of length 1, 0 for an empty one), differentiable
    (torch, any device): each term a non-negative entropy of a backward conditional, so float32 keeps its digits
    where log Z - E[s] would cancel (:mod:`ssvm_torch.chain.information`)."""
    lengths = check_edges(edges, lengths)
    return _information(edges, lengths)[0]


def kl(edges: torch.Tensor, other_edges: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """KL(p || q) per row (B,): p the CRF of ``edges``, q that of ``other_edges`` on the same rows; differentiable
    w.r.t. both; +inf where p gives weight to a labeling q forbids."""
    lengths = check_edges(edges, lengths)
    _check_other(edges, other_edges)
    return _information(edges, lengths, other_edges)[1]


def cross_entropy(edges: torch.Tensor, other_edges: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """H(p, q) = -sum_z p(z) log q(z) = H(p) + KL(p || q) per row (B,), p and q as in :func:`kl`."""
    lengths = check_edges(edges, lengths)
    _check_other(edges, other_edges)
    H, D = _information(edges, lengths, other_edges)
    return H + D


def sample(edges: torch.Tensor, lengths: torch.Tensor | None = None, n: int = 1, generator=None) -> torch.Tensor:
    """(B, n, N) int64: n exact samples of every row's CRF, -1 beyond its length (torch-struct's ``sample``): the
    chain layer's forward filtering, backward sampling (:func:`ssvm_torch.chain.information.sample_rows`, any device)
    with the edges as its per-position moves. No gradient."""
    from .checks import check_draws
    from .information import sample_rows
    lengths = check_edges(edges, lengths)
    check_draws(n, generator, edges.device)
    B, N1, K, _ = edges.shape
    zeros = torch.zeros(K, dtype=torch.float64, device=edges.device)
    draws, logz = sample_rows(zeros.new_zeros(B, N1 + 1, K), lengths, zeros, zeros, edges.detach().to(torch.float64),
                              None, n, generator)
    _fail_no_labeling(logz, lengths)
    return draws


def edges_from_hmm(transition: torch.Tensor, emission: torch.Tensor, init: torch.Tensor,
                   observations: torch.Tensor) -> torch.Tensor:
    """The edge potentials (B, N-1, K, K) of an HMM's log-probabilities (torch-struct's ``LinearChain.hmm``):
    transition (K, K) [next, prev], emission (V, K), init (K,), observations (B, N) in 0..V-1 (N >= 2). s(z) is then
    the joint log-probability log p(x, z)."""
    check(torch.is_tensor(emission) and emission.dim() == 2, "emission", "a (V, K) tensor",
          tuple(emission.shape) if torch.is_tensor(emission) else type(emission).__name__)
    V, K = emission.shape
    check(torch.is_tensor(transition) and transition.shape == (K, K), "transition", f"a ({K}, {K}) tensor",
          tuple(transition.shape) if torch.is_tensor(transition) else type(transition).__name__)
    check(torch.is_tensor(init) and init.shape == (K,), "init", f"a ({K},) tensor",
          tuple(init.shape) if torch.is_tensor(init) else type(init).__name__)
    check(torch.is_tensor(observations) and observations.dim() == 2 and observations.shape[1] >= 2
          and not observations.is_floating_point(), "observations", "a (B, N) integer tensor with N >= 2",
          f"{tuple(observations.shape)} {observations.dtype}" if torch.is_tensor(observations)
          else type(observations).__name__)
    if observations.numel() and not tracing():
        lo, hi = int(observations.min()), int(observations.max())
        check(lo >= 0 and hi < V, "observations", f"symbols in 0..{V - 1}", f"{lo}..{hi}")
    obs = emission[observations]                                              # (B, N, K)
    edges = transition[None, None] + obs[:, 1:, :, None]
    first = init[None, None, :] + obs[:, :1, :]                               # (B, 1, K) on the previous label
    return torch.cat([edges[:, :1] + first[:, :, None, :], edges[:, 1:]], 1)
