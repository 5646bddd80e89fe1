"""PCFGs in Chomsky normal form (ssvm_torch.spans.pcfg): log Z, the best tree, the score of given trees, the
expected counts and the three losses against brute-force enumeration of every labeled tree of small rows (each
tree scored here from the grammar's definition, not by the package: tests/pcfg_reference.py), against torch-struct's
SentCFG, gradcheck of the recomputing backward, forbidden (-inf) parts, and the refusals."""
from __future__ import annotations

import itertools

import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.spans import (pcfg_crf_nll, pcfg_decode, pcfg_entropy, pcfg_hinge, pcfg_log_partition, pcfg_marginals,
                              pcfg_score, pcfg_softmax_margin)

from pcfg_reference import brute, chart_of, grammar, labeled_pcfg_trees, parent_children, tree_score

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("with_span", [False, True], ids=["rules only", "span scores"])
def test_log_z_best_tree_score_and_counts_equal_enumeration(with_span):
    NT, T, N = 2, 2, 4
    terms, rules, roots, span = grammar(3, N, NT, T, seed=1, span=with_span)
    lengths = torch.tensor([4, 3, 2])
    logz = pcfg_log_partition(terms, rules, roots, span, lengths=lengths)
    charts, best = pcfg_decode(terms, rules, roots, span, lengths=lengths)
    marg = pcfg_marginals(terms, rules, roots, span, lengths=lengths)
    for b in range(3):
        n = int(lengths[b])
        z, top, labels, counts = brute(terms[b], rules[b], roots[b], None if span is None else span[b], n, NT, T)
        assert logz[b].item() == pytest.approx(z, abs=1e-10)
        assert best[b].item() == pytest.approx(top, abs=1e-10)
        assert torch.equal(charts[b], chart_of(labels, N + 1))
        torch.testing.assert_close(marg["terms"][b], counts["terms"], rtol=0, atol=1e-10)
        torch.testing.assert_close(marg["rules"][b], counts["rules"], rtol=0, atol=1e-10)
        torch.testing.assert_close(marg["roots"][b], counts["roots"], rtol=0, atol=1e-10)
    # every tree's score through pcfg_score equals the definition's (row 1: 3 words)
    for labels, children in itertools.islice(labeled_pcfg_trees(3, NT, T), 0, None, 7):
        chart = torch.full((3, N + 1, N + 1), -1, dtype=torch.int64)
        chart[1] = chart_of(labels, N + 1)
        chart[0] = charts[0]
        chart[2] = charts[2]
        got = pcfg_score(terms, rules, roots, chart, span, lengths=lengths)[1].item()
        want = tree_score(terms[1], rules[1], roots[1], None if span is None else span[1], 3, labels, children, NT)
        assert got == pytest.approx(want, abs=1e-12)


def test_span_marginals_are_the_labeled_constituents_probabilities():
    NT, T, N = 2, 2, 4
    terms, rules, roots, span = grammar(1, N, NT, T, seed=3)
    marg = pcfg_marginals(terms, rules, roots, span)
    want = torch.zeros(N + 1, N + 1, NT, dtype=torch.float64)
    trees = list(labeled_pcfg_trees(N, NT, T))
    t = torch.tensor([tree_score(terms[0], rules[0], roots[0], span[0], N, lab, ch, NT) for lab, ch in trees],
                     dtype=torch.float64)
    for (labels, _), w in zip(trees, torch.softmax(t, 0).tolist()):
        for (i, j), lab in labels.items():
            if j - i >= 2:
                want[i, j, lab] += w
    torch.testing.assert_close(marg["spans"][0], want, rtol=0, atol=1e-10)
    assert marg["log_z"][0].item() == pytest.approx(float(torch.logsumexp(t, 0)), abs=1e-10)


@pytest.mark.parametrize("cost", [1.0, 0.7])
def test_the_three_losses_equal_enumeration(cost):
    NT, T, N = 2, 2, 4
    terms, rules, roots, span = grammar(2, N, NT, T, seed=5)
    lengths = torch.tensor([4, 3])
    golds = [next(itertools.islice(labeled_pcfg_trees(int(n), NT, T), 11 * b + 3, None))[0]
             for b, n in enumerate(lengths)]
    charts = torch.stack([chart_of(g, N + 1) for g in golds])
    args = (terms, rules, roots, charts, span)
    got = {"hinge": pcfg_hinge(*args, lengths=lengths, cost=cost),
           "softmax_margin": pcfg_softmax_margin(*args, lengths=lengths, cost=cost),
           "crf": pcfg_crf_nll(*args, lengths=lengths)}
    for b in range(2):
        n = int(lengths[b])
        row = (terms[b], rules[b], roots[b], span[b], n, NT, T)
        gold_score = tree_score(terms[b], rules[b], roots[b], span[b], n, golds[b],
                                parent_children(set(golds[b])), NT)
        z_aug, top_aug, _, _ = brute(*row, gold=golds[b], cost=cost)
        z, _, _, _ = brute(*row)
        assert got["hinge"][b].item() == pytest.approx(top_aug - gold_score, abs=1e-10)
        assert got["softmax_margin"][b].item() == pytest.approx(z_aug - gold_score, abs=1e-10)
        assert got["crf"][b].item() == pytest.approx(z - gold_score, abs=1e-10)
        assert got["hinge"][b].item() >= 0


def test_the_hinge_is_zero_and_its_gradient_zero_where_the_gold_tree_wins_by_the_margin():
    NT, T, N = 2, 3, 5
    terms, rules, roots, _ = grammar(1, N, NT, T, seed=7, span=False)
    gold, _ = pcfg_decode(terms * 10, rules * 10, roots * 10)
    leaves = [x.mul(10).requires_grad_() for x in (terms, rules, roots)]
    loss = pcfg_hinge(*leaves, gold, cost=0.01)
    loss.sum().backward()
    assert loss.item() == 0
    assert all(x.grad.abs().max() == 0 for x in leaves)


def test_equal_torch_structs_sentcfg():
    torch_struct = pytest.importorskip("torch_struct")
    NT, T, N = 4, 5, 7
    g = torch.Generator().manual_seed(11)
    S = NT + T
    terms = torch.randn(4, N, T, generator=g, dtype=torch.float64).log_softmax(-1)
    rules = torch.randn(4, NT, S * S, generator=g, dtype=torch.float64).log_softmax(-1).view(4, NT, S, S)
    roots = torch.randn(4, NT, generator=g, dtype=torch.float64).log_softmax(-1)
    lengths = torch.tensor([7, 5, 4, 2])
    dist = torch_struct.SentCFG((terms, rules, roots), lengths=lengths)
    torch.testing.assert_close(pcfg_log_partition(terms, rules, roots, lengths=lengths), dist.partition.detach(),
                               rtol=0, atol=1e-10)
    _, best = pcfg_decode(terms, rules, roots, lengths=lengths)
    torch.testing.assert_close(best, dist.max.detach(), rtol=0, atol=1e-10)
    marg = pcfg_marginals(terms, rules, roots, lengths=lengths)
    for key, theirs in zip(("terms", "rules", "roots"), dist.marginals[:3]):
        torch.testing.assert_close(marg[key], theirs.detach(), rtol=0, atol=1e-10)
    torch.testing.assert_close(pcfg_entropy(terms, rules, roots, lengths=lengths), dist.entropy.detach(),
                               rtol=0, atol=1e-10)


def test_the_recomputing_backward_passes_gradcheck():
    NT, T, N = 2, 2, 4
    terms, rules, roots, span = grammar(2, N, NT, T, seed=13)
    leaves = [x.requires_grad_() for x in (terms, rules, roots, span)]
    lengths = torch.tensor([4, 3])
    assert torch.autograd.gradcheck(lambda *a: pcfg_log_partition(*a, lengths=lengths), leaves)
    charts, _ = pcfg_decode(terms, rules, roots, span, lengths=lengths)
    assert torch.autograd.gradcheck(lambda *a: pcfg_softmax_margin(*a[:3], charts, a[3], lengths=lengths), leaves)


def test_forbidden_parts_and_rows_without_a_tree():
    """-inf rules, preterminals and roots are never taken (log Z and the best tree over the allowed trees only,
    finite gradients); a row whose every tree is forbidden has log Z = best score = -inf and a zero gradient."""
    NT, T, N = 2, 2, 4
    terms, rules, roots, _ = grammar(2, N, NT, T, seed=17, span=False)
    rules[:, 1, NT:, NT:] = float("-inf")           # nonterminal 1 never rewrites to two preterminals
    terms[:, 2, 0] = float("-inf")                  # word 2 is never preterminal 0
    roots[1] = float("-inf")                        # row 1: no root at all
    leaves = [x.clone().requires_grad_() for x in (terms, rules, roots)]
    logz = pcfg_log_partition(*leaves)
    charts, best = pcfg_decode(terms, rules, roots)
    z, top, labels, _ = brute(terms[0], rules[0], roots[0], None, N, NT, T)
    assert logz[0].item() == pytest.approx(z, abs=1e-10) and best[0].item() == pytest.approx(top, abs=1e-10)
    assert torch.equal(charts[0], chart_of(labels, N + 1))
    assert charts[0, 2, 3] == 1
    assert logz[1].item() == float("-inf") and best[1].item() == float("-inf")
    logz[0].backward()
    assert all(bool(torch.isfinite(x.grad).all()) for x in leaves)


@pytest.mark.parametrize("device", DEVICES)
def test_shared_grammar_half_precision_empty_batch_and_inference_mode(device):
    NT, T, N = 3, 4, 6
    terms, rules, roots, span = grammar(3, N, NT, T, seed=19, device=device)
    lengths = torch.tensor([6, 4, 2], device=device)
    per_row = pcfg_log_partition(terms, rules[0].expand(3, -1, -1, -1), roots[0].expand(3, -1), span,
                                 lengths=lengths)
    torch.testing.assert_close(pcfg_log_partition(terms, rules[0], roots[0], span, lengths=lengths), per_row)
    low = pcfg_log_partition(terms.half(), rules.half(), roots.half(), span.half(), lengths=lengths)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low.double(), pcfg_log_partition(*(x.half().double() for x in (terms, rules, roots,
                                                                                               span)),
                                                                lengths=lengths), rtol=1e-5, atol=1e-4)
    mask = torch.arange(N, device=device)[None, :] < lengths[:, None]
    torch.testing.assert_close(pcfg_log_partition(terms, rules, roots, span, mask=mask),
                               pcfg_log_partition(terms, rules, roots, span, lengths=lengths))
    with torch.inference_mode():
        marg = pcfg_marginals(terms, rules, roots, span, lengths=lengths)
    torch.testing.assert_close(marg["log_z"], pcfg_log_partition(terms, rules, roots, span, lengths=lengths))
    empty = pcfg_log_partition(terms[:0], rules[:0], roots[:0], span[:0], lengths=lengths[:0])
    charts, best = pcfg_decode(terms[:0], rules[:0], roots[:0], span[:0], lengths=lengths[:0])
    assert empty.shape == (0,) and charts.shape == (0, N + 1, N + 1) and best.shape == (0,)


def test_the_refusals_name_the_field():
    NT, T, N = 2, 3, 4
    terms, rules, roots, _ = grammar(2, N, NT, T, seed=23, span=False)
    gold, _ = pcfg_decode(terms, rules, roots)
    cases = [
        (lambda: pcfg_log_partition(terms[0], rules, roots), "terms"),
        (lambda: pcfg_log_partition(terms, rules[:, :, :4], roots), "rules"),
        (lambda: pcfg_log_partition(terms, rules, roots[:, :1]), "rules"),          # NT from roots: 1 != 2
        (lambda: pcfg_log_partition(terms, rules, roots, torch.zeros(2, N, N, NT, dtype=torch.float64)),
         "span_scores"),
        (lambda: pcfg_log_partition(terms, rules, roots, lengths=torch.tensor([4, 1])), "lengths"),
        (lambda: pcfg_log_partition(terms, rules, roots, mask=torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]]).bool()),
         "mask"),
        (lambda: pcfg_log_partition(terms.clone().fill_(float("nan")), rules, roots), "terms"),
        (lambda: pcfg_hinge(terms, rules, roots, gold.float()), "charts"),
    ]
    crossing = gold.clone()
    crossing[0] = -1
    crossing[0, 0, 4], crossing[0, 0, 3], crossing[0, 3, 4] = 0, 0, 0
    crossing[0, 0, 2], crossing[0, 1, 3] = 0, 0                       # (0, 2) and (1, 3) cross
    for i in range(4):
        crossing[0, i, i + 1] = 0
    cases.append((lambda: pcfg_crf_nll(terms, rules, roots, crossing), "charts: row 0 is not a binary tree"))
    bad_tag = gold.clone()
    bad_tag[1, 2, 3] = T                                               # a preterminal out of [0, T)
    cases.append((lambda: pcfg_score(terms, rules, roots, bad_tag), "charts: row 1, span (2, 3)"))
    bad_label = gold.clone()
    bad_label[0, 0, 4] = NT                                            # the root's nonterminal out of [0, NT)
    cases.append((lambda: pcfg_score(terms, rules, roots, bad_label), "a nonterminal in [0, 2)"))
    for call, field in cases:
        with pytest.raises(SSVMInputError, match=field.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            call()


def test_the_scaled_products_equal_the_log_space_step_with_and_without_the_fallback():
    """GroupInside (matrix products in scaled real space) against the log-space step, values and every gradient,
    on a batch of which some spans' sums fall below sqrt(tiny): their likely children meet only rules 400 nats
    down (float64: e^-400 < 1.5e-154), and forbidden rules (-1e30) make exact zeros."""
    from ssvm_torch.spans.pcfg_products import GroupInside, log_space
    g = torch.Generator().manual_seed(29)
    B, n, U, SL, SR, NT = 3, 4, 2, 3, 4, 5
    left = torch.randn(B, n, U, SL, generator=g, dtype=torch.float64)
    right = torch.randn(B, n, U, SR, generator=g, dtype=torch.float64)
    rules = torch.randn(B, NT, SL, SR, generator=g, dtype=torch.float64)
    left[0, 1, :, 0] += 400                                 # span (0, 1)'s children favour left symbol 0 ...
    rules[0, :, 0] -= 400                                   # ... which every rule of row 0 makes unlikely
    rules[1, 2] = -1e30                                     # row 1: nonterminal 2 is forbidden
    leaves = [x.requires_grad_() for x in (left, right, rules)]
    got = GroupInside.apply(*leaves)
    want = log_space(*leaves)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-9)
    w = torch.randn(B, n, NT, generator=g, dtype=torch.float64)
    w[1, :, 2] = 0                       # a forbidden nonterminal's value (-1e30) never reaches a root's sum
    for a, b in zip(torch.autograd.grad((got * w).sum(), leaves), torch.autograd.grad((want * w).sum(), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda *a: GroupInside.apply(*a)[0, 1], leaves)


def test_float32_grammars_whose_products_underflow_equal_float64():
    """A float32 grammar whose words all favour preterminal 0 by 120 nats while nonterminal 2 (which the root
    favours) puts preterminal 0 on the left 120 nats down: the products of its two-word spans underflow float32
    (e^-120) and take the log-space fallback; log Z, the expected counts and the best tree are float64's."""
    NT, T, N = 3, 4, 6
    terms, rules, roots, span = grammar(2, N, NT, T, seed=31)
    terms[:, :, 0] += 120
    rules[:, 2, NT] -= 120
    roots[:, 2] += 150
    logz64 = pcfg_log_partition(terms, rules, roots, span)
    marg64 = pcfg_marginals(terms, rules, roots, span)
    low = [x.float() for x in (terms, rules, roots, span)]
    torch.testing.assert_close(pcfg_log_partition(*low).double(), logz64, rtol=1e-6, atol=1e-4)
    marg32 = pcfg_marginals(*low)
    for key in ("terms", "rules", "roots", "spans"):
        torch.testing.assert_close(marg32[key].double(), marg64[key], rtol=0, atol=1e-4)
    assert torch.equal(pcfg_decode(*low)[0], pcfg_decode(terms, rules, roots, span)[0])


def test_docs_spans_pcfg_example_runs():
    """docs/spans.md's PCFG example as written: it runs, its backward leaves a finite gradient on the rules, the
    Viterbi trees score what pcfg_decode says and the expected counts of every row's preterminals sum to its length."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "spans.md").read_text()
    at = text.index("from ssvm_torch.spans import (pcfg_crf_nll")
    block = text[text.rfind("```python", 0, at) + len("```python"):text.index("```", at)]
    names = {}
    exec(compile(block, "docs/spans.md", "exec"), names)
    assert bool(torch.isfinite(names["rules"].grad).all()) and names["rules"].grad.abs().sum() > 0
    got = pcfg_score(names["terms"], names["rules"].detach(), names["roots"], names["charts"],
                     lengths=names["lengths"])
    torch.testing.assert_close(got, names["scores"], rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(names["counts"]["terms"].sum((1, 2)), names["lengths"].float(), rtol=1e-5, atol=1e-4)
    assert bool((names["loss"] >= -1e-4).all())


def test_the_mbr_tree_holds_the_most_expected_correct_labeled_spans():
    """decode(mbr=True) against enumeration: of every tree of the grammar's shape (any labels), the one whose
    labeled spans (preterminals on the one-word spans) have the largest summed marginal probability; its score is
    that sum."""
    NT, T, N = 2, 3, 4
    terms, rules, roots, span = grammar(2, N, NT, T, seed=73)
    lengths = torch.tensor([4, 3])
    charts, gains = pcfg_decode(terms, rules, roots, span, lengths=lengths, mbr=True)
    marg = pcfg_marginals(terms, rules, roots, span, lengths=lengths)
    for b in range(2):
        n = int(lengths[b])
        best, best_labels = -1.0, None
        for labels, _ in labeled_pcfg_trees(n, NT, T):
            gain = sum(float(marg["terms"][b, i, lab]) if j - i == 1 else float(marg["spans"][b, i, j, lab])
                       for (i, j), lab in labels.items())
            if gain > best + 1e-12:
                best, best_labels = gain, labels
        assert gains[b].item() == pytest.approx(best, abs=1e-10)
        assert torch.equal(charts[b], chart_of(best_labels, N + 1))
    with pytest.raises(SSVMInputError, match="mbr"):
        pcfg_decode(terms, rules, roots, mbr="yes")


def test_autocast_computes_in_the_inputs_dtype():
    """Under CPU bfloat16 autocast (mixed-precision training) log Z, its gradient and the losses are float32's: the
    inside pass's matrix products ran in bfloat16 there (log Z off by 3e-3 at B 2 of 5 words)."""
    NT, T, N = 3, 4, 5
    terms, rules, roots, _ = (x.float() if x is not None else None for x in grammar(2, N, NT, T, seed=79, span=False))
    gold, _ = pcfg_decode(terms, rules, roots)
    want = pcfg_log_partition(terms, rules, roots)
    r = rules.clone().requires_grad_()
    (want_grad,) = torch.autograd.grad(pcfg_log_partition(terms, r, roots).sum(), r)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = pcfg_log_partition(terms, r, roots)
        (got_grad,) = torch.autograd.grad(got.sum(), r)
        crf = pcfg_crf_nll(terms, rules, roots, gold)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(crf, pcfg_crf_nll(terms, rules, roots, gold), rtol=1e-6, atol=1e-5)


def test_the_optimistic_pass_checks_its_low_sums_once(monkeypatch):
    """log Z runs its group steps without a host check each (one check of every group's low sums at the end, the
    GPU's one synchronization); only a pass with low sums runs again with each group checking (and then agrees
    with float64)."""
    import ssvm_torch.spans.pcfg_products as products
    calls = []
    real = products._flagged
    monkeypatch.setattr(products, "_flagged", lambda sums: calls.append(1) or real(sums))
    NT, T, N = 3, 4, 6
    terms, rules, roots, span = grammar(2, N, NT, T, seed=83)
    pcfg_log_partition(terms, rules, roots, span)
    assert calls == []
    terms[:, :, 0] += 120
    rules[:, 2, NT] -= 120
    low = pcfg_log_partition(*(x.float() for x in (terms, rules, roots, span)))
    assert len(calls) == 1 + 2 + 3 * (N - 3)            # the rerun: every group of every width (1, 2, then 3 a width)
    torch.testing.assert_close(low.double(), pcfg_log_partition(terms, rules, roots, span), rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_compiled_viterbi_equals_the_torch_pass(dtype):
    """pcfg_decode's compiled kernel (CPU float32 / float64) against the torch max-plus pass: the same trees and
    scores over random grammars with span scores, rows of every length, forbidden parts; the hinge (whose
    loss-augmented tree it decodes) equal too; a bad ``kernels`` refused by name."""
    NT, T, N = 3, 4, 9
    for seed in range(4):
        terms, rules, roots, span = (x.to(dtype) for x in grammar(5, N, NT, T, seed=89 + seed))
        rules[:, 1, NT:, :NT] = float("-inf")
        terms[:, 3, 2] = float("-inf")
        lengths = torch.tensor([9, 7, 4, 3, 2])
        got = pcfg_decode(terms, rules, roots, span, lengths=lengths, kernels="numba")
        want = pcfg_decode(terms, rules, roots, span, lengths=lengths, kernels="torch")
        assert torch.equal(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        torch.testing.assert_close(pcfg_score(terms, rules, roots, got[0], span, lengths=lengths), got[1])
        gold = pcfg_decode(terms, rules.flip(0), roots, span, lengths=lengths)[0]          # other trees
        torch.testing.assert_close(pcfg_hinge(terms, rules, roots, gold, span, lengths=lengths, kernels="numba"),
                                   pcfg_hinge(terms, rules, roots, gold, span, lengths=lengths, kernels="torch"))
    with pytest.raises(SSVMInputError, match="kernels"):
        pcfg_decode(terms, rules, roots, kernels="triton")


def test_the_parallel_kernel_equals_the_serial_one():
    """viterbi_batch_parallel (rows over numba's threads, what B >= 8 with two or more threads runs) against
    viterbi_batch, with and without span scores (a prange index once made the span row's index a float)."""
    import numpy as np
    from ssvm_torch.spans.numba_pcfg import viterbi_batch, viterbi_batch_parallel
    from ssvm_torch.spans.torch_pcfg import masked
    NT, T, N = 3, 4, 7
    for with_span in (False, True):
        terms, rules, roots, span = grammar(9, N, NT, T, seed=97, span=with_span)
        lengths = torch.tensor([7, 6, 5, 4, 3, 2, 7, 7, 2])
        parts = [None if x is None else x.contiguous().numpy()
                 for x in masked(terms, rules, roots, span, lengths)]
        sp = parts[3] if with_span else np.zeros((9, 1, 1, 1))
        out = []
        for kernel in (viterbi_batch, viterbi_batch_parallel):
            charts, scores = np.full((9, N + 1, N + 1), -1, dtype=np.int64), np.empty(9)
            kernel(*parts[:3], sp, with_span, lengths.numpy(), charts, scores)
            out.append((charts, scores))
        assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])
        want = pcfg_decode(terms, rules, roots, span, lengths=lengths, kernels="torch")
        assert np.array_equal(out[1][0], want[0].numpy())
