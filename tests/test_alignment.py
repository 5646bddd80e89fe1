"""The alignment layer (ssvm_torch/align/, nn/alignment.py) against enumeration of every monotone path on small
grids (global and local, ragged lengths, -inf moves): log Z, the best score and path, the marginals, the three
losses and their gradients; soft-DTW and DTW against their textbook recursions; path checks and conversions; and a
learned similarity that aligns warped sequences."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch import SSVMInputError
from ssvm_torch.align import (check_path, decode, log_partition, marginals, max_score, pairs_from_path, path_from_pairs,
                              sample)
from ssvm_torch.nn import MonotonicAlignment, from_similarity

MOVES = ((0, 0, 1), (1, 1, 1), (2, 1, 0))          # (move, di, dj)


def all_paths(n, m, local):
    """Every path of an (n, m) grid as a list of (i, j, move) (local: from any cell, ending anywhere, and [])."""
    out = []

    def extend(path):
        i, j, _ = path[-1]
        if local or (i, j) == (n - 1, m - 1):
            out.append(list(path))
        for mv, di, dj in MOVES:
            if i + di < n and j + dj < m:
                path.append((i + di, j + dj, mv))
                extend(path)
                path.pop()
    for i, j in ([(a, b) for a in range(n) for b in range(m)] if local else [(0, 0)]):
        extend([(i, j, 1)])
    return out + ([[]] if local else [])


def as_tensor(path, N, M):
    t = torch.full((N, M), -1, dtype=torch.int64)
    for i, j, mv in path:
        t[i, j] = mv
    return t


def batch(seed, dtype=torch.float64, forbid=False):
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(3, 4, 3, 3, generator=g, dtype=dtype)
    if forbid:
        S[torch.rand(S.shape, generator=g) < 0.2] = float("-inf")
        S[:, 0, 0, 1] = 0.0                             # keep a path into (0, 0)
        S[:, :, :, 2][:, 1:, 0] = 0.0                   # and down the first column, right along the last row
        S[:, 3, 1:, 0] = 0.0
        S[1, 1, 0, 2] = S[1, 1:, 0, 2][0]
    return S, torch.tensor([4, 2, 3]), torch.tensor([3, 3, 1])


def reference(S, n, m, local):
    """Per row: (paths, their scores) by enumeration."""
    out = []
    for b in range(S.shape[0]):
        P = all_paths(int(n[b]), int(m[b]), local)
        sc = torch.stack([sum((S[b, i, j, mv] for i, j, mv in p), S.new_zeros(())) for p in P])
        out.append((P, sc))
    return out


KERNELS = ["numba", "torch"]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("forbid", [False, True])
def test_log_partition_max_marginals_and_decode_equal_enumeration(local, forbid, kernels):
    S, n, m = batch(1 + forbid, forbid=forbid)
    lz, mx = log_partition(S, n, m, local, kernels), max_score(S, n, m, local, kernels)
    mu, best = marginals(S, n, m, local, kernels), decode(S, n, m, local, kernels)
    check_path(best, n, m, best.shape, local)
    for b, (P, sc) in enumerate(reference(S, n, m, local)):
        assert float(lz[b]) == pytest.approx(float(torch.logsumexp(sc, 0)), abs=1e-10)
        assert float(mx[b]) == pytest.approx(float(sc.max()), abs=1e-10)
        p = torch.softmax(sc, 0)
        expected = torch.zeros(4, 3, 3, dtype=S.dtype)
        for k, path in enumerate(P):
            for i, j, mv in path:
                expected[i, j, mv] += p[k]
        torch.testing.assert_close(mu[b], expected, rtol=0, atol=1e-10)
        decoded = sum((S[b, i, j, int(best[b, i, j])] for i in range(4) for j in range(3) if best[b, i, j] >= 0),
                      S.new_zeros(()))
        assert float(decoded) == pytest.approx(float(sc.max()), abs=1e-10)
    assert int((best[1, 2:] >= 0).sum()) == 0 and int((best[2, :, 1:] >= 0).sum()) == 0   # inside the lengths


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("loss", ["hinge", "crf", "softmax_margin"])
def test_losses_and_gradients_equal_enumeration(loss, local, kernels):
    S, n, m = batch(7)
    gold = decode(torch.randn(S.shape, dtype=S.dtype, generator=torch.Generator().manual_seed(3)), n, m, local)
    layer = MonotonicAlignment(loss, local=local, cost=0.7, kernels=kernels)
    S.requires_grad_(True)
    per_row = layer(S, gold, n, m, reduction="none")
    grad = torch.autograd.grad(per_row.sum(), S)[0]
    for b, (P, sc) in enumerate(reference(S.detach(), n, m, local)):
        cells = {(i, j) for i in range(4) for j in range(3) if gold[b, i, j] >= 0}
        s_gold = sum(float(S.detach()[b, i, j, int(gold[b, i, j])]) for i, j in cells)
        delta = torch.tensor([0.7 * len({(i, j) for i, j, _ in p} ^ cells) for p in P], dtype=S.dtype)
        if loss == "crf":
            value, weights = torch.logsumexp(sc, 0), torch.softmax(sc, 0)
        elif loss == "softmax_margin":
            value, weights = torch.logsumexp(sc + delta, 0), torch.softmax(sc + delta, 0)
        else:
            k = int((sc + delta).argmax())
            value, weights = (sc + delta)[k], torch.nn.functional.one_hot(torch.tensor(k), len(P)).to(S.dtype)
        assert float(per_row[b]) == pytest.approx(float(value) - s_gold, abs=1e-10)
        expected = torch.zeros(4, 3, 3, dtype=S.dtype)
        for w, path in zip(weights, P):
            for i, j, mv in path:
                expected[i, j, mv] += w
        for i, j in cells:
            expected[i, j, int(gold[b, i, j])] -= 1.0
        torch.testing.assert_close(grad[b], expected, rtol=0, atol=1e-9)
    if loss == "hinge":
        assert bool((per_row >= -1e-12).all())
    assert layer(S, gold, n, m, reduction="token_mean").item() == pytest.approx(float(per_row.sum() / n.sum()))


def test_soft_dtw_and_dtw_are_their_textbook_recursions():
    """-log Z of from_similarity(-cost) is soft-DTW with gamma = 1 (Cuturi & Blondel 2017), -max the DTW distance."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(7, 2)), rng.normal(size=(5, 2))
    cost = ((x[:, None] - y[None]) ** 2).sum(-1)
    R_soft, R_hard = np.full((8, 6), np.inf), np.full((8, 6), np.inf)
    R_soft[0, 0] = R_hard[0, 0] = 0.0
    for i in range(1, 8):
        for j in range(1, 6):
            prev = np.array([R_soft[i - 1, j], R_soft[i, j - 1], R_soft[i - 1, j - 1]])
            R_soft[i, j] = cost[i - 1, j - 1] - np.log(np.exp(-prev).sum())
            R_hard[i, j] = cost[i - 1, j - 1] + min(R_hard[i - 1, j], R_hard[i, j - 1], R_hard[i - 1, j - 1])
    scores = from_similarity(-torch.as_tensor(cost)[None])
    assert -float(log_partition(scores)[0]) == pytest.approx(R_soft[7, 5], abs=1e-10)
    assert -float(max_score(scores)[0]) == pytest.approx(R_hard[7, 5], abs=1e-10)
    nw = from_similarity(torch.as_tensor(-cost)[None], gap=0.5)
    assert torch.equal(nw[0, :, :, 0], torch.full((7, 5), -0.5, dtype=torch.float64))
    assert torch.equal(nw[0, :, :, 1], -torch.as_tensor(cost))


@pytest.mark.long
def test_soft_dtw_equals_pysdtw():
    """pysdtw (an independent torch soft-DTW, numba on CPU) gives the same value and gradient in the cost matrix
    (it rounds its tables to float32: compared at that precision)."""
    pysdtw = pytest.importorskip("pysdtw")
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 9, 2, generator=g, dtype=torch.float64)
    y = torch.randn(3, 6, 2, generator=g, dtype=torch.float64)
    cost = ((x[:, :, None] - y[:, None]) ** 2).sum(-1)
    refs, ours = [], []
    for out in (refs, ours):
        c = cost.clone().requires_grad_(True)
        if out is refs:
            value = pysdtw.SoftDTW(gamma=1.0, use_cuda=False).dtw_func(c, torch.tensor([[9, 6]] * 3), 1.0, 0.0)
        else:
            value = -log_partition(from_similarity(-c))
        value.sum().backward()
        out += [value.detach(), c.grad]
    torch.testing.assert_close(ours[0], refs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[1], refs[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("local", [False, True])
def test_the_two_kernels_agree_and_float32_and_padding_do_not_change_a_row(local):
    """On random 9 x 7 grids with ragged lengths: numba = torch (log Z, marginals, best path and score, to 1e-10 in
    float64), float32 within 1e-5, and a padded row = the row alone."""
    g = torch.Generator().manual_seed(11)
    S = torch.randn(5, 9, 7, 3, generator=g, dtype=torch.float64)
    n, m = torch.tensor([9, 4, 1, 6, 9]), torch.tensor([7, 7, 3, 1, 2])
    out = {}
    for k in KERNELS:
        out[k] = (log_partition(S, n, m, local, k), marginals(S, n, m, local, k), max_score(S, n, m, local, k),
                  decode(S, n, m, local, k))
    for a, b in zip(out["numba"], out["torch"]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    alone = [log_partition(S[b:b + 1, :int(n[b]), :int(m[b])], local=local) for b in range(5)]
    torch.testing.assert_close(out["numba"][0], torch.cat(alone), rtol=0, atol=1e-12)
    for k in KERNELS:
        torch.testing.assert_close(log_partition(S.float(), n, m, local, k), out[k][0].float(), rtol=1e-5, atol=1e-5)
        assert torch.equal(decode(S.float(), n, m, local, k), out[k][3])


@pytest.mark.parametrize("compiled", [True, False])
def test_paths_are_checked_and_converted(compiled):
    """Both checks (the compiled walk back along each path, the torch one every device runs) accept the paths
    and refuse each fault by name."""
    n, m = torch.tensor([3, 2]), torch.tensor([3, 3])
    pairs = [[(0, 0), (1, 1), (1, 2), (2, 2)], [(0, 0), (0, 1), (1, 2)]]
    path = path_from_pairs(pairs, 3, 3)
    assert path[0].tolist() == [[1, -1, -1], [-1, 1, 0], [-1, -1, 2]]
    check_path(path, n, m, path.shape, local=False, compiled=compiled)
    assert pairs_from_path(path) == [list(map(tuple, p)) for p in pairs]
    with pytest.raises(SSVMInputError, match=r"^pairs\[0\]\[1\]: expected one move from the pair before it"):
        path_from_pairs([[(0, 0), (2, 1)]])
    ok = [(0, 0, 1), (1, 1, 1), (1, 2, 0), (2, 2, 2)]

    def two_rows(row0, row1=((0, 0, 1), (0, 1, 0), (1, 2, 1))):
        return torch.stack([as_tensor(row0, 3, 3), as_tensor(row1, 3, 3)])
    bad = {
        "gap": two_rows([(0, 0, 1), (2, 2, 1)]),
        "not from (0, 0)": two_rows([(1, 1, 1), (2, 2, 1)]),
        "short of the end": two_rows([(0, 0, 1), (1, 1, 1)]),
        "past the lengths": two_rows(ok, [(0, 0, 1), (1, 1, 1), (2, 2, 1)]),
        "a move from off the path": two_rows([(0, 0, 1), (1, 1, 1), (1, 2, 0), (2, 2, 0)]),
        "a move that is not one": two_rows([(0, 0, 1), (1, 1, 1), (1, 2, 0), (2, 2, 3)]),
    }
    for name, p in bad.items():
        with pytest.raises(SSVMInputError, match=r"^path: expected one path from \(0, 0\)"):
            check_path(p, n, m, p.shape, local=False, compiled=compiled)
    two = path_from_pairs([[(0, 0), (0, 1)], [(0, 0)]], 3, 3)
    two[0, 2, 2] = 1                                                      # a second local path in row 0
    with pytest.raises(SSVMInputError, match=r"^path: expected a local path \(or none\)"):
        check_path(two, n, m, two.shape, local=True, compiled=compiled)
    check_path(torch.full((2, 3, 3), -1), n, m, (2, 3, 3), local=True, compiled=compiled)   # empty local paths
    with pytest.raises(SSVMInputError, match=r"^path: expected an integer tensor \(B, N, M\)"):
        check_path(torch.zeros(2, 3, 3), n, m, (2, 3, 3), local=False, compiled=compiled)


@pytest.mark.parametrize("local", [False, True])
def test_the_two_path_checks_agree_on_corrupted_paths(local):
    """The compiled and the torch check accept and refuse the same rows: 400 decoded paths of ragged 5 x 4 grids,
    each with one to three cells set to a random value in -1..3 (or left whole), checked row by row."""
    g = torch.Generator().manual_seed(7)
    rng = np.random.default_rng(7)
    S = torch.randn(400, 5, 4, 3, generator=g, dtype=torch.float64)
    n, m = torch.randint(1, 6, (400,), generator=g), torch.randint(1, 5, (400,), generator=g)
    paths = decode(S, n, m, local)
    verdicts = []
    for b in range(400):
        p = paths[b:b + 1].clone()
        for _ in range(rng.integers(0, 4)):
            p[0, rng.integers(5), rng.integers(4)] = int(rng.integers(-1, 4))
        outcome = []
        for compiled in (True, False):
            try:
                check_path(p, n[b:b + 1], m[b:b + 1], p.shape, local, compiled=compiled)
                outcome.append(True)
            except SSVMInputError:
                outcome.append(False)
        assert outcome[0] == outcome[1], (b, p, int(n[b]), int(m[b]))
        verdicts.append(outcome[0])
    assert 50 < sum(verdicts) < 350                      # both kinds of rows were met


def test_bad_scores_and_options_are_refused_by_name():
    S, n, m = batch(2)
    layer = MonotonicAlignment()
    gold = decode(S, n, m)
    for bad, msg in ((S[..., :2], r"^scores: expected a float tensor \(B, N, M, 3\)"),
                     (S.masked_fill(S > 1, float("nan")), r"^scores: expected finite scores or -inf"),
                     (S.long(), r"^scores: expected a float tensor")):
        with pytest.raises(SSVMInputError, match=msg):
            layer(bad, gold, n, m)
    with pytest.raises(SSVMInputError, match=r"^x_lengths: expected lengths in \[1, 4\]"):
        layer(S, gold, torch.tensor([5, 1, 1]), m)
    blocked = S.clone()
    blocked[0, 3, 2] = float("-inf")                                      # the last cell cannot be entered
    with pytest.raises(SSVMInputError, match=r"^scores: expected at least one path of finite score per row, got rows "
                                             r"\[0\]"):
        log_partition(blocked, n, m)
    through = S.clone()
    through[0, 0, 0, 1] = float("-inf")
    through[0, 0, 0, 0] = 0.0
    with pytest.raises(SSVMInputError, match=r"^path: expected paths whose every move has a finite score"):
        MonotonicAlignment("crf")(through, gold, n, m)
    with pytest.raises(SSVMInputError, match=r"^n: expected an int >= 1, got 0"):
        layer.sample(S, n, m, n=0)
    with pytest.raises(SSVMInputError, match=r"^generator: expected a torch.Generator or None"):
        layer.sample(S, n, m, n=2, generator=0)
    for kwargs, msg in ((dict(loss="nll"), r"^loss: expected one of"), (dict(cost=0.0), r"^cost: expected a finite"),
                        (dict(local=1), r"^local: expected True or False"), (dict(kernels="c"), r"^kernels: expected")):
        with pytest.raises(SSVMInputError, match=msg):
            MonotonicAlignment(**kwargs)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("local", [False, True])
def test_kl_and_cross_entropy_equal_enumeration(local, kernels):
    """KL(p || q) and H(p, q) of two score tensors (each with forbidden moves) equal sum_P p(P) log p(P) / q(P) and
    -sum_P p(P) log q(P) over every path, on either kernel, through the layer too; their gradients w.r.t. both pass
    gradcheck; KL(p || p) = 0; a move q forbids and p takes gives +inf; a mismatched q is refused by name."""
    from ssvm_torch.align import cross_entropy, kl
    S, n, m = batch(3, forbid=True)
    Q = torch.where(torch.isinf(S), S, batch(4)[0])  # q forbids what p forbids: a finite KL
    Q[0, 1, 1, 0] = float("-inf")                    # and, in row 0, a move p may take: KL +inf
    refs_p, refs_q = reference(S, n, m, local), reference(Q, n, m, local)
    want_kl, want_ce = [], []
    for (_, sp), (_, sq) in zip(refs_p, refs_q):
        lp, lq = torch.log_softmax(sp, 0), torch.log_softmax(sq, 0)
        p = lp.exp()
        want_ce.append(-torch.where(p > 0, p * lq, torch.zeros(())).sum())
        want_kl.append(torch.where(p > 0, p * (lp - lq), torch.zeros(())).sum())
    layer = MonotonicAlignment(local=local, kernels=kernels)
    for got, want in ((kl(S, Q, n, m, local, kernels), want_kl), (cross_entropy(S, Q, n, m, local, kernels), want_ce),
                      (layer.kl(S, Q, n, m), want_kl), (layer.cross_entropy(S, Q, n, m), want_ce)):
        torch.testing.assert_close(got, torch.stack(want), rtol=0, atol=1e-10)
    torch.testing.assert_close(kl(S, S, n, m, local, kernels), torch.zeros(3, dtype=S.dtype), rtol=0, atol=1e-12)
    H = layer.entropy(S, n, m)
    torch.testing.assert_close(layer.cross_entropy(S, Q, n, m), H + layer.kl(S, Q, n, m), rtol=0, atol=1e-10)
    assert torch.isfinite(torch.stack(want_kl)).tolist() == [False, True, True]
    a, b = S.clone().requires_grad_(), Q.clone().requires_grad_()
    for f in (kl, cross_entropy) if kernels == "torch" else ():    # p's gradient takes the torch path anyway
        torch.autograd.gradcheck(lambda x, y: f(x, y, n, m, local, kernels)[1:], (a, b))
    b = Q.clone().requires_grad_()                   # q alone differentiable: the compiled kernels serve p
    layer.kl(S, b, n, m)[1:].sum().backward()
    assert bool(torch.isfinite(b.grad).all())
    with pytest.raises(SSVMInputError, match=r"^other_scores: expected a tensor of the scores' shape"):
        layer.kl(S, Q[:2], n, m)
    with pytest.raises(SSVMInputError, match=r"^other_scores: expected finite scores or -inf"):
        layer.cross_entropy(S, Q.masked_fill(Q > 1, float("nan")), n, m)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("local", [False, True])
def test_mbr_decode_minimises_the_expected_loss_over_every_path(local, kernels):
    """decode(mbr=True) is a path of least E_p[Delta(P, P*)] among every path of finite score (enumerated, with
    forbidden moves), and mbr with nbest=3 the three least, in order; Delta the cells in one path and not the
    other (the losses' Delta)."""
    S, n, m = batch(6, forbid=True)
    layer = MonotonicAlignment(local=local, kernels=kernels)
    best, three = layer.decode(S, n, m, mbr=True), layer.decode(S, n, m, mbr=True, nbest=3)
    assert torch.equal(three[:, 0], best)
    for b, (paths, sc) in enumerate(reference(S, n, m, local)):
        p = torch.softmax(sc, 0)
        cells = [{(i, j) for i, j, _ in path} for path in paths]
        risk = torch.tensor([sum(float(p[k]) * len(c ^ other) for k, other in enumerate(cells)) for c in cells],
                            dtype=torch.float64)
        risk[~torch.isfinite(sc)] = float("inf")                   # outside the model's support
        keys = [tuple(as_tensor(path, 4, 3).flatten().tolist()) for path in paths]
        got = [risk[keys.index(tuple(t.flatten().tolist()))] for t in three[b] if bool((t >= 0).any()) or local]
        assert float(got[0]) == pytest.approx(float(risk.min()), abs=1e-9)
        torch.testing.assert_close(torch.stack(got[:3]), risk.sort().values[:3], rtol=0, atol=1e-9)
    with pytest.raises(SSVMInputError, match=r"^mbr: expected True or False"):
        layer.decode(S, n, m, mbr=1)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kernels", KERNELS)
def test_half_precision_scores_are_computed_in_float32(half, kernels):
    """Half-precision scores (a network under autocast) give what float32 gives on the same values: the three
    losses (float32), their gradients (in the scores' dtype), decode and marginals; from_similarity's too. As
    the other layers do (chain/ops.py, trees/checks.py): log Z over a few hundred moves overflows float16."""
    S, n, m = batch(3)
    S16 = S.to(half)
    ref = S16.float()
    gold = decode(ref, n, m)
    for loss in ("hinge", "crf", "softmax_margin"):
        layer = MonotonicAlignment(loss, kernels=kernels)
        a, b = S16.clone().requires_grad_(), ref.clone().requires_grad_()
        va, vb = layer(a, gold, n, m), layer(b, gold, n, m)
        va.backward(), vb.backward()
        assert va.dtype == torch.float32 and a.grad.dtype == half
        torch.testing.assert_close(va, vb, rtol=0, atol=0)
        torch.testing.assert_close(a.grad, b.grad.to(half), rtol=0, atol=0)
    layer = MonotonicAlignment(kernels=kernels)
    assert torch.equal(layer.decode(S16, n, m), layer.decode(ref, n, m))
    torch.testing.assert_close(layer.marginals(S16, n, m), layer.marginals(ref, n, m), rtol=0, atol=0)
    torch.testing.assert_close(layer.entropy(S16, n, m), layer.entropy(ref, n, m), rtol=0, atol=0)
    torch.testing.assert_close(layer.kl(S16, S16.flip(0), n, m), layer.kl(ref, ref.flip(0), n, m), rtol=0, atol=0)
    a = S16.clone().requires_grad_()
    layer.entropy(a, n, m).sum().backward()
    assert a.grad.dtype == half and bool(torch.isfinite(a.grad).all())
    sim = S[..., 1].to(half)
    for gap in (None, 0.5):
        torch.testing.assert_close(layer.log_partition(from_similarity(sim, gap), n, m),
                                   layer.log_partition(from_similarity(sim.float(), gap), n, m), rtol=0, atol=0)
    with pytest.raises(SSVMInputError, match=r"^similarity: expected finite values or -inf \(a forbidden cell\), "
                                             r"got NaN or \+inf"):
        from_similarity(sim.float().masked_fill(sim.float() > 1, float("nan")))


def test_a_learned_similarity_aligns_warped_sequences():
    """x (12 steps) and y are aligned by a random monotone path; y_j is the mean of the x_i aligned with it, seen
    through a different random projection, plus noise. A bilinear similarity x_i W y_j trained with the hinge
    recovers most held-out aligned pairs, where the untrained one does not (the warps leave some ties: where y_j
    averages two x steps, either may sit on a path of the same score)."""
    g = torch.Generator().manual_seed(0)
    F = 6
    A = torch.randn(F, F, generator=g, dtype=torch.float64)

    def pair():
        x = torch.randn(12, F, generator=g, dtype=torch.float64)
        pairs = [(0, 0)]
        while pairs[-1][0] < 11:
            i, j = pairs[-1]
            mv = int(torch.randint(0, 3, (1,), generator=g))
            pairs.append((i + (mv > 0), j + (mv < 2)))
        M = pairs[-1][1] + 1
        y = torch.stack([torch.stack([x[i] for i, c in pairs if c == j]).mean(0) for j in range(M)]) @ A
        return x, y + 0.1 * torch.randn(M, F, generator=g, dtype=torch.float64), pairs
    data = [pair() for _ in range(24)]
    W = torch.nn.Parameter(0.1 * torch.randn(F, F, generator=g, dtype=torch.float64))
    layer = MonotonicAlignment("hinge")

    def accuracy(items):
        right = total = 0
        for x, y, pairs in items:
            best = layer.decode(from_similarity((x @ W @ y.T)[None]))
            right += len(set(pairs_from_path(best)[0]) & set(pairs))
            total += len(pairs)
        return right / total
    before = accuracy(data[16:])
    opt = torch.optim.Adam([W], lr=0.05)
    for _ in range(30):
        for x, y, pairs in data[:16]:
            loss = layer(from_similarity((x @ W @ y.T)[None]), path_from_pairs([pairs], len(x), len(y)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    after = accuracy(data[16:])
    assert after > 0.85 and after > before + 0.5, (before, after)          # 0.21 -> 0.93 (seed 0)


@pytest.mark.parametrize("local", [False, True])
def test_the_torch_path_never_leaves_the_device(local):
    """The wavefront (every device's path), checked on CPU under host_guard: the three losses with their gradients,
    the marginals, entropy, KL and cross-entropy with theirs, the best path and samples make no NumPy call, no
    default-device factory and no host copy."""
    from ssvm_torch.devices import host_guard
    S, n, m = batch(5)
    gold = decode(S, n, m, local)
    with host_guard() as guard:
        for loss in ("hinge", "crf", "softmax_margin"):
            s = S.clone().requires_grad_(True)
            MonotonicAlignment(loss, local=local, kernels="torch")(s, gold, n, m).backward()
            assert s.grad is not None
        marginals(S, n, m, local, "torch")
        s, q = S.clone().requires_grad_(True), S.flip(0).clone().requires_grad_(True)
        layer = MonotonicAlignment(local=local, kernels="torch")
        (layer.entropy(s, n, m).sum() + layer.kl(s, q, n, m).sum() + layer.cross_entropy(s, q, n, m).sum()).backward()
        assert s.grad is not None and q.grad is not None
        best = decode(S, n, m, local, "torch")
        draws = sample(S, n, m, local, 5, generator=torch.Generator().manual_seed(1), kernels="torch")
    assert guard.host_copies == 0
    check_path(draws.reshape(15, 4, 3), n.repeat_interleave(5), m.repeat_interleave(5), (15, 4, 3), local)
    assert torch.equal(best, gold)


@pytest.mark.parametrize("kernels", KERNELS)
def test_an_empty_batch_and_one_cell_grids(kernels):
    """B = 0 gives empty results and a 0 loss (summed or averaged: not NaN) with an empty gradient; a 1 x 1 grid
    has one global path (its diagonal entry) and, locally, that cell or the empty path."""
    for local in (False, True):
        for reduction in ("sum", "mean", "token_mean"):
            E = torch.randn(0, 3, 2, 3, dtype=torch.float64, requires_grad=True)
            layer = MonotonicAlignment(kernels=kernels, local=local)
            loss = layer(E, torch.zeros(0, 3, 2, dtype=torch.long), reduction=reduction)
            loss.backward()
            assert float(loss) == 0.0 and E.grad.shape == E.shape
        assert log_partition(E, local=local, kernels=kernels).shape == (0,)
        assert decode(E, local=local, kernels=kernels).shape == (0, 3, 2)
    S = torch.tensor([[[[0.3, -0.5, 0.9]]], [[[0.1, 0.2, 0.4]]]], dtype=torch.float64).expand(2, 1, 1, 3).clone()
    S[1, 0, 0, 1] = -0.2
    torch.testing.assert_close(log_partition(S, kernels=kernels), S[:, 0, 0, 1])
    torch.testing.assert_close(log_partition(S, local=True, kernels=kernels), torch.log1p(S[:, 0, 0, 1].exp()))
    assert decode(S, local=True, kernels=kernels).flatten().tolist() == [-1, -1]     # -0.5, -0.2 <= 0: empty
    assert decode(S, kernels=kernels).flatten().tolist() == [1, 1]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("local", [False, True])
def test_entropy_and_samples_equal_enumeration(local, kernels):
    """The entropy (both kernels) equals -sum p log p over every path, its gradient (torch path) passes gradcheck;
    20,000 samples of 3 x 3 grids are valid paths whose frequencies match the paths' probabilities (within 4.5
    standard deviations each) and are reproducible from a generator, on either kernel."""
    from ssvm_torch.align import entropy
    S, n, m = batch(9)
    S, n, m = S[:, :3], torch.tensor([3, 2, 3]), torch.tensor([3, 3, 1])
    refs = reference(S, n, m, local)
    expected = torch.stack([-(torch.softmax(sc, 0) * torch.log_softmax(sc, 0)).sum() for _, sc in refs])
    torch.testing.assert_close(entropy(S, n, m, local, kernels), expected, rtol=0, atol=1e-10)
    torch.autograd.gradcheck(lambda s: entropy(s, n, m, local), (S.clone().requires_grad_(True),))
    draws = sample(S, n, m, local, 20000, generator=torch.Generator().manual_seed(0), kernels=kernels)
    again = sample(S, n, m, local, 20000, generator=torch.Generator().manual_seed(0), kernels=kernels)
    assert torch.equal(draws, again) and draws.shape == (3, 20000, 3, 3)          # batch-first, as the n best
    for b, (P, sc) in enumerate(refs):
        check_path(draws[b], n[b].repeat(20000), m[b].repeat(20000), draws[b].shape, local)
        p = torch.softmax(sc, 0)
        keys = [tuple(as_tensor(path, 3, 3).flatten().tolist()) for path in P]
        counts = {}
        for row in draws[b].reshape(20000, -1).tolist():
            counts[tuple(row)] = counts.get(tuple(row), 0) + 1
        assert set(counts) <= set(keys)
        for key, pk in zip(keys, p.tolist()):
            sd = (20000 * pk * (1 - pk)) ** 0.5
            assert abs(counts.get(key, 0) - 20000 * pk) <= 4.5 * sd + 1, (b, key, counts.get(key, 0), 20000 * pk)


def test_docs_nn_alignment_example_runs():
    """docs/nn.md's MonotonicAlignment example, as written (every call of the layer in it): it runs, and its
    backward left a finite gradient on the similarity."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "nn.md").read_text()
    at = text.index("from ssvm_torch.nn import MonotonicAlignment, from_similarity")
    block = text[text.rfind("```python", 0, at) + len("```python"):text.index("```", at)]
    names = {}
    exec(compile(block, "docs/nn.md", "exec"), names)
    assert names["sim"].grad is not None and bool(torch.isfinite(names["sim"].grad).all())
