"""ssvm_torch.nn: structured hinge (chain, tree) and the torch-struct CRF wrapper against brute-force
enumeration, their gradients against the brute-force subgradient, and torch-struct's pitfalls."""
import itertools

import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import (ChainSSVMHead, TreeSSVMHead, chain_crf_nll, chain_hinge, chain_log_partition,
                           chain_marginals, chain_score, tree_hinge, tree_score)


def random_chains(seed, B=5, T=5, K=3, lengths=None, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths if lengths is not None else [T, 1, 3, 2, 4][:B])
    B = len(lengths)
    unary = torch.randn(B, T, K, generator=g, dtype=dtype)
    first, last = torch.randn(K, generator=g, dtype=dtype), torch.randn(K, generator=g, dtype=dtype)
    trans = torch.randn(K, K, generator=g, dtype=dtype)
    gt = torch.full((B, T), -1, dtype=torch.int64)
    for b, L in enumerate(lengths.tolist()):
        gt[b, :L] = torch.randint(K, (L,), generator=g)
    return unary, lengths, first, last, trans, gt


def seq_score(U, first, last, trans, y):
    s = first[y[0]] + last[y[-1]] + sum(U[t, y[t]] for t in range(len(y)))
    return s + sum(trans[y[t + 1], y[t]] for t in range(len(y) - 1))


def brute_hinge(unary, lengths, first, last, trans, gt):
    """(H_i, argmax labeling, runner-up margin) by enumerating all K^T labelings."""
    K = unary.shape[2]
    out = []
    for b, L in enumerate(lengths.tolist()):
        yt = gt[b, :L].tolist()
        vals = []
        for y in itertools.product(range(K), repeat=L):
            loss = sum(a != c for a, c in zip(y, yt)) / L
            vals.append((float(loss + seq_score(unary[b], first, last, trans, y)), y))
        vals.sort(reverse=True)
        gt_s = float(seq_score(unary[b], first, last, trans, yt))
        out.append((vals[0][0] - gt_s, vals[0][1], vals[0][0] - vals[1][0] if len(vals) > 1 else 1.0))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_chain_hinge_equals_brute_force_and_its_gradient_the_subgradient(seed):
    unary, lengths, first, last, trans, gt = random_chains(seed, K=3 + seed % 2)
    ref = brute_hinge(unary, lengths, first, last, trans, gt)
    params = [t.clone().requires_grad_(True) for t in (unary, first, last, trans)]
    H = chain_hinge(params[0], lengths, *params[1:], gt)
    torch.testing.assert_close(H, torch.tensor([r[0] for r in ref], dtype=H.dtype), rtol=0, atol=1e-12)
    assert bool((H >= -1e-12).all())
    weights = torch.randn(len(lengths), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    grads = torch.autograd.grad((H * weights).sum(), params)
    # brute-force subgradient: statistics of the argmax minus those of the ground truth, weighted
    K = unary.shape[2]
    expect = [torch.zeros_like(t) for t in (unary, first, last, trans)]
    for b, L in enumerate(lengths.tolist()):
        assert ref[b][2] > 1e-9                        # away from ties for these seeds
        for y, sign in ((ref[b][1], 1.0), (gt[b, :L].tolist(), -1.0)):
            c = sign * float(weights[b])
            for t in range(L):
                expect[0][b, t, y[t]] += c
            expect[1][y[0]] += c
            expect[2][y[-1]] += c
            for t in range(L - 1):
                expect[3][y[t + 1], y[t]] += c
    for g, e in zip(grads, expect):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    assert K >= 3


def test_chain_hinge_gradcheck_away_from_ties():
    unary, lengths, first, last, trans, gt = random_chains(3, K=3)
    inputs = tuple(t.clone().requires_grad_(True) for t in (unary, first, last, trans))
    # piecewise linear: finite differences agree with the analytic gradient inside a linear piece
    assert torch.autograd.gradcheck(lambda u, f, l, tr: chain_hinge(u, lengths, f, l, tr, gt), inputs, eps=1e-6,
                                    atol=1e-7)


def test_chain_hinge_at_a_tie_gives_a_valid_subgradient():
    K, T = 2, 3
    unary = torch.zeros(1, T, K, dtype=torch.float64, requires_grad=True)
    z = torch.zeros(K, dtype=torch.float64)
    gt = torch.zeros(1, T, dtype=torch.int64)
    lengths = torch.tensor([T])
    H = chain_hinge(unary, lengths, z, z, torch.zeros(K, K, dtype=torch.float64), gt)
    (g,) = torch.autograd.grad(H.sum(), unary)
    # every labeling but y_i ties at 1; g must satisfy H(u') >= H(u) + <g, u' - u> for any u'
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        u2 = torch.randn(1, T, K, generator=gen, dtype=torch.float64)
        H2 = chain_hinge(u2, lengths, z, z, torch.zeros(K, K, dtype=torch.float64), gt)
        assert float(H2) >= float(H.detach()) + float((g * u2).sum()) - 1e-12


def test_chain_hinge_refuses_bad_input_by_name():
    unary, lengths, first, last, trans, gt = random_chains(0)
    bad = gt.clone()
    bad[1, 3] = 0                                      # beyond length 1: must be -1
    with pytest.raises(SSVMInputError, match="gt: expected -1 beyond"):
        chain_hinge(unary, lengths, first, last, trans, bad)
    with pytest.raises(SSVMInputError, match="lengths: expected values in"):
        chain_hinge(unary, torch.tensor([6, 1, 3, 2, 4]), first, last, trans, gt)
    with pytest.raises(SSVMInputError, match="trans: expected a tensor of shape"):
        chain_hinge(unary, lengths, first, last, trans[:2], gt)


def test_chain_head_weights_round_trip_through_the_chain_model():
    from ssvm_torch.data.types import ChainData
    from ssvm_torch.models.chain import ChainModel
    torch.manual_seed(0)
    head = ChainSSVMHead(4, 3).double()
    for p in head.parameters():
        torch.nn.init.normal_(p)
    X = torch.randn(7, 4, dtype=torch.float64)
    data = ChainData(X, torch.tensor([0, 1, 2, 0, 1, 2, 0]), torch.tensor([0, 3, 4, 7]), 3)
    w = head.to_w()
    pred = ChainModel.for_data(data).predict_ragged(w, data)
    feats = torch.zeros(3, 3, 4, dtype=torch.float64)
    lengths = torch.tensor([3, 1, 3])
    for b, (s, e) in enumerate([(0, 3), (3, 4), (4, 7)]):
        feats[b, :e - s] = X[s:e]
    labels = head.decode(feats, lengths)
    assert labels[labels >= 0].tolist() == pred.tolist()
    other = ChainSSVMHead(4, 3).double()
    other.load_w(w)
    torch.testing.assert_close(other.to_w(), w)


def brute_log_partition(unary, lengths, first, last, trans):
    K = unary.shape[2]
    out = []
    for b, L in enumerate(lengths.tolist()):
        s = torch.stack([seq_score(unary[b], first, last, trans, y)
                         for y in itertools.product(range(K), repeat=L)])
        out.append(torch.logsumexp(s, 0))
    return torch.stack(out)


@pytest.mark.parametrize("lengths", [[5, 1, 3, 2, 4], [1, 1, 1], [2, 2], [4, 1]])
def test_crf_log_partition_and_marginals_equal_brute_force(lengths):
    """torch-struct through the wrapper: ragged batches, length-1 rows (which torch-struct alone
    scores 0) and all-length-1 batches (a math domain error in torch-struct alone)."""
    unary, lengths, first, last, trans, gt = random_chains(1, lengths=lengths)
    ref = brute_log_partition(unary, lengths, first, last, trans)
    torch.testing.assert_close(chain_log_partition(unary, lengths, first, last, trans), ref, rtol=0, atol=1e-10)
    mu = chain_marginals(unary, lengths, first, last, trans)
    T = unary.shape[1]
    valid = torch.arange(T)[None, :] < lengths[:, None]
    torch.testing.assert_close(mu.sum(2)[valid], torch.ones(int(valid.sum()), dtype=mu.dtype), rtol=0, atol=1e-10)
    assert float(mu[~valid].abs().sum()) == 0.0
    K = unary.shape[2]
    for b, L in enumerate(lengths.tolist()):             # brute-force marginals of one position
        ys = list(itertools.product(range(K), repeat=L))
        p = torch.softmax(torch.stack([seq_score(unary[b], first, last, trans, y) for y in ys]), 0)
        for k in range(K):
            pk = sum(float(p[n]) for n, y in enumerate(ys) if y[L - 1] == k)
            assert abs(float(mu[b, L - 1, k]) - pk) < 1e-10


def test_torch_struct_pitfalls_are_real_and_handled():
    """Pins what the wrapper exists for: torch-struct alone scores a length-1 chain log K whatever its
    unary (there is no edge to carry it) and fails on an all-length-1 batch."""
    import math

    from torch_struct import LinearChainCRF

    from ssvm_torch.nn import edge_potentials
    unary, lengths, first, last, trans, gt = random_chains(2, lengths=[3, 1])
    lp = edge_potentials(unary[:, :3], lengths, first, last, trans)
    z = LinearChainCRF(lp.clone(), lengths=lengths).partition
    assert abs(float(z[1]) - math.log(3)) < 1e-12                        # the unary of the length-1 row is lost
    ours = chain_log_partition(unary, lengths, first, last, trans)
    assert abs(float(ours[1]) - float(torch.logsumexp(unary[1, 0] + first + last, 0))) < 1e-12
    assert abs(float(ours[0]) - float(z[0])) < 1e-12                     # longer rows: torch-struct's value
    with pytest.raises(Exception):
        LinearChainCRF(torch.zeros(2, 0, 3, 3, dtype=torch.float64), lengths=torch.tensor([1, 1])).partition
    torch.testing.assert_close(chain_log_partition(unary[:, :1], torch.tensor([1, 1]), first, last, trans),
                               torch.logsumexp(unary[:, 0] + first + last, 1))


def test_crf_chunks_equal_one_call_and_the_nll_gradient_is_marginals_minus_truth():
    unary, lengths, first, last, trans, gt = random_chains(4, B=5, T=6, lengths=[6, 1, 2, 5, 3])
    whole = chain_log_partition(unary, lengths, first, last, trans)
    for chunk in (1, 2, 3):
        torch.testing.assert_close(chain_log_partition(unary, lengths, first, last, trans, chunk=chunk), whole,
                                   rtol=0, atol=1e-12)
    u = unary.clone().requires_grad_(True)
    nll = chain_crf_nll(u, lengths, first, last, trans, gt)
    assert bool((nll > 0).all())
    (g,) = torch.autograd.grad(nll.sum(), u)
    valid = gt >= 0
    onehot = torch.nn.functional.one_hot(gt.clamp(min=0), 3).to(g) * valid[..., None]
    torch.testing.assert_close(g, chain_marginals(unary, lengths, first, last, trans) - onehot, rtol=0, atol=1e-10)
    assert u.grad is None and not unary.requires_grad   # torch-struct never touched the caller's tensors


def random_tree(seed, B=3, J=3, H=4, W=4):
    g = torch.Generator().manual_seed(seed)
    parents = [-1, 0, 0][:J] if J <= 3 else [-1] + [j - 1 for j in range(1, J)]
    unary = torch.randn(B, J, H, W, generator=g, dtype=torch.float64)
    w_pair = torch.randn(J, 4, generator=g, dtype=torch.float64)
    w_pair[:, [1, 3]] = w_pair[:, [1, 3]].abs()
    rest = torch.randn(J, 2, generator=g, dtype=torch.float64)
    gt = torch.stack([torch.randint(H, (B, J), generator=g), torch.randint(W, (B, J), generator=g)], -1)
    return unary, w_pair, parents, rest, gt


@pytest.mark.parametrize("seed", range(3))
def test_tree_hinge_equals_brute_force_and_its_gradient_the_subgradient(seed):
    unary, w_pair, parents, rest, gt = random_tree(seed)
    B, J, H, W = unary.shape
    cells = [(r, c) for r in range(H) for c in range(W)]
    u = unary.clone().requires_grad_(True)
    wp = w_pair.clone().requires_grad_(True)
    Hs = tree_hinge(u, gt, wp, parents, rest, scale=2.0, radius=1)
    (gu, gw) = torch.autograd.grad(Hs.sum(), (u, wp))
    eu, ew = torch.zeros_like(unary), torch.zeros_like(w_pair)
    for b in range(B):
        best, arg = -float("inf"), None
        allp = torch.tensor(list(itertools.product(cells, repeat=J)))             # (P, J, 2)
        sc = tree_score(unary[b:b + 1].expand(len(allp), J, H, W), allp, w_pair, parents, rest, 2.0)
        loss = ((allp - gt[b]).abs().max(-1).values > 1).to(sc.dtype).mean(1)
        val = loss + sc
        top = torch.topk(val, 2).values
        assert float(top[0] - top[1]) > 1e-9
        arg = allp[int(val.argmax())]
        best = float(val.max())
        gt_s = float(tree_score(unary[b:b + 1], gt[b:b + 1], w_pair, parents, rest, 2.0))
        assert abs(float(Hs[b]) - (best - gt_s)) < 1e-10
        for y, sign in ((arg, 1.0), (gt[b], -1.0)):
            yb = y[None]
            for j in range(J):
                eu[b, j, y[j, 0], y[j, 1]] += sign
            g = torch.autograd.functional.jacobian(
                lambda w: tree_score(unary[b:b + 1], yb, w, parents, rest, 2.0).sum(), w_pair)
            ew += sign * g
    torch.testing.assert_close(gu, eu, rtol=0, atol=1e-12)
    torch.testing.assert_close(gw, ew, rtol=0, atol=1e-10)


def test_tree_head_keeps_the_quadratic_weights_positive_and_trains():
    unary, w_pair, parents, rest, gt = random_tree(5, B=4)
    head = TreeSSVMHead(parents, rest.float(), scale=2.0).double()
    with torch.no_grad():
        head.quad_raw.fill_(-50.0)                      # softplus underflows toward 0, never below
    assert bool((head.w_pair()[:, [1, 3]] >= 0).all())
    head = TreeSSVMHead(parents, rest.float(), scale=2.0).double()
    maps = unary.clone().requires_grad_(True)
    opt = torch.optim.SGD([maps, *head.parameters()], lr=0.5)
    first = float(head(maps, gt).mean())
    for _ in range(30):
        opt.zero_grad()
        loss = head(maps, gt).mean()
        loss.backward()
        opt.step()
    assert float(head(maps, gt).mean()) < 0.5 * first
    assert head.to_w().shape == (3 + 4 * 2,)


def test_chain_hinge_float32_uses_the_torch_oracle_and_agrees():
    unary, lengths, first, last, trans, gt = random_chains(7)
    H64 = chain_hinge(unary, lengths, first, last, trans, gt)
    H32 = chain_hinge(unary.float(), lengths, first.float(), last.float(), trans.float(), gt)
    torch.testing.assert_close(H32.double(), H64, rtol=0, atol=1e-5)
    assert torch.allclose(chain_score(unary, lengths, first, last, trans, gt).float(),
                          chain_score(unary.float(), lengths, first.float(), last.float(), trans.float(), gt))


def test_non_finite_scores_are_refused_and_minus_inf_marks_a_forbidden_tag():
    from ssvm_torch.nn import ChainSSVMHead, chain_decode, chain_hinge
    B, T, K = 2, 4, 3
    unary = torch.randn(B, T, K, dtype=torch.float64)
    lengths = torch.tensor([4, 2])
    gt = torch.tensor([[0, 1, 2, 1], [2, 0, -1, -1]])
    z, zz = torch.zeros(K, dtype=torch.float64), torch.zeros(K, K, dtype=torch.float64)
    for kernels in ("numba", "torch"):
        for bad in (float("nan"), float("inf")):
            u = unary.clone()
            u[1, 0, 2] = bad
            with pytest.raises(SSVMInputError, match=r"unary: expected scores without NaN or \+inf .*found 1 such"):
                chain_hinge(u, lengths, z, z, zz, gt, kernels=kernels)
            with pytest.raises(SSVMInputError, match="unary: expected scores without NaN"):
                chain_decode(u, lengths, z, z, zz, kernels=kernels)
        t = zz.clone()
        t[0, 0] = float("nan")
        with pytest.raises(SSVMInputError, match="trans: expected scores without NaN"):
            chain_hinge(unary, lengths, z, z, t, gt, kernels=kernels)
        u = unary.clone()
        u[0, :, 1] = float("-inf")                                # tag 1 forbidden in row 0: allowed input
        assert not bool((chain_decode(u, lengths, z, z, zz, kernels=kernels)[0] == 1).any())
    with pytest.raises(SSVMInputError, match=r"lengths: expected an integer tensor of shape \(2,\), got \(2,\) torch.float32"):
        chain_decode(unary, lengths.float(), z, z, zz)
    head = ChainSSVMHead(n_features=5, n_states=K)
    with pytest.raises(SSVMInputError, match=r"features: expected a \(B, T, 5\) tensor"):
        head(torch.zeros(B, T, 4), lengths, gt)


def test_every_structured_layer_shares_the_sampling_and_reduction_conventions():
    """The five structured layers read alike: the same calls (score, decode with mbr, log Z, marginals, entropy,
    KL, cross-entropy, samples), the loss summed over rows by default (pytorch-crf's default; the
    semi-Markov and alignment layers averaged, so a model moved between layers changed its loss scale by B), and
    ``sample`` takes ``n`` and ``generator`` as keywords and returns draws batch-first (B, n, ...), as their n best."""
    import inspect

    from ssvm_torch.nn import ConstituencyTree, DependencyTree, LinearChain, MonotonicAlignment, SemiMarkovChain
    calls = {"forward", "score", "decode", "log_partition", "marginals", "entropy", "kl", "cross_entropy", "sample"}
    for layer in (LinearChain, DependencyTree, ConstituencyTree, SemiMarkovChain, MonotonicAlignment):
        assert calls <= set(dir(layer)), (layer.__name__, calls - set(dir(layer)))
        assert "mbr" in inspect.signature(layer.decode).parameters, layer.__name__
        forward, sample = (inspect.signature(getattr(layer, name)).parameters for name in ("forward", "sample"))
        assert forward["reduction"].default == "sum", layer.__name__
        assert sample["n"].default == 1 and sample["generator"].default is None, layer.__name__
    g = torch.Generator().manual_seed(0)
    draws = [LinearChain(3, batch_first=True).sample(torch.randn(2, 4, 3), n=5, generator=g),
             DependencyTree().sample(torch.randn(2, 4, 4), n=5, generator=g),
             ConstituencyTree().sample(torch.randn(2, 4, 4), n=5, generator=g),
             SemiMarkovChain(3, 2).sample(torch.randn(2, 4, 2, 3), n=5, generator=g),
             MonotonicAlignment().sample(torch.randn(2, 4, 3, 3), n=5, generator=g)]
    assert [tuple(d.shape[:2]) for d in draws] == [(2, 5)] * 5


@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("loss", ["hinge", "crf", "softmax_margin"])
def test_every_structured_layer_takes_an_empty_batch(loss, kernels):
    """B = 0 (the last batch of a filtered split, a data loader with nothing left): every layer gives a loss of 0
    under each reduction (not NaN: torch's mean of nothing is NaN), per-row results of B = 0 and an empty gradient,
    where LinearChain once refused the batch ("non-empty batch and time dimensions") and the others took it."""
    from ssvm_torch.nn import ConstituencyTree, DependencyTree, LinearChain, MonotonicAlignment, SemiMarkovChain
    T = 5
    cases = {
        "chain": (LinearChain(3, batch_first=True, loss=loss, kernels=kernels), torch.randn(0, T, 3),
                  torch.zeros(0, T, dtype=torch.int64), {}),
        "chain time-major": (LinearChain(3, loss=loss, kernels=kernels), torch.randn(T, 0, 3),
                             torch.zeros(T, 0, dtype=torch.int64), {}),
        "dependency": (DependencyTree(loss=loss, kernels=kernels), torch.randn(0, T, T),
                       torch.zeros(0, T, dtype=torch.int64), {"lengths": torch.zeros(0, dtype=torch.int64)}),
        "constituency": (ConstituencyTree(loss=loss, kernels=kernels), torch.randn(0, T, T),
                         torch.zeros(0, T, T, dtype=torch.bool), {"lengths": torch.zeros(0, dtype=torch.int64)}),
        "semi-markov": (SemiMarkovChain(3, 2, loss=loss, kernels=kernels), torch.randn(0, T, 2, 3),
                        torch.zeros(0, T, dtype=torch.int64), {"lengths": torch.zeros(0, dtype=torch.int64)}),
        "alignment": (MonotonicAlignment(loss=loss, kernels=kernels), torch.randn(0, T, 4, 3),
                      torch.zeros(0, T, 4, dtype=torch.int64), {}),
    }
    for name, (layer, scores, gold, extra) in cases.items():
        scores.requires_grad_(True)
        for reduction in ("sum", "mean", "token_mean"):
            value = layer(scores, gold, reduction=reduction, **extra)
            assert value.shape == () and float(value) == 0.0, (name, reduction, value)
        per_row = layer(scores, gold, reduction="none", **extra)
        assert per_row.shape == (0,), (name, per_row.shape)
        (grad,) = torch.autograd.grad(layer(scores, gold, **extra), scores, allow_unused=True)
        assert grad is None or grad.shape == scores.shape, name
        with torch.no_grad():
            assert layer.log_partition(scores.detach(), **extra).shape == (0,), name
            assert layer.sample(scores.detach(), n=2, **extra).shape[:2] == (0, 2), name
            assert layer.decode(scores.detach(), **extra).shape[0] == 0, name
