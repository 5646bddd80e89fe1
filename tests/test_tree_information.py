"""DependencyTree's entropy, KL divergence and cross-entropy (ssvm_torch/trees/information.py): against every tree
enumerated (tests/tree_reference.py), projective or not, single- or multi-root, compiled or torch kernels; the
Hessian-vector-product gradients by gradcheck; the refusals."""
import numpy as np
import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import DependencyTree
from tree_reference import all_trees, labeled_tree_log_probs, tree_scores

SHAPES = [(projective, multiroot) for projective in (True, False) for multiroot in (False, True)]


def _scores(seed: int, B: int = 4, N: int = 6):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, N, N, dtype=torch.float64, generator=g) * 2,
            torch.randn(B, N, N, dtype=torch.float64, generator=g))


@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("projective, multiroot", SHAPES)
def test_entropy_kl_and_cross_entropy_equal_enumeration(projective, multiroot, kernels):
    layer = DependencyTree(projective=projective, multiroot=multiroot, kernels=kernels)
    S, Q = _scores(0)
    lengths = torch.tensor([5, 3, 0, 1])
    H, D = layer.entropy(S, lengths=lengths), layer.kl(S, Q, lengths=lengths)
    C = layer.cross_entropy(S, Q, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, projective, multiroot)
        sp, sq = tree_scores(S[b].numpy(), trees), tree_scores(Q[b].numpy(), trees)
        lp, lq = sp - np.logaddexp.reduce(sp), sq - np.logaddexp.reduce(sq)
        p = np.exp(lp)
        assert H[b].item() == pytest.approx(-(p * lp).sum(), abs=1e-12)
        assert D[b].item() == pytest.approx((p * (lp - lq)).sum(), abs=1e-12)
        assert C[b].item() == pytest.approx(-(p * lq).sum(), abs=1e-11)
    assert H[2] == 0 and H[3] == 0                 # no word, or one word with one possible head
    assert layer.kl(S, S, lengths=lengths).abs().max() < 1e-12


@pytest.mark.parametrize("projective, multiroot", [(True, False), (False, False), (False, True)])
def test_entropy_and_kl_gradients_pass_gradcheck(projective, multiroot):
    layer = DependencyTree(projective=projective, multiroot=multiroot)
    S, Q = _scores(1, B=3, N=5)
    lengths = torch.tensor([4, 2, 3])
    S[2, 2, 1] = float("-inf")                     # an arc that may not go: no NaN anywhere

    def both(S_, Q_):
        return torch.cat([layer.entropy(S_, lengths=lengths), layer.kl(S_, Q_, lengths=lengths)])

    assert torch.autograd.gradcheck(both, (S.requires_grad_(), Q.requires_grad_()))


def test_dtype_mask_and_the_infinite_kl():
    layer = DependencyTree(projective=False)
    S, Q = _scores(2)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, 1:5] = True
    H32 = layer.entropy(S.float(), mask)
    assert H32.dtype == torch.float32
    torch.testing.assert_close(H32.double(), layer.entropy(S, mask), rtol=0, atol=1e-5)
    Q[0, 3, :] = float("-inf")
    Q[0, 3, 1] = 0.0                                 # q: word 3 can only take head 1; p gives other heads weight
    D = layer.kl(S, Q, mask)
    assert torch.isinf(D[0]) and torch.isfinite(D[1:]).all()


def test_refusals_name_the_field():
    layer, (S, Q) = DependencyTree(), _scores(3)
    with pytest.raises(SSVMInputError, match="other_scores: expected the arc scores' shape"):
        layer.kl(S, Q[:, :5, :5])
    with pytest.raises(SSVMInputError, match="other_scores: expected a float tensor"):
        layer.kl(S, Q.long())
    with pytest.raises(SSVMInputError, match="other_scores: expected scores without NaN"):
        layer.cross_entropy(S, torch.full_like(Q, float("nan")))
    S[1, 1:, 0] = float("-inf")                      # single root: no word may attach to the root in row 1
    with pytest.raises(SSVMInputError, match="row 1"):
        layer.entropy(S)


@pytest.mark.parametrize("multiroot", [False, True])
@pytest.mark.parametrize("projective", [True, False])
def test_the_hessian_products_equal_autograd_twice(projective, multiroot):
    """The backward's products -- the expectation-semiring inside-outside (trees/numba_expectation.py) and the
    matrix-tree closed form -- against d^2 log Z / dS^2 v by autograd twice through a torch log Z, with an arc
    that may not go and sentences of 0, 1 and 3 words."""
    from ssvm_torch.trees.information import hessian_product
    S, V = _scores(4, B=4, N=7)
    S[0, 3, 2] = float("-inf")
    lengths = torch.tensor([6, 3, 0, 1])
    fast = hessian_product(S, lengths, projective, multiroot, V, compiled=True)
    twice = hessian_product(S, lengths, projective, multiroot, V, autograd=True)
    torch.testing.assert_close(fast, twice, rtol=0, atol=1e-12)
    assert fast.abs().max() > 0.1 and fast[2].abs().max() == 0


def test_the_real_space_pass_hands_an_underflowing_sentence_to_the_log_space_one():
    """Words 1 and 2 prefer each other as heads (a cycle) and every tree needs a root arc 10^3 below: the shifted
    real-space chart underflows (Z' < 1e-200), the log-space pass takes the sentence, the product is still exact."""
    from ssvm_torch.trees.information import hessian_product
    from ssvm_torch.trees.numba_expectation import hessian_vector_real
    S = torch.full((1, 3, 3), -5.0, dtype=torch.float64)
    S[0, 1, 2] = S[0, 2, 1] = 0.0
    S[0, 1, 0] = S[0, 2, 0] = -1000.0
    V = torch.randn(1, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    assert not hessian_vector_real(S[0].numpy(), V[0].numpy(), 2, False, torch.zeros(3, 3, dtype=torch.float64).numpy())
    lengths = torch.tensor([2])
    torch.testing.assert_close(hessian_product(S, lengths, True, False, V, compiled=True),
                               hessian_product(S, lengths, True, False, V, autograd=True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("first_child", [False, True])
@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("multiroot", [False, True])
def test_second_order_entropy_and_kl_equal_enumeration(multiroot, kernels, first_child):
    """With sib_scores the layer's entropy / KL / cross-entropy are those of the second-order CRF (SuPar's
    Dependency2oCRF.entropy / .kl): against every projective tree enumerated, with its adjacent siblings."""
    from tree_reference import sibling_tree_scores
    g = torch.Generator().manual_seed(6)
    S, Q = (torch.randn(3, 6, 6, dtype=torch.float64, generator=g) for _ in range(2))
    SB, QB = (torch.randn(3, 6, 6, 6, dtype=torch.float64, generator=g) for _ in range(2))
    lengths = torch.tensor([5, 3, 0])
    layer = DependencyTree(multiroot=multiroot, kernels=kernels, first_child=first_child)
    H = layer.entropy(S, lengths=lengths, sib_scores=SB)
    D = layer.kl(S, Q, lengths=lengths, sib_scores=SB, other_sib_scores=QB)
    C = layer.cross_entropy(S, Q, lengths=lengths, sib_scores=SB, other_sib_scores=QB)
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, True, multiroot)
        sp = sibling_tree_scores(S[b].numpy(), SB[b].numpy(), trees, first_child)
        sq = sibling_tree_scores(Q[b].numpy(), QB[b].numpy(), trees, first_child)
        lp, lq = sp - np.logaddexp.reduce(sp), sq - np.logaddexp.reduce(sq)
        p = np.exp(lp)
        assert H[b].item() == pytest.approx(-(p * lp).sum(), abs=1e-12)
        assert D[b].item() == pytest.approx((p * (lp - lq)).sum(), abs=1e-12)
        assert C[b].item() == pytest.approx(-(p * lq).sum(), abs=1e-11)
    assert H[2] == 0 and D[2] == 0


def test_second_order_gradients_pass_gradcheck_and_refusals():
    layer = DependencyTree()
    g = torch.Generator().manual_seed(7)
    S, Q = (torch.randn(2, 5, 5, dtype=torch.float64, generator=g) for _ in range(2))
    SB, QB = (torch.randn(2, 5, 5, 5, dtype=torch.float64, generator=g) for _ in range(2))
    SB[0, 2, 1, 3] = float("-inf")                 # a sibling pair that may not occur: no NaN anywhere
    lengths = torch.tensor([4, 3])

    def both(S_, SB_, Q_, QB_):
        return torch.cat([layer.entropy(S_, lengths=lengths, sib_scores=SB_),
                          layer.kl(S_, Q_, lengths=lengths, sib_scores=SB_, other_sib_scores=QB_)])

    assert torch.autograd.gradcheck(both, tuple(x.requires_grad_() for x in (S, SB, Q, QB)))
    with pytest.raises(SSVMInputError, match="other_sib_scores: expected given together with sib_scores"):
        layer.kl(S, Q, lengths=lengths, sib_scores=SB)
    with pytest.raises(SSVMInputError, match="other_sib_scores: expected given together with sib_scores"):
        layer.kl(S, Q, lengths=lengths, other_sib_scores=QB)
    with pytest.raises(SSVMInputError, match="other_sib_scores: expected shape"):
        layer.kl(S, Q, lengths=lengths, sib_scores=SB, other_sib_scores=QB[:, :4])
    with pytest.raises(SSVMInputError, match="sib_scores: expected a layer with projective=True"):
        DependencyTree(projective=False).entropy(S, lengths=lengths, sib_scores=SB)


@pytest.mark.parametrize("multiroot", [False, True])
def test_the_second_order_hessian_products_equal_autograd_twice(multiroot):
    """The compiled forward-mode inside-outside (trees/numba_sibling_expectation.py) against autograd twice through
    the torch second-order inside pass, over arcs and sibling pairs, with an absent arc, an absent sibling pair and
    sentences of 0, 1 and 4 words."""
    from ssvm_torch.trees.information import SiblingFactored
    g = torch.Generator().manual_seed(8)
    S, V = (torch.randn(4, 8, 8, dtype=torch.float64, generator=g) * 2 for _ in range(2))
    SB, VB = (torch.randn(4, 8, 8, 8, dtype=torch.float64, generator=g) * 2 for _ in range(2))
    S[0, 3, 2], SB[1, 4, 2, 3] = float("-inf"), float("-inf")
    lengths = torch.tensor([7, 4, 0, 1])
    parts = SiblingFactored(8, multiroot, "auto")
    P, Vp = parts.pack(S, SB), parts.pack(V, VB)
    fast, twice = parts.hessian_product(P, lengths, Vp), parts.hessian_product(P, lengths, Vp, autograd=True)
    torch.testing.assert_close(fast, twice, rtol=0, atol=1e-12)
    arcs, sibs = parts.unpack(fast)
    assert arcs.abs().max() > 0.1 and sibs.abs().max() > 0.1 and fast[2].abs().max() == 0


@pytest.mark.parametrize("projective, multiroot, second_order",
                         [(True, False, False), (False, True, False), (True, True, True)])
def test_labeled_entropy_and_kl_equal_enumeration_and_pass_gradcheck(projective, multiroot, second_order):
    """With label_scores the entropy / KL / cross-entropy are those of the labeled CRF the layer's crf loss trains
    (trees and relations), the chain rule H(y, r) = H(y) + E[H(r | y)]: against every (tree, relation sequence)
    enumerated, first and second order; gradients w.r.t. every input by gradcheck; the pairing refusals."""
    g = torch.Generator().manual_seed(8)
    B, N, L = 2, 4, 3
    S, Q = (torch.randn(B, N, N, dtype=torch.float64, generator=g) for _ in range(2))
    lab, labq = (torch.randn(B, N, N, L, dtype=torch.float64, generator=g) * 2 for _ in range(2))
    SB, QB = ((torch.randn(B, N, N, N, dtype=torch.float64, generator=g) for _ in range(2)) if second_order
              else (None, None))
    lengths = torch.tensor([3, 2])
    layer = DependencyTree(projective=projective, multiroot=multiroot)
    kw = dict(lengths=lengths, sib_scores=SB, label_scores=lab)
    other = dict(other_sib_scores=QB, other_label_scores=labq)
    H, D, C = layer.entropy(**kw, arc_scores=S), layer.kl(S, Q, **kw, **other), layer.cross_entropy(S, Q, **kw, **other)
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, projective, multiroot)
        np_ = lambda x: None if x is None else x[b].numpy()      # noqa: E731
        lp = labeled_tree_log_probs(S[b].numpy(), np_(SB), lab[b].numpy(), trees, n)
        lq = labeled_tree_log_probs(Q[b].numpy(), np_(QB), labq[b].numpy(), trees, n)
        p = np.exp(lp)
        assert H[b].item() == pytest.approx(-(p * lp).sum(), abs=1e-11)
        assert D[b].item() == pytest.approx((p * (lp - lq)).sum(), abs=1e-11)
        assert C[b].item() == pytest.approx(-(p * lq).sum(), abs=1e-10)
    assert layer.entropy(S, lengths=lengths, sib_scores=SB).lt(H).all()       # relations add uncertainty

    def both(S_, lab_, Q_, labq_):
        return torch.cat([layer.entropy(S_, lengths=lengths, sib_scores=SB, label_scores=lab_),
                          layer.kl(S_, Q_, lengths=lengths, sib_scores=SB, other_sib_scores=QB, label_scores=lab_,
                                   other_label_scores=labq_)])

    assert torch.autograd.gradcheck(both, tuple(x.clone().requires_grad_() for x in (S, lab, Q, labq)))
    with pytest.raises(SSVMInputError, match="other_label_scores: expected given together with label_scores"):
        layer.kl(S, Q, lengths=lengths, sib_scores=SB, other_sib_scores=QB, label_scores=lab)
    with pytest.raises(SSVMInputError, match="other_label_scores: expected given together with label_scores"):
        layer.kl(S, Q, lengths=lengths, sib_scores=SB, other_sib_scores=QB, other_label_scores=labq)
    with pytest.raises(SSVMInputError, match="other_label_scores: expected the label scores' shape"):
        layer.kl(S, Q, lengths=lengths, sib_scores=SB, other_sib_scores=QB, label_scores=lab,
                 other_label_scores=labq[..., :2])
    with pytest.raises(SSVMInputError, match="other_label_scores: expected scores without NaN"):
        layer.kl(S, Q, lengths=lengths, sib_scores=SB, other_sib_scores=QB, label_scores=lab,
                 other_label_scores=labq.masked_fill(labq > 1, float("nan")))
