"""ConstituencyTree's entropy, KL divergence and cross-entropy (ssvm_torch/spans/information.py, through
trees/information.py's Information): against every binary tree enumerated (tests/span_reference.py), gradcheck,
SuPar's ConstituencyCRF entropy, the refusals."""
import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import ConstituencyTree
from span_reference import binary_trees


def _log_probs(S: torch.Tensor, n: int) -> torch.Tensor:
    totals = torch.tensor([sum(float(S[i, j]) for i, j in t) for t in binary_trees(0, n)], dtype=torch.float64)
    return totals - torch.logsumexp(totals, 0)


@pytest.mark.parametrize("kernels", ["auto", "torch"])
def test_entropy_kl_and_cross_entropy_equal_enumeration(kernels):
    g = torch.Generator().manual_seed(0)
    S, Q = (torch.randn(4, 7, 7, dtype=torch.float64, generator=g) for _ in range(2))
    S[0, 2, 4] = float("-inf")                        # a span no tree may take
    lengths = torch.tensor([6, 4, 1, 0])
    layer = ConstituencyTree(kernels=kernels)
    H, D, C = layer.entropy(S, lengths=lengths), layer.kl(S, Q, lengths=lengths), layer.cross_entropy(S, Q,
                                                                                                      lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        if n == 0:
            assert H[b] == 0 and D[b] == 0
            continue
        lp, lq = _log_probs(S[b], n), _log_probs(Q[b], n)
        p = lp.exp()
        assert H[b].item() == pytest.approx(-(p * torch.where(p > 0, lp, 0)).sum().item(), abs=1e-12)
        assert D[b].item() == pytest.approx((p * torch.where(p > 0, lp - lq, 0)).sum().item(), abs=1e-12)
        assert C[b].item() == pytest.approx(-(p * torch.where(p > 0, lq, 0)).sum().item(), abs=1e-11)
    assert H[2] == 0 and D[2] == 0                     # one word: one tree


def test_gradients_pass_gradcheck():
    g = torch.Generator().manual_seed(1)
    S, Q = (torch.randn(3, 6, 6, dtype=torch.float64, generator=g) for _ in range(2))
    lengths = torch.tensor([5, 3, 4])
    layer = ConstituencyTree()

    def both(S_, Q_):
        return torch.cat([layer.entropy(S_, lengths=lengths), layer.kl(S_, Q_, lengths=lengths)])

    assert torch.autograd.gradcheck(both, (S.requires_grad_(), Q.requires_grad_()))


def test_entropy_equals_supars():
    structs = pytest.importorskip("supar.structs")
    g = torch.Generator().manual_seed(2)
    S = torch.randn(3, 8, 8, dtype=torch.float64, generator=g)
    lengths = torch.tensor([7, 5, 3])
    theirs = structs.ConstituencyCRF(S, lengths).entropy
    torch.testing.assert_close(ConstituencyTree().entropy(S, lengths=lengths), theirs, rtol=0, atol=1e-10)


def test_refusals_name_the_field():
    layer, S = ConstituencyTree(), torch.randn(2, 5, 5, dtype=torch.float64)
    with pytest.raises(SSVMInputError, match="other_scores: expected the span scores' shape"):
        layer.kl(S, S[:, :4, :4])
    with pytest.raises(SSVMInputError, match="other_scores: expected scores without NaN"):
        layer.kl(S, torch.full_like(S, float("nan")))
    S[1, 0, 4] = float("-inf")                        # the root span of row 1: no tree
    with pytest.raises(SSVMInputError, match="span_scores: row 1"):
        layer.entropy(S)


def test_the_compiled_hessian_products_equal_autograd_twice():
    """CKY's expectation-semiring inside-outside (spans/numba_expectation.py), real space and its log-space fallback
    (row 2: spans 10^3 apart underflow the shifted chart), against autograd twice through the torch inside pass."""
    from ssvm_torch.spans.information import SpanTrees
    from ssvm_torch.spans.numba_expectation import hessian_vector_real
    g = torch.Generator().manual_seed(3)
    S, V = (torch.randn(4, 8, 8, dtype=torch.float64, generator=g) for _ in range(2))
    S[0, 1, 3] = float("-inf")
    S[2] = S[2] - 1000.0
    S[2, 0, 1] = 0.0                                    # one span far above the rest: Z' = e^-8000 after the shift
    lengths = torch.tensor([7, 3, 5, 0])
    assert not hessian_vector_real(S[2].numpy(), V[2].numpy(), 5, torch.zeros(8, 8, dtype=torch.float64).numpy())
    trees = SpanTrees("auto")
    fast, twice = trees.hessian_product(S, lengths, V), trees.hessian_product(S, lengths, V, autograd=True)
    torch.testing.assert_close(fast[[0, 1]], twice[[0, 1]], rtol=0, atol=1e-12)
    torch.testing.assert_close(fast[2], twice[2], rtol=0, atol=1e-10)     # log space at scores ~-8000: 1.2e-12 here
    assert fast.abs().max() > 0.1 and fast[3].abs().max() == 0


def _labeled_log_probs(S: torch.Tensor, lab: torch.Tensor, n: int) -> torch.Tensor:
    from span_reference import labeled_trees
    totals = torch.tensor([sum(float(S[i, j] + lab[i, j, r]) for (i, j), r in t.items())
                           for t in labeled_trees(n, lab.shape[2])], dtype=torch.float64)
    return totals - torch.logsumexp(totals, 0)


def test_labeled_entropy_and_kl_equal_enumeration_and_pass_gradcheck():
    """With label_scores the entropy / KL / cross-entropy are the labeled TreeCRF's (the one the layer's losses
    train with labels): against every labeled binary tree enumerated, with a -inf label under p and under q
    (the KL +inf where p gives it weight); gradcheck w.r.t. all four inputs; the refusals."""
    g = torch.Generator().manual_seed(3)
    B, N, L = 2, 5, 2
    S, Q = (torch.randn(B, N, N, dtype=torch.float64, generator=g) for _ in range(2))
    lab, labq = (torch.randn(B, N, N, L, dtype=torch.float64, generator=g) * 2 for _ in range(2))
    lab[0, 0, 2, 1] = float("-inf")                   # a label p forbids on one span: no NaN anywhere
    lengths = torch.tensor([4, 3])
    layer = ConstituencyTree()
    H = layer.entropy(S, lengths=lengths, label_scores=lab)
    D = layer.kl(S, Q, lengths=lengths, label_scores=lab, other_label_scores=labq)
    C = layer.cross_entropy(S, Q, lengths=lengths, label_scores=lab, other_label_scores=labq)
    for b, n in enumerate(lengths.tolist()):
        lp, lq = _labeled_log_probs(S[b], lab[b], n), _labeled_log_probs(Q[b], labq[b], n)
        p = lp.exp()
        assert H[b].item() == pytest.approx(-(p * torch.where(p > 0, lp, 0)).sum().item(), abs=1e-11)
        assert D[b].item() == pytest.approx((p * torch.where(p > 0, lp - lq, 0)).sum().item(), abs=1e-11)
        assert C[b].item() == pytest.approx(-(p * torch.where(p > 0, lq, 0)).sum().item(), abs=1e-10)
    assert (layer.entropy(S, lengths=lengths) < H).all()
    forbid = labq.clone()
    forbid[1, 0, 3, 0] = float("-inf")                # the root span's label 0 under q: p gives it weight
    assert layer.kl(S, Q, lengths=lengths, label_scores=lab, other_label_scores=forbid)[1] == float("inf")

    def both(S_, lab_, Q_, labq_):
        return torch.cat([layer.entropy(S_, lengths=lengths, label_scores=lab_),
                          layer.kl(S_, Q_, lengths=lengths, label_scores=lab_, other_label_scores=labq_)])

    assert torch.autograd.gradcheck(both, tuple(x.clone().requires_grad_() for x in (S, lab, Q, labq)))
    with pytest.raises(SSVMInputError, match="other_label_scores: expected given together with label_scores"):
        layer.kl(S, Q, lengths=lengths, label_scores=lab)
    with pytest.raises(SSVMInputError, match="other_label_scores: expected the label scores' shape"):
        layer.kl(S, Q, lengths=lengths, label_scores=lab, other_label_scores=labq[..., :1])
    with pytest.raises(SSVMInputError, match="other_label_scores: expected scores without NaN"):
        layer.kl(S, Q, lengths=lengths, label_scores=lab, other_label_scores=torch.full_like(labq, float("nan")))
