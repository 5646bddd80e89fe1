"""LinearChain's n-best decoding and softmax-margin loss against brute-force enumeration, with gap
masks, an empty row and the BIO / BIOES constraints, on both kernels (numba, torch); AllenNLP's
``test_viterbi_tags_top_k`` logic (the k best paths with their scores); gradcheck of the loss."""
import itertools

import pytest
import torch

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.chain.triton_viterbi import fused_available
from ssvm_torch.nn import LinearChain, allowed_transitions

KERNELS = ("numba", "torch") + (("triton",) if fused_available(torch.zeros(1, 1, 2)) else ())
LABELS = {"BIO": ["O", "B-NP", "I-NP", "B-VP", "I-VP"], "BIOES": ["O", "B-NP", "I-NP", "E-NP", "S-NP"]}
MASK = torch.tensor([[1, 1, 1, 1], [0, 1, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0]]).bool()


def allowed_paths(lay, L):
    K, cons = lay.num_tags, lay.constraint_masks
    for y in itertools.product(range(K), repeat=L):
        if cons is None or (bool(cons["start"][y[0]]) and bool(cons["end"][y[-1]])
                            and all(bool(cons["transitions"][y[i], y[i + 1]]) for i in range(L - 1))):
            yield y


def layer(scheme, kernels, seed=0, **kw):
    K = len(LABELS[scheme or "BIO"])
    cons = allowed_transitions(scheme, LABELS[scheme]) if scheme else None
    torch.manual_seed(seed)
    lay = LinearChain(K, batch_first=True, constraints=cons, kernels=kernels, **kw).double()
    torch.nn.init.normal_(lay.transitions)
    return lay


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("scheme", [None, "BIO", "BIOES"])
@pytest.mark.parametrize("k", [1, 3, 40])
def test_nbest_paths_are_the_k_best_by_brute_force(kernels, scheme, k):
    """decode(nbest=k): the k highest scores of enumeration in non-increasing order (ties compared by
    score), every path allowed and distinct, its score = layer.score of the path; -1 off the mask and
    for missing ranks (k = 40 exceeds some rows' allowed sequences); as lists: up to k lists."""
    lay = layer(scheme, kernels)
    g = torch.Generator().manual_seed(3)
    E = torch.randn(4, 4, lay.num_tags, generator=g, dtype=torch.float64)
    paths = lay.decode(E, MASK, nbest=k) if k > 1 else lay.decode(E, MASK)[:, None]
    assert paths.shape == (4, k, 4) and paths.dtype == torch.int64
    lists = lay.decode(E, MASK, as_lists=True, nbest=k)
    for b in range(4):
        pos = torch.nonzero(MASK[b])[:, 0]
        if len(pos) == 0:
            assert bool((paths[b] == -1).all()) and (k == 1 or lists[b] == [[]])
            continue
        ys = list(allowed_paths(lay, len(pos)))
        want = sorted((lay.score(E[b:b + 1], torch.tensor([[y[list(pos).index(t)] if t in pos else 0
                                                              for t in range(4)]]), MASK[b:b + 1]).item()
                       for y in ys), reverse=True)[:k]
        found = [p for p in paths[b] if bool((p[pos] >= 0).all())]
        assert len(found) == len(want) and (k == 1 or len(lists[b]) == len(want))
        assert all(bool((p[~MASK[b]] == -1).all()) for p in paths[b])
        assert all(bool((p == -1).all()) for p in paths[b][len(found):])
        got = [lay.score(E[b:b + 1], p.clamp(min=0)[None], MASK[b:b + 1]).item() for p in found]
        assert got == pytest.approx(want, abs=1e-10)
        assert all(x >= y - 1e-12 for x, y in zip(got, got[1:]))
        assert len({tuple(p[pos].tolist()) for p in found}) == len(found)
        assert all(tuple(p[pos].tolist()) in set(ys) for p in found)
        if k > 1:
            assert [tuple(x) for x in lists[b]] == [tuple(p[pos].tolist()) for p in found]


def test_nbest_follows_allennlp_top_k_and_the_kernels_agree():
    """AllenNLP's test_viterbi_tags_top_k: random logits and transitions, the top-k paths with their
    scores equal the k best of every sequence; the numba and torch kernels return the same scores."""
    torch.manual_seed(0)
    B, T, K, k = 5, 4, 5, 7
    E = torch.randn(B, T, K, dtype=torch.float64)
    lays = {kn: layer(None, kn, seed=1) for kn in KERNELS}
    lays["torch"].load_state_dict(lays["numba"].state_dict())
    scores = {}
    for kn, lay in lays.items():
        paths = lay.decode(E, nbest=k)
        s = torch.stack([lay.score(E, paths[:, j]) for j in range(k)], 1)
        scores[kn] = s
        for b in range(B):
            every = sorted((lay.score(E[b:b + 1], torch.tensor([y])).item()
                            for y in itertools.product(range(K), repeat=T)), reverse=True)
            assert s[b].tolist() == pytest.approx(every[:k], abs=1e-10)
    torch.testing.assert_close(scores["numba"], scores["torch"], rtol=0, atol=1e-10)


def test_nbest_refuses_a_bad_k():
    lay = layer(None, "numba")
    for bad in (0, -1, 2.0, True):
        with pytest.raises(SSVMInputError, match="nbest"):
            lay.decode(torch.zeros(1, 2, lay.num_tags, dtype=torch.float64), nbest=bad)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("scheme", [None, "BIOES"])
@pytest.mark.parametrize("token_loss", ["hamming", "normalized", "matrix"])
def test_softmax_margin_equals_brute_force_and_bounds_hinge_and_nll(kernels, scheme, token_loss):
    """log sum_y exp(s(y) + Delta(y, y_i)) - s(y_i) over the allowed labelings, Delta the hinge's;
    it is >= the hinge and >= the CRF's NLL; its gradient is the cost-augmented marginals minus
    the gold statistics."""
    K = len(LABELS[scheme or "BIO"])
    g = torch.Generator().manual_seed(9)
    tl = (torch.rand(K, K, generator=g, dtype=torch.float64) * (1 - torch.eye(K, dtype=torch.float64))
          if token_loss == "matrix" else token_loss)
    lay = layer(scheme, kernels, loss="softmax_margin", token_loss=tl)
    E = torch.randn(4, 4, K, generator=g, dtype=torch.float64)
    gold = torch.zeros(4, 4, dtype=torch.int64)
    gold[MASK] = torch.tensor([1, 2, 3, 0, 4, 0, 4]) if scheme else torch.randint(
        0, K, (int(MASK.sum()),), generator=g)
    C = lay.token_cost
    Eg = E.clone().requires_grad_(True)
    sm = lay(Eg, gold, MASK, reduction="none")
    sm.sum().backward()
    sm = sm.detach()
    for b in range(4):
        pos = torch.nonzero(MASK[b])[:, 0].tolist()
        if not pos:
            assert float(sm[b]) == 0.0 and float(Eg.grad[b].abs().sum()) == 0.0
            continue
        c = 1.0 / len(pos) if token_loss == "normalized" else 1.0
        y_i = gold[b, pos].tolist()
        ys = list(allowed_paths(lay, len(pos)))

        def s(y):
            full = torch.zeros(1, 4, dtype=torch.int64)
            full[0, pos] = torch.tensor(y)
            return lay.score(E[b:b + 1], full, MASK[b:b + 1]).detach()[0]
        aug = torch.stack([s(y) + c * sum(float(C[a, p]) for a, p in zip(y_i, y)) for y in ys])
        want = torch.logsumexp(aug, 0) - s(y_i)
        assert float(sm[b]) == pytest.approx(float(want), abs=1e-10)
        p = torch.softmax(aug, 0)
        grad = torch.zeros(len(pos), K, dtype=torch.float64)
        for y, w in zip(ys, p):
            for t, k in enumerate(y):
                grad[t, k] += w
        for t, k in enumerate(y_i):
            grad[t, k] -= 1.0
        torch.testing.assert_close(Eg.grad[b, pos], grad, rtol=0, atol=1e-10)
    for other in ("hinge", "crf"):
        lay.loss = other
        assert bool((sm.detach() >= lay(E, gold, MASK, reduction="none") - 1e-12).all())


# Triton's case runs in the interpreter without a GPU (slow tier there; test_triton_chain checks its gradients
# against numba's in the fast tier)
@pytest.mark.parametrize("kernels", [pytest.param(k, marks=pytest.mark.slow) if k == "triton" and not torch.cuda.is_available()
                                     else k for k in KERNELS])
def test_softmax_margin_passes_gradcheck(kernels):
    """torch.autograd.gradcheck (float64) of the loss w.r.t. the emissions and the three parameters,
    under BIO constraints, a gap mask and the normalized Hamming cost."""
    lay = layer("BIO", kernels, loss="softmax_margin", token_loss="normalized")
    g = torch.Generator().manual_seed(4)
    E = torch.randn(3, 4, lay.num_tags, generator=g, dtype=torch.float64, requires_grad=True)
    gold = torch.tensor([[0, 1, 2, 0], [1, 2, 2, 0], [3, 4, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 0]]).bool()
    params = tuple(p.detach().clone().requires_grad_(True) for p in (lay.start_transitions, lay.end_transitions,
                                                                       lay.transitions))

    def loss(E, start, end, trans):
        values = {"start_transitions": start, "end_transitions": end, "transitions": trans}
        return torch.func.functional_call(lay, values, (E, gold, mask), {"reduction": "none"})
    assert torch.autograd.gradcheck(loss, (E, *params))


@pytest.mark.parametrize("kernels", KERNELS)
def test_nbest_caps_and_refusals(kernels):
    """The audit's cases: k beyond the labelings that exist (81 here) or beyond memory is refused by
    name (it was a numba SystemError, an allocation failure or a storage overflow); k equal to the
    count works; a row no labeling satisfies is refused naming the row, as nbest=1 refuses it; a cost
    given to the CRF loss (which never reads it) is refused."""
    lay = layer(None, kernels)                                   # 3 tags (BIO's labels), T = 4: 81 labelings
    K = lay.num_tags
    E = torch.randn(2, 4, K, dtype=torch.float64)
    count = K ** 4
    assert lay.decode(E, nbest=count).shape == (2, count, 4)
    for k in (count + 1, 10 ** 7, 10 ** 9, 2 ** 62):
        with pytest.raises(SSVMInputError, match=f"nbest: expected at most {count} \\(every labeling of the longest "
                                                 f"row: {K} tags, 4 positions\\), got {k}"):
            lay.decode(E, nbest=k)
    long = torch.randn(64, 50, K, dtype=torch.float64)
    with pytest.raises(SSVMInputError, match="nbest: expected a k whose n-best tables fit this machine's"):
        lay.decode(long, nbest=10 ** 9)
    no_two = {"start": torch.tensor([True, False]), "end": torch.tensor([True, True]),
              "transitions": torch.tensor([[False, False], [True, True]])}
    bad = LinearChain(2, batch_first=True, constraints=no_two, kernels=kernels)
    E2 = torch.randn(2, 2, 2)
    mask = torch.tensor([[True, False], [True, True]])                  # row 1 has no allowed labeling
    for k in (1, 2):
        with pytest.raises(SSVMInputError, match="row 1"):
            bad.decode(E2, mask, nbest=k)
    for cost in ("normalized", torch.ones(K), 1.0 - torch.eye(K)):
        with pytest.raises(SSVMInputError, match="token_loss: expected the default with loss='crf'"):
            LinearChain(K, loss="crf", token_loss=cost)
    LinearChain(K, loss="crf", token_loss="hamming")                    # the default, spelled out
