"""PCFG entropy, cross-entropy, KL and exact samples (ssvm_torch.spans.pcfg_information, pcfg_sampling) against
enumeration of every labeled tree of small rows (tests/pcfg_reference.py): values, gradcheck (second derivatives
of log Z), +inf where q forbids what p weighs, the refusals, and a chi-square test of 20,000 samples."""
from __future__ import annotations

import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.spans import pcfg_cross_entropy, pcfg_entropy, pcfg_kl, pcfg_sample, pcfg_score

from frequency_check import pooled_pvalue
from pcfg_reference import enumerated_log_probs, grammar, math_exp


def test_entropy_cross_entropy_and_kl_equal_enumeration():
    """H(p), H(p, q) and KL(p || q) against sums over every tree, with span scores on p's side only (q's then 0),
    rows of different lengths; KL >= 0 and KL(p || p) = 0."""
    NT, T, N = 2, 2, 4
    p = grammar(2, N, NT, T, seed=37)
    q = grammar(2, N, NT, T, seed=41, span=False)[:3]
    lengths = torch.tensor([4, 3])
    H = pcfg_entropy(*p, lengths=lengths)
    CE = pcfg_cross_entropy(*p[:3], q, p[3], lengths=lengths)
    KL = pcfg_kl(*p[:3], q, p[3], lengths=lengths)
    for b in range(2):
        n = int(lengths[b])
        lp = enumerated_log_probs(p[0][b], p[1][b], p[2][b], p[3][b], n, NT, T)
        lq = enumerated_log_probs(q[0][b], q[1][b], q[2][b], None, n, NT, T)
        want_h = -sum(math_exp(v) * v for v in lp.values())
        want_ce = -sum(math_exp(lp[k]) * lq[k] for k in lp)
        assert H[b].item() == pytest.approx(want_h, abs=1e-10)
        assert CE[b].item() == pytest.approx(want_ce, abs=1e-10)
        assert KL[b].item() == pytest.approx(want_ce - want_h, abs=1e-10) and KL[b].item() > 0
    torch.testing.assert_close(pcfg_kl(*p[:3], p, p[3], lengths=lengths), torch.zeros(2, dtype=torch.float64),
                               rtol=0, atol=1e-10)


def test_entropy_and_kl_pass_gradcheck():
    """Their gradients are second derivatives of log Z (the recomputing backward differentiated again)."""
    NT, T, N = 2, 2, 3
    p = [x.requires_grad_() for x in grammar(2, N, NT, T, seed=43)]
    q = [x.requires_grad_() for x in grammar(2, N, NT, T, seed=47, span=False)[:3]]
    lengths = torch.tensor([3, 2])
    assert torch.autograd.gradcheck(lambda *a: pcfg_entropy(*a, lengths=lengths), p)
    assert torch.autograd.gradcheck(lambda *a: pcfg_kl(*a[:3], a[4:], a[3], lengths=lengths), [*p, *q])


def test_kl_is_infinite_where_q_forbids_what_p_weighs_and_its_gradient_stays_finite():
    NT, T, N = 2, 2, 4
    p = grammar(3, N, NT, T, seed=53, span=False)[:3]
    q = [x.clone() for x in grammar(3, N, NT, T, seed=59, span=False)[:3]]
    q[0][1, 2, 1] = float("-inf")                   # row 1: word 2 is never preterminal 1 under q
    leaves = [x.clone().requires_grad_() for x in p]
    D = pcfg_kl(*leaves, q)
    assert D[1].item() == float("inf") and bool(torch.isfinite(D[[0, 2]]).all())
    torch.testing.assert_close(pcfg_cross_entropy(*p, q)[[0, 2]], (D + pcfg_entropy(*p))[[0, 2]])
    D[[0, 2]].sum().backward()
    assert all(bool(torch.isfinite(x.grad).all()) for x in leaves)
    assert all(x.grad[1].abs().max() == 0 for x in leaves)
    assert bool(torch.isfinite(pcfg_kl(*q, p)).all())   # q's support lies inside p's


def test_entropy_refuses_a_row_without_a_tree_and_works_under_inference_mode():
    NT, T, N = 2, 2, 4
    terms, rules, roots, _ = grammar(2, N, NT, T, seed=61, span=False)
    with torch.inference_mode():
        H = pcfg_entropy(terms, rules, roots)
    torch.testing.assert_close(H, pcfg_entropy(terms, rules, roots))
    roots[1] = float("-inf")
    with pytest.raises(SSVMInputError, match="row 1 has no tree with a finite score"):
        pcfg_entropy(terms, rules, roots)
    with pytest.raises(SSVMInputError, match="other"):
        pcfg_kl(terms, rules, roots, (terms, rules))


def test_samples_follow_the_tree_distribution():
    """20,000 samples of each row (3 and 4 words, span scores, a forbidden preterminal) against the enumerated
    p(y): every sample a tree of the grammar (pcfg_score accepts it), none of probability 0, chi-square p > 1e-3;
    a generator makes them reproducible."""
    NT, T, N = 2, 2, 4
    terms, rules, roots, span = grammar(2, N, NT, T, seed=67)
    terms[:, 1, 0] = float("-inf")                       # word 1 is never preterminal 0
    lengths = torch.tensor([4, 3])
    draws = 20000
    g = torch.Generator().manual_seed(71)
    y = pcfg_sample(terms, rules, roots, span, lengths=lengths, n=draws, generator=g)
    assert y.shape == (2, draws, N + 1, N + 1) and y.dtype == torch.int64
    again = pcfg_sample(terms, rules, roots, span, lengths=lengths, n=draws,
                        generator=torch.Generator().manual_seed(71))
    assert torch.equal(y, again)
    for b in range(2):
        n = int(lengths[b])
        lp = enumerated_log_probs(terms[b], rules[b], roots[b], span[b], n, NT, T)
        keys = list(lp)
        index = {k: a for a, k in enumerate(keys)}
        counts = [0] * len(keys)
        for chart in y[b].tolist():
            key = tuple(sorted(((i, j), lab) for i, row in enumerate(chart) for j, lab in enumerate(row) if lab >= 0))
            counts[index[key]] += 1
        assert pooled_pvalue(counts, [math_exp(lp[k]) for k in keys], draws) > 1e-3
    some = y[:, :50].transpose(0, 1).reshape(100, N + 1, N + 1)
    pcfg_score(terms.repeat(50, 1, 1), rules.repeat(50, 1, 1, 1), roots.repeat(50, 1), some,
               span.repeat(50, 1, 1, 1), lengths=lengths.repeat(50))              # checked trees of the grammar
