"""The chain package (ssvm_torch/chain/): each operation's backends against each other and against
brute-force enumeration -- path score, (loss-augmented, constrained) Viterbi, log Z, marginals and
expectations (shared and per-sequence scores), the ragged marginals -- the numba forward-backward
core (scaled and log-space) on the cases that separate them, torch-struct as the independent
reference of the public names, and the Triton decoder under TRITON_INTERPRET=1 where triton is
installed."""
import itertools

import numpy as np
import pytest
import torch

from ssvm_torch.chain import chain_expectations, chain_log_partition, chain_marginals, chain_score, decode, ops
from ssvm_torch.chain.numba_fb import backward_row, exp_trans, forward_row, log_fb_row
from ssvm_torch.chain.numba_masked import nb_path_scores
from ssvm_torch.chain.torch_struct import reference_expectations, reference_log_partition
from ssvm_torch.chain.torch_ops import with_penalty
from ssvm_torch.chain.torch_viterbi import viterbi_loop
from ssvm_torch.chain.triton_viterbi import fused_available
from ssvm_torch.constraints import allowed_transitions, penalties

TAGS = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
# Triton on CPU tensors under the interpreter tests/conftest.py switches on without a GPU (CUDA: test_triton_chain.py)
BACKENDS = ("numba", "torch") + (("triton",) if fused_available(torch.zeros(1, 1, 2)) else ())


def scores(K, shape_b=None, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    lead = () if shape_b is None else (shape_b,)
    return tuple(scale * torch.randn(*lead, *s, generator=g, dtype=torch.float64) for s in ((K,), (K,), (K, K)))


def brute(U, L, first, last, trans):
    """Every labeling of a length-L chain: (labelings, their scores)."""
    K = U.shape[1]
    ys = list(itertools.product(range(K), repeat=L))
    s = torch.stack([first[y[0]] + last[y[-1]] + sum(U[t, y[t]] for t in range(L))
                     + sum(trans[y[t], y[t - 1]] for t in range(1, L)) for y in ys])
    return ys, s


def test_forward_backward_core_scaled_and_log_space_agree_and_the_fallback_is_exact():
    """forward_row + backward_row (Rabiner's scaling) equal log_fb_row on potentials of scale 30
    under BIO constraints; where a scaling constant underflows forward_row returns nan and
    log_fb_row gives the exact answer."""
    rng = np.random.default_rng(5)
    K, T = len(TAGS), 6
    pen = [x.numpy() for x in penalties(allowed_transitions("BIO", TAGS))]
    for with_pen in (False, True):
        P, tf, tl, tt = (rng.normal(scale=30, size=s) for s in ((T, K), (K,), (K,), (K, K)))
        if with_pen:
            tf, tl, tt = tf + pen[0], tl + pen[1], tt + pen[2]
        E, pos = P[None].copy(), np.arange(T)
        out = []
        for scaled in (True, False):
            mu, se, mt = np.zeros((1, T, K)), np.zeros((1, 2, K)), np.zeros((1, K, K))
            if scaled:
                X = np.empty((K, K))
                A, Pw, c = np.empty((T, K)), np.empty((T, K)), np.empty(T + 1)
                z = forward_row(E, 0, pos, T, tf, tl, X, exp_trans(tt, X), A, Pw, c)
                backward_row(0, pos, T, tl, X, A, Pw, c, 1.0, mu, se, mt, 0)
            else:
                z = log_fb_row(E, 0, pos, T, tf, tl, tt, 1.0, mu, se, mt, 0, np.empty((T, K)), np.empty((T, K)),
                               np.empty(K))
            out.append((z, mu[0], se[0], mt[0]))
        (z1, mu1, se1, mt1), (z2, mu2, se2, mt2) = out
        assert z1 == pytest.approx(z2, rel=1e-12)
        np.testing.assert_allclose(mu1, mu2, rtol=0, atol=1e-10)
        np.testing.assert_allclose(se1, se2, rtol=0, atol=1e-10)
        np.testing.assert_allclose(mt1, mt2, rtol=0, atol=1e-9)
        np.testing.assert_allclose(se1, [mu1[0], mu1[-1]], rtol=0, atol=1e-12)
    # position 0 all but forces label 0 (e^-1000 underflows) and every move out of label 0 is forbidden
    # but 0 -> 0, whose unary at position 1 is e^-1000 too: the scaled forward pass sums to 0
    E = np.array([[[0.0, -1000.0], [-1000.0, 0.0]]])
    tt, z2 = np.array([[0.0, 0.0], [-np.inf, 0.0]]), np.zeros(2)
    X = np.empty((2, 2))
    assert np.isnan(forward_row(E, 0, np.arange(2), 2, z2, z2, X, exp_trans(tt, X), np.empty((2, 2)),
                                np.empty((2, 2)), np.empty(3)))
    mu, se, mt = np.zeros((1, 2, 2)), np.zeros((1, 2, 2)), np.zeros((1, 2, 2))
    z = log_fb_row(E, 0, np.arange(2), 2, z2, z2, tt, 1.0, mu, se, mt, 0, np.empty((2, 2)), np.empty((2, 2)),
                   np.empty(2))
    # two labelings remain, (0, 0) and (1, 1), each scoring -1000: half the mass each
    assert z == pytest.approx(-1000 + np.log(2), abs=1e-9)
    np.testing.assert_allclose(mu[0], [[0.5, 0.5], [0.5, 0.5]], atol=1e-12)
    np.testing.assert_allclose(mt[0], [[0.5, 0.0], [0.0, 0.5]], atol=1e-12)


@pytest.mark.parametrize("constrained", [False, True])
def test_masked_operations_of_every_backend_equal_brute_force(constrained):
    """Score, decode, loss-augmented decode, log Z and marginals of rows with gaps, an off first
    position and an empty row: numba, torch and Triton (where its kernels run: a GPU, or its interpreter)
    against enumeration of the compacted rows."""
    K, T = len(TAGS), 5
    g = torch.Generator().manual_seed(3)
    E = torch.randn(4, T, K, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 0, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    start, end, trans = scores(K, seed=4)
    pen = penalties(allowed_transitions("BIO", TAGS)) if constrained else None
    eff = with_penalty(start, end, trans, pen)
    gold = torch.tensor([[1, 2, 0, 3, 4], [0, 1, 0, 2, 0], [3, 0, 0, 0, 0], [0] * 5])
    rowc = torch.full((4,), 0.5, dtype=torch.float64)
    cost = 1.0 - torch.eye(K, dtype=torch.float64)
    res = {k: (ops.decode(E, mask, start, end, trans, pen, k), ops.decode(E, mask, start, end, trans, pen, k, gold,
                                                                            rowc, cost),
               ops.log_partition(E, mask, start, end, trans, pen) if k == "torch" else
               ops.nll(E, mask, start, end, trans, gold, pen, k) + ops.score(E, mask, *eff, gold),
               ops.marginals(E, mask, start, end, trans, pen, k)) for k in BACKENDS}
    for b in range(4):
        on = torch.nonzero(mask[b])[:, 0]
        L = len(on)
        for k, ((lab, sc), (alab, asc), logz, mu) in res.items():
            if L == 0:
                assert float(sc[b]) == 0.0 and float(logz[b]) == 0.0 and bool((lab[b] == -1).all())
                assert float(mu[b].abs().sum()) == 0.0
                continue
            ys, s = brute(E[b, on], L, *eff)
            assert float(sc[b]) == pytest.approx(float(s.max()), abs=1e-12)
            assert tuple(lab[b, on].tolist()) == ys[int(s.argmax())]
            loss = torch.tensor([0.5 * sum(y[t] != int(gold[b, on[t]]) for t in range(L)) for y in ys],
                                dtype=torch.float64)
            assert float(asc[b]) == pytest.approx(float((s + loss).max()), abs=1e-12)
            assert float(logz[b]) == pytest.approx(float(torch.logsumexp(s, 0)), abs=1e-10)
            p = torch.softmax(s, 0)
            for t in range(L):
                for j in range(K):
                    want = sum(float(p[n]) for n, y in enumerate(ys) if y[t] == j)
                    assert abs(float(mu[b, on[t], j]) - want) < 1e-10
    if not constrained:                              # the numba path score = the torch one
        out = torch.empty(4, dtype=torch.float64)
        nb_path_scores(E.numpy(), mask.numpy(), gold.numpy(), start.numpy(), end.numpy(), trans.numpy(), out.numpy())
        torch.testing.assert_close(out, ops.score(E, mask, start, end, trans, gold), rtol=0, atol=1e-12)


@pytest.mark.parametrize("per_sequence", [False, True])
def test_lengths_based_names_equal_torch_struct_and_enumeration(per_sequence):
    """chain_log_partition / chain_marginals / chain_expectations (the package's recursions) equal
    torch-struct's log-semiring values (what these names returned before the package) to 1e-12 in
    float64, with shared and per-sequence scores; chain_score equals enumeration's."""
    K, lengths = 3, torch.tensor([5, 1, 3, 2])
    B, T = len(lengths), 5
    g = torch.Generator().manual_seed(7)
    U = torch.randn(B, T, K, generator=g, dtype=torch.float64)
    first, last, trans = scores(K, B if per_sequence else None, seed=8)
    ours = chain_expectations(U, lengths, first, last, trans)
    ref = reference_expectations(U, lengths, first, last, trans)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(chain_log_partition(U, lengths, first, last, trans),
                               reference_log_partition(U, lengths, first, last, trans), rtol=1e-12, atol=0)
    torch.testing.assert_close(chain_marginals(U, lengths, first, last, trans), ours[0], rtol=0, atol=1e-13)
    for b, L in enumerate(lengths.tolist()):
        f, la, tr = (x[b] if per_sequence else x for x in (first, last, trans))
        ys, s = brute(U[b], L, f, la, tr)
        assert float(ours[-1][b]) == pytest.approx(float(torch.logsumexp(s, 0)), abs=1e-12)
        if not per_sequence:
            lab = torch.full((1, T), -1)
            lab[0, :L] = torch.tensor(ys[5 % len(ys)])
            assert float(chain_score(U[b:b + 1], lengths[b:b + 1], f, la, tr, lab)) == pytest.approx(
                float(s[5 % len(ys)]), abs=1e-12)


def test_decode_backends_agree_with_the_loop_and_triton_under_the_interpreter(monkeypatch):
    """decode's numba and torch backends and viterbi_loop give the same labels and scores, plain and
    loss-augmented, with constraints; the fused Triton kernel too where triton is installed (run by
    its interpreter on CPU tensors)."""
    K, lengths = len(TAGS), torch.tensor([6, 1, 4, 3])
    B, T = len(lengths), 6
    g = torch.Generator().manual_seed(11)
    U = torch.randn(B, T, K, generator=g, dtype=torch.float64)
    first, last, trans = scores(K, seed=12)
    gt = torch.where(torch.arange(T)[None] < lengths[:, None], torch.randint(0, K, (B, T), generator=g), -1)
    pen = penalties(allowed_transitions("BIO", TAGS))
    for kw in ({}, {"gt": gt}, {"penalty": pen}, {"gt": gt, "penalty": pen}):
        ref = viterbi_loop(U, lengths, first, last, trans, **kw)
        for backend in ("numba", "torch"):
            got = decode(U, lengths, first, last, trans, backend=backend, **kw)
            assert torch.equal(got[0], ref[0])
            torch.testing.assert_close(got[1], ref[1], rtol=0, atol=1e-12)
    from ssvm_torch.chain import triton_viterbi
    if triton_viterbi.triton is None:
        pytest.skip("triton is not installed: the fused kernel's interpreter check needs it")
    if not triton_viterbi.fused_available(U.float()):
        pytest.skip("the kernel needs CUDA or TRITON_INTERPRET=1 at import (tests/conftest.py sets it without a GPU)")
    for kw in ({}, {"gt": gt}, {"penalty": pen}):
        ref = viterbi_loop(U.float(), lengths, first.float(), last.float(), trans.float(),
                           **{k: (tuple(x.float() for x in v) if k == "penalty" else v) for k, v in kw.items()})
        got = triton_viterbi.viterbi_fused(U.float(), lengths, first.float(), last.float(), trans.float(),
                                           **{k: (tuple(x.float() for x in v) if k == "penalty" else v)
                                              for k, v in kw.items()})
        assert torch.equal(got[0], ref[0])


def test_spreads_beyond_the_scaling_take_the_log_space_recursion_on_every_backend():
    """Potentials of scale 1000 (the dual extragradient's prox steps reach such spreads): the scaled
    recursions' normalizers leave float64's range, so the numba masked kernels, the numba ragged
    marginals and the torch recursion switch to log space, and all equal torch-struct's log semiring
    and enumeration (the scaled recursion alone loses the answer silently through denormals)."""
    K, lengths = 4, torch.tensor([5, 3, 1])
    B, T = len(lengths), 5
    g = torch.Generator().manual_seed(21)
    U = 1000 * torch.randn(B, T, K, generator=g, dtype=torch.float64)
    first, last, trans = scores(K, seed=22, scale=1000.0)
    ref = reference_expectations(U, lengths, first, last, trans)
    ours = chain_expectations(U, lengths, first, last, trans)                   # torch, with its fallback
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    mask = torch.arange(T)[None] < lengths[:, None]
    numba_mu = ops.marginals(U, mask, first, last, trans, kernels="numba")
    torch.testing.assert_close(numba_mu, ref[0], rtol=0, atol=1e-9)
    gold = torch.zeros(B, T, dtype=torch.int64)
    nll = ops.nll(U, mask, first, last, trans, gold, kernels="numba") + ops.score(U, mask, first, last, trans, gold)
    torch.testing.assert_close(nll, ref[-1], rtol=1e-12, atol=0)
    for b, L in enumerate(lengths.tolist()):
        _, s = brute(U[b], L, first, last, trans)
        assert float(ref[-1][b]) == pytest.approx(float(torch.logsumexp(s, 0)), rel=1e-12)
    from ssvm_torch.chain import chain_marginals_ragged
    flat = U[mask]
    for backend in ("numba", "torch"):
        Mu, Mt, logZ = chain_marginals_ragged(flat, lengths, first, last, trans, backend=backend)
        torch.testing.assert_close(Mu, ref[0][mask], rtol=0, atol=1e-9)
        torch.testing.assert_close(Mt, ref[3], rtol=0, atol=1e-9)
        torch.testing.assert_close(logZ, ref[-1], rtol=1e-12, atol=0)
