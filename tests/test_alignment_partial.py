"""Partially observed alignment paths (ssvm_torch/align/partial.py): the allowed moves are exactly the paths that
agree with the observed cells, and the three losses, their gradients and constrained decoding equal enumeration
of every path of small grids."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch import SSVMInputError
from ssvm_torch.align.partial import UNOBSERVED, VISITED, allowed_moves
from ssvm_torch.nn import MonotonicAlignment

from test_alignment import KERNELS, all_paths, as_tensor


def agrees(path, part) -> bool:
    """Whether an enumerated path (a list of (i, j, move)) agrees with a partial path (N, M)."""
    moves = {(i, j): mv for i, j, mv in path}
    for (i, j), v in np.ndenumerate(part):
        if v == -1 and (i, j) in moves or v >= 0 and (i, j) not in moves:
            return False
        if 0 <= v <= 2 and moves[(i, j)] != v:
            return False
    return True


def random_partial(rng, n, m, N, M, from_gold=True):
    """A partial path of an (n, m) grid padded to (N, M): a random gold path's cells observed with probability 0.5
    (an on cell with its move or as VISITED), or (``from_gold=False``) random statuses that may admit no path."""
    part = np.full((N, M), UNOBSERVED, dtype=np.int64)
    if from_gold:
        paths = all_paths(n, m, False)
        gold = as_tensor(paths[rng.integers(len(paths))], n, m).numpy()
    for i in range(n):
        for j in range(m):
            if rng.random() < 0.5:
                continue
            if from_gold:
                v = gold[i, j]
                part[i, j] = VISITED if v >= 0 and rng.random() < 0.5 else v
            else:
                part[i, j] = rng.choice([-1, -1, 0, 1, 2, VISITED])
    return part


def test_the_allowed_moves_are_the_paths_that_agree():
    """On every grid up to 4 x 4, for partial paths drawn from a gold path and arbitrary ones: a path takes only
    allowed moves exactly when it agrees with the observed cells."""
    rng = np.random.default_rng(0)
    for n in range(1, 5):
        for m in range(1, 5):
            paths = all_paths(n, m, False)
            for trial in range(12):
                part = random_partial(rng, n, m, n, m, from_gold=trial % 2 == 0)
                allowed = allowed_moves(torch.as_tensor(part)[None])[0]
                for p in paths:
                    assert all(bool(allowed[i, j, mv]) for i, j, mv in p) == agrees(p, part), (n, m, part, p)


def enumerated_losses(S, part, n, m, cost):
    """(crf, hinge, softmax_margin) of one row by enumeration: C the paths that agree, Delta_O the cells of a path
    whose observed status it breaks."""
    paths = all_paths(n, m, False)
    s = torch.stack([sum((S[i, j, mv] for i, j, mv in p), S.new_zeros(())) for p in paths])
    in_c = torch.tensor([agrees(p, part) for p in paths])
    delta = []
    for p in paths:
        cells = {(i, j) for i, j, _ in p}
        delta.append(sum(1 for (i, j), v in np.ndenumerate(part[:n, :m])
                         if v != UNOBSERVED and ((i, j) in cells) != (v >= 0)))
    aug = s + cost * torch.tensor(delta, dtype=s.dtype)
    s_c = s.masked_fill(~in_c, float("-inf"))
    return (torch.logsumexp(s, 0) - torch.logsumexp(s_c, 0), aug.max() - s_c.max(),
            torch.logsumexp(aug, 0) - torch.logsumexp(s_c, 0))


@pytest.mark.parametrize("kernels", KERNELS)
def test_the_three_losses_and_constrained_decoding_equal_enumeration(kernels):
    """Ragged rows, forbidden moves, half the cells observed: each loss against enumeration (1e-10), gradcheck of
    the CRF and softmax-margin losses (torch path), decode(observed=) the best path of C, mbr given the
    observations C's least expected loss."""
    rng = np.random.default_rng(1)
    g = torch.Generator().manual_seed(1)
    S = torch.randn(4, 4, 3, 3, generator=g, dtype=torch.float64)
    S[0, 2, 1, 0] = float("-inf")
    n, m = torch.tensor([4, 3, 2, 4]), torch.tensor([3, 3, 3, 2])
    part = torch.stack([torch.as_tensor(random_partial(rng, int(n[b]), int(m[b]), 4, 3)) for b in range(4)])
    part[0, 2, 1] = UNOBSERVED
    for loss, k in (("crf", 0), ("hinge", 1), ("softmax_margin", 2)):
        layer = MonotonicAlignment(loss, cost=0.7, kernels=kernels)
        got = layer(S, part, n, m, reduction="none")
        want = torch.stack([enumerated_losses(S[b], part[b].numpy(), int(n[b]), int(m[b]), 0.7)[k] for b in range(4)])
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
        if loss != "hinge":
            torch.autograd.gradcheck(lambda x: MonotonicAlignment(loss, cost=0.7, kernels="torch")(
                x, part, n, m, reduction="none"), (S.clone().requires_grad_(),))
    layer = MonotonicAlignment(kernels=kernels)
    best, mbr = layer.decode(S, n, m, observed=part), layer.decode(S, n, m, observed=part, mbr=True)
    for b in range(4):
        paths = [p for p in all_paths(int(n[b]), int(m[b]), False) if agrees(p, part[b].numpy())]
        s = torch.stack([sum((S[b, i, j, mv] for i, j, mv in p), S.new_zeros(())) for p in paths])
        assert torch.equal(best[b, :int(n[b]), :int(m[b])], as_tensor(paths[int(s.argmax())], int(n[b]), int(m[b])))
        p = torch.softmax(s, 0)
        cells = [{(i, j) for i, j, _ in q} for q in paths]
        risk = torch.tensor([sum(float(p[k]) * len(c ^ o) for k, o in enumerate(cells)) for c in cells],
                            dtype=torch.float64)
        chosen = cells[[tuple(as_tensor(q, 4, 3).flatten().tolist()) for q in paths].index(
            tuple(mbr[b].flatten().tolist()))]
        assert sum(float(p[k]) * len(chosen ^ o) for k, o in enumerate(cells)) == pytest.approx(float(risk.min()),
                                                                                                 abs=1e-9)


def test_complete_and_empty_observations():
    """A partial path that observes every cell gives the complete path's loss; one that observes nothing gives 0,
    for the three losses."""
    g = torch.Generator().manual_seed(2)
    S = torch.randn(2, 4, 3, 3, generator=g, dtype=torch.float64)
    gold = MonotonicAlignment().decode(S + torch.randn(S.shape, generator=g, dtype=torch.float64))
    complete = gold.clone()                                 # every cell observed: C is the gold path alone
    complete[1, 0, 0] = VISITED                               # its first cell without its move: the same C
    nothing = torch.full_like(gold, UNOBSERVED)
    for loss in ("crf", "hinge", "softmax_margin"):
        layer = MonotonicAlignment(loss)
        torch.testing.assert_close(layer(S, complete, reduction="none"), layer(S, gold, reduction="none"),
                                   rtol=0, atol=1e-10)
        torch.testing.assert_close(layer(S, nothing, reduction="none"), torch.zeros(2, dtype=S.dtype), rtol=0,
                                   atol=1e-12)


def test_partial_paths_are_refused_by_name():
    S = torch.randn(2, 3, 3, 3)
    part = torch.full((2, 3, 3), UNOBSERVED)
    with pytest.raises(SSVMInputError, match=r"^path: expected a complete path for a local layer"):
        MonotonicAlignment(local=True)(S, part)
    bad = part.clone()
    bad[1, 2, 0] = 5
    with pytest.raises(SSVMInputError, match=r"^path: expected -2 \(unobserved\).* got 5 at row 1, cell \(2, 0\)"):
        MonotonicAlignment()(S, bad)
    outside = part.clone()
    outside[0, 2, 2] = VISITED
    with pytest.raises(SSVMInputError, match=r"got 3 at row 0, cell \(2, 2\)"):
        MonotonicAlignment()(S, outside, torch.tensor([2, 3]), torch.tensor([3, 3]))
    crossing = part.clone()
    crossing[0, 0, 2] = VISITED                               # (0, 2) and (2, 0): no monotone path visits both
    crossing[0, 2, 0] = VISITED
    for loss in ("crf", "hinge", "softmax_margin"):
        with pytest.raises(SSVMInputError, match=r"^path: expected at least one path of finite score per row, got "
                                                 r"rows \[0\] whose observed cells no path of finite score agrees"):
            MonotonicAlignment(loss)(S, crossing)
    with pytest.raises(SSVMInputError, match=r"^observed: expected at least one path .* rows \[0\]"):
        MonotonicAlignment().decode(S, observed=crossing)
