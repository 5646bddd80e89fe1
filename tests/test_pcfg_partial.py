"""PCFGs from partial brackets (ssvm_torch.spans.pcfg_partial): log Z_C, the expected counts and the best tree
over the trees that hold the observed brackets, and the three losses with ``partial=True``, against enumeration of
every labeled tree of small rows filtered by the brackets (tests/pcfg_reference.py scores each tree from the
grammar's definition), the entropy of C's distribution and a chi-square test of samples from it; whole trees give
the full losses bit for bit, empty rows 0; one EM step of the bracket-constrained inside-outside algorithm raises
the likelihood; the refusals name the field."""
from __future__ import annotations

import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.spans import (UNLABELED, pcfg_crf_nll, pcfg_decode, pcfg_entropy, pcfg_hinge, pcfg_log_partition,
                              pcfg_marginals, pcfg_sample, pcfg_softmax_margin)

from frequency_check import pooled_pvalue
from pcfg_reference import add_counts, chart_of, grammar, labeled_pcfg_trees, tree_score

NT, T, N = 2, 2, 4


def holds(labels: dict, observed: dict) -> bool:
    """Whether a tree {span: label} holds every observed bracket {span: label or UNLABELED}."""
    return all(sp in labels and (lab == UNLABELED or labels[sp] == lab) for sp, lab in observed.items())


def enumerate_row(terms, rules, roots, span, n, observed, cost=0.0):
    """(log Z_C, best score in C, its labels, the expected counts in C, log-sum and max of s(y) + Delta_O(y) over
    every tree) of one row."""
    S = NT + T
    rows = []
    for labels, children in labeled_pcfg_trees(n, NT, T):
        s = tree_score(terms, rules, roots, span, n, labels, children, NT)
        delta = cost * sum(not holds(labels, {sp: lab}) for sp, lab in observed.items())
        rows.append((labels, children, s, delta))
    inside_c = [r for r in rows if holds(r[0], observed)]
    sc = torch.tensor([r[2] for r in inside_c], dtype=torch.float64)
    aug = torch.tensor([r[2] + r[3] for r in rows], dtype=torch.float64)
    counts = {"terms": torch.zeros(N, T, dtype=torch.float64), "roots": torch.zeros(NT, dtype=torch.float64),
              "rules": torch.zeros(NT, S, S, dtype=torch.float64)}
    for (labels, children, _, _), w in zip(inside_c, torch.softmax(sc, 0).tolist()):
        add_counts(counts, labels, children, w, n, NT)
    k = int(sc.argmax())
    return (float(sc.logsumexp(0)), float(sc[k]), inside_c[k][0], counts, float(aug.logsumexp(0)),
            float(aug.max()))


def observed_rows(lengths, seed):
    """Partial brackets of random trees: row 0 a few labeled and unlabeled ones, row 1 none, row 2 a whole tree,
    row 3 unlabeled brackets only."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for b, n in enumerate(lengths.tolist()):
        trees = list(labeled_pcfg_trees(n, NT, T))
        labels = trees[int(torch.randint(len(trees), (1,), generator=g))][0]
        spans = sorted(labels)
        if b == 0:
            keep = {sp: (labels[sp] if k % 2 else UNLABELED) for k, sp in enumerate(spans) if k % 3 != 2}
        elif b == 1:
            keep = {}
        elif b == 2:
            keep = dict(labels)
        else:
            keep = {sp: UNLABELED for sp in spans if sp[1] - sp[0] >= 2}
        out.append(keep)
    charts = torch.stack([chart_of(o, N + 1) for o in out])
    return out, charts


@pytest.mark.parametrize("with_span", [False, True], ids=["rules only", "span scores"])
def test_log_z_counts_and_best_tree_over_the_consistent_trees_equal_enumeration(with_span):
    terms, rules, roots, span = grammar(4, N, NT, T, seed=11, span=with_span)
    lengths = torch.tensor([4, 3, 4, 4])
    obs, charts = observed_rows(lengths, seed=2)
    logz = pcfg_log_partition(terms, rules, roots, span, lengths=lengths, observed=charts)
    marg = pcfg_marginals(terms, rules, roots, span, lengths=lengths, observed=charts)
    best, top = pcfg_decode(terms, rules, roots, span, lengths=lengths, observed=charts)
    for b in range(4):
        n = int(lengths[b])
        z, m, labels, counts, _, _ = enumerate_row(terms[b], rules[b], roots[b], None if span is None else span[b],
                                                   n, obs[b])
        assert logz[b].item() == pytest.approx(z, abs=1e-10)
        assert marg["log_z"][b].item() == pytest.approx(z, abs=1e-10)
        assert top[b].item() == pytest.approx(m, abs=1e-10)
        assert torch.equal(best[b], chart_of(labels, N + 1))
        for key in ("terms", "rules", "roots"):
            torch.testing.assert_close(marg[key][b], counts[key], rtol=0, atol=1e-10)
    # the labelled recall parse among them holds every observed bracket
    mbr, _ = pcfg_decode(terms, rules, roots, span, lengths=lengths, observed=charts, mbr=True)
    for b, o in enumerate(obs):
        for (i, j), lab in o.items():
            assert int(mbr[b, i, j]) >= 0 and (lab == UNLABELED or int(mbr[b, i, j]) == lab)


def test_the_entropy_and_samples_of_the_trees_that_hold_the_brackets():
    """H(p(. | C)) against the sum over C's enumerated trees; 20,000 samples of rows 0 and 3 (labeled and unlabeled
    brackets) all hold their brackets and follow p(. | C) (chi-square p > 1e-3)."""
    terms, rules, roots, span = grammar(4, N, NT, T, seed=37)
    lengths = torch.tensor([4, 3, 4, 4])
    obs, charts = observed_rows(lengths, seed=2)
    H = pcfg_entropy(terms, rules, roots, span, lengths=lengths, observed=charts)
    draws = 20000
    y = pcfg_sample(terms, rules, roots, span, lengths=lengths, n=draws, generator=torch.Generator().manual_seed(3),
                    observed=charts)
    for b in range(4):
        n = int(lengths[b])
        trees = [labels for labels, children in labeled_pcfg_trees(n, NT, T) if holds(labels, obs[b])]
        sc = torch.tensor([tree_score(terms[b], rules[b], roots[b], span[b], n, labels, children, NT)
                           for labels, children in labeled_pcfg_trees(n, NT, T) if holds(labels, obs[b])],
                          dtype=torch.float64)
        logp = sc.log_softmax(0)
        assert H[b].item() == pytest.approx(float(-(logp.exp() * logp).sum()), abs=1e-10)
        if b not in (0, 3):
            continue
        index = {tuple(sorted(labels.items())): a for a, labels in enumerate(trees)}
        counts = [0] * len(trees)
        for chart in y[b].tolist():
            key = tuple(sorted(((i, j), lab) for i, row in enumerate(chart) for j, lab in enumerate(row) if lab >= 0))
            counts[index[key]] += 1                         # a KeyError: a sample outside C
        assert pooled_pvalue(counts, logp.exp().tolist(), draws) > 1e-3


@pytest.mark.parametrize("cost", [1.0, 0.6])
def test_the_three_partial_losses_equal_enumeration(cost):
    terms, rules, roots, span = grammar(4, N, NT, T, seed=13)
    lengths = torch.tensor([4, 4, 3, 4])
    obs, charts = observed_rows(lengths, seed=5)
    args = (terms, rules, roots, charts, span)
    got = {"crf": pcfg_crf_nll(*args, lengths=lengths, partial=True),
           "hinge": pcfg_hinge(*args, lengths=lengths, cost=cost, partial=True),
           "softmax_margin": pcfg_softmax_margin(*args, lengths=lengths, cost=cost, partial=True)}
    for b in range(4):
        n = int(lengths[b])
        z_c, m_c, _, _, z_aug, m_aug = enumerate_row(terms[b], rules[b], roots[b], span[b], n, obs[b], cost)
        z_all = enumerate_row(terms[b], rules[b], roots[b], span[b], n, {})[0]
        assert got["crf"][b].item() == pytest.approx(z_all - z_c, abs=1e-10)
        assert got["hinge"][b].item() == pytest.approx(m_aug - m_c, abs=1e-10)
        assert got["softmax_margin"][b].item() == pytest.approx(z_aug - z_c, abs=1e-10)
    assert all(v[1].abs().item() < 1e-12 for v in got.values())          # nothing observed: no loss
    # the whole tree's row (2) through the full-annotation losses, bit for bit
    whole = charts[2:3].clone()
    one = (terms[2:3], rules[2:3], roots[2:3], whole, span[2:3])
    assert torch.equal(got["crf"][2:3], pcfg_crf_nll(*one, lengths=lengths[2:3]))
    assert torch.equal(got["hinge"][2:3], pcfg_hinge(*one, lengths=lengths[2:3], cost=cost))
    assert torch.equal(got["softmax_margin"][2:3], pcfg_softmax_margin(*one, lengths=lengths[2:3], cost=cost))


def test_the_partial_crf_gradient_is_the_difference_of_the_expected_counts():
    terms, rules, roots, span = grammar(4, N, NT, T, seed=17)
    lengths = torch.tensor([4, 3, 4, 4])
    _, charts = observed_rows(lengths, seed=8)
    leaves = [x.clone().requires_grad_() for x in (terms, rules, roots, span)]
    pcfg_crf_nll(*leaves[:3], charts, leaves[3], lengths=lengths, partial=True).sum().backward()
    full = pcfg_marginals(terms, rules, roots, span, lengths=lengths)
    cons = pcfg_marginals(terms, rules, roots, span, lengths=lengths, observed=charts)
    for leaf, key in zip(leaves, ("terms", "rules", "roots", "spans")):
        torch.testing.assert_close(leaf.grad, full[key] - cons[key], rtol=0, atol=1e-10)


def test_bool_brackets_are_unlabeled_ones():
    terms, rules, roots, span = grammar(4, N, NT, T, seed=19)
    lengths = torch.tensor([4, 3, 4, 4])
    _, charts = observed_rows(lengths, seed=3)
    present = charts != -1
    unlabeled = torch.where(present, UNLABELED, -1)
    assert torch.equal(pcfg_log_partition(terms, rules, roots, span, lengths=lengths, observed=present),
                       pcfg_log_partition(terms, rules, roots, span, lengths=lengths, observed=unlabeled))
    assert torch.equal(pcfg_hinge(terms, rules, roots, present, span, lengths=lengths, partial=True),
                       pcfg_hinge(terms, rules, roots, unlabeled, span, lengths=lengths, partial=True))


def normalized(rules_counts, roots_counts, NT_, S):
    """log-probabilities of a PCFG from (positive) counts: each nonterminal's rules sum to one, the roots too."""
    rules = rules_counts.reshape(NT_, S * S)
    return (rules / rules.sum(1, keepdim=True)).log().reshape(NT_, S, S), (roots_counts / roots_counts.sum()).log()


def test_one_em_step_on_bracketed_sentences_raises_their_likelihood():
    """Pereira & Schabes 1992's reestimation: the expected counts over the trees consistent with each sentence's
    brackets, normalized, never lower the corpus's bracket-constrained log-likelihood (EM)."""
    g = torch.Generator().manual_seed(23)
    B, n, NT_, T_ = 6, 5, 3, 3
    S = NT_ + T_
    rules, roots = normalized(torch.rand(NT_, S, S, generator=g, dtype=torch.float64) + 0.1,
                              torch.rand(NT_, generator=g, dtype=torch.float64) + 0.1, NT_, S)
    tags = torch.randint(T_, (B, n), generator=g)
    terms = torch.full((B, n, T_), float("-inf"), dtype=torch.float64).scatter(2, tags[..., None], 0.0)
    observed = torch.zeros(B, n + 1, n + 1, dtype=torch.bool)
    observed[:, 0, 2] = observed[:, 3, 5] = True
    observed[3:, 0, 2] = False
    before = pcfg_log_partition(terms, rules, roots, observed=observed).sum()
    m = pcfg_marginals(terms, rules, roots, observed=observed)
    rules2, roots2 = normalized(m["rules"].sum(0) + 1e-12, m["roots"].sum(0) + 1e-12, NT_, S)
    after = pcfg_log_partition(terms, rules2, roots2, observed=observed).sum()
    assert after.item() > before.item() + 1e-3
    # the trees found hold the brackets
    charts, _ = pcfg_decode(terms, rules2, roots2, observed=observed)
    assert bool((charts[:, 0, 2] >= 0)[:3].all()) and bool((charts[:, 3, 5] >= 0).all())


def test_the_refusals_name_the_field():
    terms, rules, roots, span = grammar(2, N, NT, T, seed=29)
    crossing = torch.full((2, N + 1, N + 1), -1, dtype=torch.int64)
    crossing[0, 0, 2] = crossing[0, 1, 3] = UNLABELED
    with pytest.raises(SSVMInputError, match="observed: row 0"):
        pcfg_log_partition(terms, rules, roots, span, observed=crossing)
    with pytest.raises(SSVMInputError, match="charts: row 0"):
        pcfg_hinge(terms, rules, roots, crossing, span, partial=True)
    label = torch.full((2, N + 1, N + 1), -1, dtype=torch.int64)
    label[1, 0, 3] = NT
    with pytest.raises(SSVMInputError, match=r"observed: row 1, span \(0, 3\): label 2, expected a nonterminal"):
        pcfg_decode(terms, rules, roots, span, observed=label)
    label[1, 0, 3], label[1, 2, 3] = -1, T
    with pytest.raises(SSVMInputError, match="expected a preterminal"):
        pcfg_marginals(terms, rules, roots, span, observed=label)
    with pytest.raises(SSVMInputError, match="observed"):
        pcfg_log_partition(terms, rules, roots, span, observed=torch.zeros(2, N, N, dtype=torch.int64))
    with pytest.raises(SSVMInputError, match="partial"):
        pcfg_crf_nll(terms, rules, roots, crossing, span, partial=1)
    # without partial=True a partial chart is not a tree
    with pytest.raises(SSVMInputError, match="charts: row 0"):
        pcfg_crf_nll(terms, rules, roots, torch.where(crossing == UNLABELED, 0, -1), span)
    # an observed preterminal that the terms forbid leaves C without a tree
    forbidden = terms.clone()
    forbidden[0, 1, 0] = float("-inf")
    tag = torch.full((2, N + 1, N + 1), -1, dtype=torch.int64)
    tag[0, 1, 2] = 0
    with pytest.raises(SSVMInputError, match="charts: row 0: every tree that contains the observed brackets"):
        pcfg_crf_nll(forbidden, rules, roots, tag, span, partial=True)
    assert pcfg_log_partition(forbidden, rules, roots, span, observed=tag)[0].item() == float("-inf")


def test_observed_brackets_on_every_row_shape_and_empty_batch():
    terms, rules, roots, span = grammar(3, N, NT, T, seed=31)
    none = torch.full((3, N + 1, N + 1), -1, dtype=torch.int64)
    lengths = torch.tensor([4, 2, 3])
    torch.testing.assert_close(pcfg_log_partition(terms, rules, roots, span, lengths=lengths, observed=none),
                               pcfg_log_partition(terms, rules, roots, span, lengths=lengths), rtol=0, atol=0)
    empty = pcfg_log_partition(terms[:0], rules[:0], roots[:0], span[:0], observed=none[:0])
    assert empty.shape == (0,)
    assert pcfg_crf_nll(terms[:0], rules[:0], roots[:0], none[:0], span[:0], partial=True).shape == (0,)


def test_docs_spans_partial_brackets_example_runs():
    """docs/spans.md's partial-brackets example as written: it runs, the completed trees hold every observed bracket
    with its given label, the expected counts put word 4 on preterminal 1, and the gradient is finite."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "spans.md").read_text()
    at = text.index("from ssvm_torch.spans import UNLABELED, pcfg_decode")
    block = text[text.rfind("```python", 0, at) + len("```python"):text.index("```", at)]
    names = {}
    exec(compile(block, "docs/spans.md", "exec"), names)
    done = names["completed"]
    assert bool((done[:, 0, 3] >= 0).all()) and bool((done[:, 5, 8] == 2).all()) and bool((done[:, 4, 5] == 1).all())
    torch.testing.assert_close(names["counts"]["terms"][:, 4, 1], torch.ones(names["B"]), rtol=0, atol=1e-5)
    assert bool(torch.isfinite(names["rules"].grad).all()) and names["rules"].grad.abs().sum() > 0
    assert bool((names["latent"] >= -1e-4).all())


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("device", DEVICES)
def test_the_torch_path_and_every_device_give_the_compiled_paths_values(device):
    """The partial losses, log Z_C and the completion through the torch pass (kernels="torch"; the path other
    devices run) and on ``device`` equal the CPU's default path (the compiled Viterbi)."""
    terms, rules, roots, span = grammar(4, N, NT, T, seed=41)
    lengths = torch.tensor([4, 4, 3, 4])
    _, charts = observed_rows(lengths, seed=9)
    want_hinge = pcfg_hinge(terms, rules, roots, charts, span, lengths=lengths, partial=True)
    want_tree, want_top = pcfg_decode(terms, rules, roots, span, lengths=lengths, observed=charts)
    want_z = pcfg_log_partition(terms, rules, roots, span, lengths=lengths, observed=charts)
    on = [x.to(device) for x in (terms, rules, roots, charts, span, lengths)]
    got_hinge = pcfg_hinge(*on[:5], lengths=on[5], partial=True, kernels="torch")
    got_tree, got_top = pcfg_decode(*on[:3], on[4], lengths=on[5], observed=on[3], kernels="torch")
    got_z = pcfg_log_partition(*on[:3], on[4], lengths=on[5], observed=on[3])
    torch.testing.assert_close(got_hinge.cpu(), want_hinge, rtol=0, atol=1e-10)
    torch.testing.assert_close(got_top.cpu(), want_top, rtol=0, atol=1e-10)
    torch.testing.assert_close(got_z.cpu(), want_z, rtol=0, atol=1e-10)
    assert torch.equal(got_tree.cpu(), want_tree)
