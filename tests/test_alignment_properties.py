"""Property tests of the MonotonicAlignment layer on inputs drawn by hypothesis: grids of 1-3 x 1-3 cells under
ragged lengths, ties (integer scores), a share of -inf moves up to all of them (rows without a path), global and
local paths, the three losses at two costs. Every operation against enumeration of every path
(tests/test_alignment.py's enumerator), on the numba and the torch path. The fixed-seed tests kept a path into
every grid; a row without one sent the compiled best-path kernel's walk back past the grid's first column, writing
outside the path array (heap corruption: glibc aborted the process; an IndexError under NUMBA_BOUNDSCHECK=1)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import MonotonicAlignment
from test_alignment import all_paths

NEG = float("-inf")


@st.composite
def grids(draw):
    """(scores (B, N, M, 3), x_lengths, y_lengths, loss, local, cost, a seed)."""
    B, N, M = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    shape = (B, N, M, 3)
    S = torch.tensor(rng.integers(-2, 3, size=shape).astype(float) if draw(st.booleans())
                     else rng.normal(size=shape) * 2)
    S[torch.from_numpy(rng.random(shape) < draw(st.sampled_from([0.0, 0.2, 0.5, 1.0])))] = NEG
    return (S, torch.from_numpy(rng.integers(1, N + 1, size=B)), torch.from_numpy(rng.integers(1, M + 1, size=B)),
            draw(st.sampled_from(["hinge", "crf", "softmax_margin"])), draw(st.booleans()),
            draw(st.sampled_from([1.0, 0.5])), int(rng.integers(2 ** 31)))


def _index(paths: list, t: torch.Tensor) -> int:
    """The position in ``paths`` (lists of (i, j, move)) of the path tensor t (N, M)."""
    cells = sorted((i, j, int(t[i, j])) for i, j in zip(*np.nonzero(t.numpy() >= 0)))
    return next(k for k, p in enumerate(paths) if sorted(p) == cells)


def _log_sum_exp(s) -> float:
    return float(np.logaddexp.reduce(s[np.isfinite(s)]))


ONE_CELL_NO_PATH = (torch.tensor([[[[4.0, NEG, 0.5]]]], dtype=torch.float64), torch.tensor([1]), torch.tensor([1]),
                    "hinge", False, 1.0, 0)


@given(grids(), st.sampled_from(["numba", "torch"]))
@example(ONE_CELL_NO_PATH, "numba").via("a grid without a path: the compiled walk back wrote outside its array")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_equals_enumeration(grid, kernels):
    """decode (a best path, any of the tied), log Z, the move marginals, entropy, the 3 best paths' scores, exact
    samples (paths of finite score) and the three losses of a feasible gold: equal to enumeration; a row without a
    path of finite score refused by every operation."""
    S, n, m, loss, local, cost, seed = grid
    B, N, M, _ = S.shape
    layer = MonotonicAlignment(loss, local=local, cost=cost, kernels=kernels)
    rows = []
    for b in range(B):
        paths = all_paths(int(n[b]), int(m[b]), local)
        rows.append((paths, np.array([sum((float(S[b, i, j, mv]) for i, j, mv in p), 0.0) for p in paths])))
    if any(not np.isfinite(s).any() for _, s in rows):
        for operation in (layer.decode, layer.log_partition, layer.marginals, layer.entropy,
                          lambda S, n, m: layer.decode(S, n, m, nbest=2), lambda S, n, m: layer.sample(S, n, m, n=2)):
            with pytest.raises(SSVMInputError, match="at least one path of finite score"):
                operation(S, n, m)
        return
    with torch.no_grad():
        best, logz, marginals, entropy = (layer.decode(S, n, m), layer.log_partition(S, n, m),
                                          layer.marginals(S, n, m), layer.entropy(S, n, m))
        nbest, samples = layer.decode(S, n, m, nbest=3), layer.sample(S, n, m, n=4, generator=torch.Generator())
    for b, (paths, s) in enumerate(rows):
        assert s[_index(paths, best[b])] == pytest.approx(s.max(), abs=1e-9)
        ref_logz = _log_sum_exp(s)
        assert float(logz[b]) == pytest.approx(ref_logz, abs=1e-8)
        p = np.exp(s - ref_logz)
        ref_marginals = np.zeros((N, M, 3))
        for weight, path in zip(p, paths):
            for i, j, mv in path:
                ref_marginals[i, j, mv] += weight
        assert np.abs(marginals[b].numpy() - ref_marginals).max() < 1e-8
        support = p > 0
        assert float(entropy[b]) == pytest.approx(-(p[support] * np.log(p[support])).sum(), abs=1e-8)
        top = np.sort(s[np.isfinite(s)])[::-1][:3]
        ranks = [t for j, t in enumerate(nbest[b]) if bool((t >= 0).any()) or (local and j < len(top))]  # [] local
        assert np.allclose([s[_index(paths, t)] for t in ranks], top, atol=1e-9)
        assert all(np.isfinite(s[_index(paths, t)]) for t in samples[b])
    rng = np.random.default_rng(seed)
    gold = torch.full((B, N, M), -1)
    for b, (paths, s) in enumerate(rows):
        for i, j, mv in paths[rng.choice(np.flatnonzero(np.isfinite(s)))]:
            gold[b, i, j] = mv
    losses = layer(S, gold, n, m, reduction="none").detach()
    for b, (paths, s) in enumerate(rows):
        cells = {(int(i), int(j)) for i, j in zip(*np.nonzero(gold[b].numpy() >= 0))}
        delta = np.array([cost * len({(i, j) for i, j, _ in p} ^ cells) for p in paths])
        top = {"crf": _log_sum_exp(s), "hinge": (s + delta).max(), "softmax_margin": _log_sum_exp(s + delta)}[loss]
        assert float(losses[b]) == pytest.approx(top - s[_index(paths, gold[b])], abs=1e-8)
