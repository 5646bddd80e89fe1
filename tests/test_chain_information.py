"""LinearChain's entropy, KL divergence, cross-entropy and exact samples (ssvm_torch/chain/information.py):
against enumeration of every tag sequence (scores computed here from the parameters and the constraint masks,
not by the package), against torch-struct's entropy and KL semirings, by gradcheck, and the samples' frequencies
against the exact probabilities."""
import itertools
from collections import Counter

import pytest
import torch
from frequency_check import pooled_pvalue

from ssvm_torch.chain import ops
from ssvm_torch.chain.torch_struct import edge_potentials
from ssvm_torch.constraints import penalties
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import LinearChain

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
K = 3


def _layer(seed: int, constrained: bool, batch_first: bool = True, device="cpu", kernels="auto") -> LinearChain:
    torch.manual_seed(seed)
    layer = LinearChain(K, batch_first=batch_first, loss="crf", kernels=kernels).double()
    with torch.no_grad():
        for p in (layer.start_transitions, layer.end_transitions, layer.transitions):
            p.normal_(0, 1.5)
    if constrained:   # tag 2 never starts, 0 -> 1 forbidden, tag 1 never ends
        allowed = {"start": torch.tensor([True, True, False]), "end": torch.tensor([True, False, True]),
                   "transitions": ~torch.eye(K, dtype=torch.bool).roll(1, 1)}
        layer.set_constraints(allowed)
    return layer.to(device)


def _scores(layer: LinearChain):
    """The layer's (start, end, trans[next, prev]) from its public parameters (pytorch-crf's names and
    orientation, transitions[prev, next]), the form the chain ops read."""
    return layer.start_transitions, layer.end_transitions, layer.transitions.t()


def _penalty(layer: LinearChain):
    """The layer's constraints as the chain ops' (start, end, trans) 0 / -inf scores, or None."""
    masks = layer.constraint_masks
    return None if masks is None else penalties(masks, layer.transitions.dtype, layer.transitions.device)


def _enumerate(layer: LinearChain, E: torch.Tensor, mask: torch.Tensor):
    """(tag sequences, log-probabilities) of one row (batch-first E (T, K), mask (T,)), every sequence of its
    masked-on positions scored from the parameters, the forbidden ones dropped."""
    pos = torch.nonzero(mask)[:, 0].tolist()
    c = layer.constraint_masks
    seqs, scores = [], []
    for y in itertools.product(range(K), repeat=len(pos)):
        if c is not None and (not c["start"][y[0]] or not c["end"][y[-1]]
                              or any(not c["transitions"][a, b] for a, b in zip(y, y[1:]))):
            continue
        s = layer.start_transitions[y[0]] + layer.end_transitions[y[-1]] + sum(E[p, k] for p, k in zip(pos, y))
        s = s + sum(layer.transitions[a, b] for a, b in zip(y, y[1:]))
        seqs.append(y)
        scores.append(s)
    scores = torch.stack(scores).detach()
    return seqs, scores - torch.logsumexp(scores, 0)


MASKS = torch.tensor([[1, 1, 1, 1, 1], [1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [0, 0, 1, 0, 0], [1, 1, 0, 0, 1]]).bool()


@pytest.mark.parametrize("kernels", ["auto", "torch"])         # the entropy compiled on the CPU, or torch's
@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_entropy_kl_and_cross_entropy_equal_enumeration(constrained, batch_first, kernels):
    p_layer, q_layer = _layer(0, constrained, batch_first, kernels=kernels), _layer(1, False, batch_first)
    g = torch.Generator().manual_seed(2)
    E = torch.randn(5, 5, K, dtype=torch.float64, generator=g) * 2
    Q = torch.randn(5, 5, K, dtype=torch.float64, generator=g)
    flip = (lambda x: x) if batch_first else (lambda x: x.transpose(0, 1))
    H = p_layer.entropy(flip(E), flip(MASKS))
    D = p_layer.kl(flip(E), flip(Q), flip(MASKS), other=q_layer)
    C = p_layer.cross_entropy(flip(E), flip(Q), flip(MASKS), other=q_layer)
    for b in range(5):
        if not MASKS[b].any():
            assert H[b] == 0 and D[b] == 0 and C[b] == 0
            continue
        seqs, lp = _enumerate(p_layer, E[b], MASKS[b])
        qseqs, lq_all = _enumerate(q_layer, Q[b], MASKS[b])
        lq = lq_all[[qseqs.index(y) for y in seqs]]
        p = lp.exp()
        assert H[b].item() == pytest.approx(-(p * lp).sum().item(), abs=1e-12)
        assert D[b].item() == pytest.approx((p * (lp - lq)).sum().item(), abs=1e-12)
        assert C[b].item() == pytest.approx(-(p * lq).sum().item(), abs=1e-11)
    assert p_layer.kl(flip(E), flip(E), flip(MASKS)).abs().max() < 1e-12        # KL(p || p) = 0


@pytest.mark.parametrize("kernels", ["auto", "torch"])
def test_kl_is_infinite_where_q_forbids_what_p_allows(kernels):
    """+inf where p gives weight to a sequence q forbids, finite the other way round, on the compiled path and the
    torch recursion alike (each row: KL and its enumeration; the entropy-free KL call of both paths too)."""
    p_layer, q_layer = _layer(0, False, kernels=kernels), _layer(1, True, kernels=kernels)
    E = torch.randn(2, 4, K, dtype=torch.float64)
    assert torch.isinf(p_layer.kl(E, E, other=q_layer)).all()
    assert torch.isposinf(ops.information(E, torch.ones(2, 4, dtype=torch.bool), *_scores(p_layer), None,
                                          (E, *_scores(q_layer), _penalty(q_layer)), kernels,
                                          entropy=False)[1]).all()
    D = q_layer.kl(E, E, other=p_layer)                                # q's support is inside p's
    assert torch.isfinite(D).all()
    for b in range(2):
        seqs, lp = _enumerate(q_layer, E[b], torch.ones(4, dtype=torch.bool))
        pseqs, lq_all = _enumerate(p_layer, E[b], torch.ones(4, dtype=torch.bool))
        lq = lq_all[[pseqs.index(y) for y in seqs]]
        assert D[b].item() == pytest.approx((lp.exp() * (lp - lq)).sum().item(), abs=1e-12)


@pytest.mark.filterwarnings("ignore:.*arg_constraints:UserWarning")
def test_entropy_and_kl_equal_torch_struct():
    torch_struct = pytest.importorskip("torch_struct")
    p_layer, q_layer = _layer(3, False), _layer(4, False)
    g = torch.Generator().manual_seed(5)
    B, T = 6, 7
    E = torch.randn(B, T, K, dtype=torch.float64, generator=g)
    Q = torch.randn(B, T, K, dtype=torch.float64, generator=g)
    lengths = torch.tensor([7, 7, 5, 2, 4, 7])             # >= 2: torch-struct drops a length-1 row's unary
    mask = torch.arange(T)[None, :] < lengths[:, None]

    def dist(layer, U):
        s, e, t = _scores(layer)
        return torch_struct.LinearChainCRF(edge_potentials(U, lengths, s, e, t).detach(), lengths=lengths)

    H, D = p_layer.entropy(E, mask), p_layer.kl(E, Q, mask, other=q_layer)
    torch.testing.assert_close(H, dist(p_layer, E).entropy, rtol=0, atol=1e-10)
    torch.testing.assert_close(D, dist(p_layer, E).kl(dist(q_layer, Q)), rtol=0, atol=1e-10)


@pytest.mark.parametrize("constrained", [False, True])
def test_the_compiled_entropy_passes_gradcheck(constrained):
    layer = _layer(6, constrained)
    E = torch.randn(4, 6, K, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).requires_grad_()
    s, e, t = (x.detach().clone().requires_grad_() for x in _scores(layer))
    mask = torch.cat([MASKS[[0, 1, 2, 4]], torch.ones(4, 1, dtype=torch.bool)], 1)

    def entropy(E_, s_, e_, t_):
        return ops.information(E_, mask, s_, e_, t_, _penalty(layer), kernels="numba")[0]

    assert entropy(E, s, e, t).grad_fn.name() == "NumbaEntropyBackward"
    assert torch.autograd.gradcheck(entropy, (E, s, e, t))
    torch.testing.assert_close(entropy(E, s, e, t), ops.information(E, mask, s, e, t, _penalty(layer),
                                                                   kernels="torch")[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("p_constrained, q_constrained", [(False, False), (True, False), (True, True)])
def test_the_compiled_kl_passes_gradcheck_and_equals_the_torch_recursion(p_constrained, q_constrained):
    """KL of two chains on the CPU, each with or without constraints (q's support containing p's): NumbaKL
    (E_p[s_p - s_q] - log Z_p + log Z_q, gradients Cov_p(phi, s_p - s_q) and mu_q - mu_p) against gradcheck and the
    torch recursion, values and every gradient."""
    p, q = _layer(15, p_constrained), _layer(16, q_constrained)
    g = torch.Generator().manual_seed(17)
    E = torch.randn(4, 6, K, dtype=torch.float64, generator=g)
    Q = torch.randn(4, 6, K, dtype=torch.float64, generator=g)
    mask = torch.cat([MASKS[[0, 1, 2, 4]], torch.ones(4, 1, dtype=torch.bool)], 1)
    leaves = [x.detach().clone().requires_grad_() for x in (E, *_scores(p), Q, *_scores(q))]

    def kl(kernels):
        def f(E_, s_, e_, t_, Q_, qs_, qe_, qt_):
            return ops.information(E_, mask, s_, e_, t_, _penalty(p), (Q_, qs_, qe_, qt_, _penalty(q)),
                                   kernels)[1]
        return f

    assert kl("numba")(*leaves).grad_fn.name() == "NumbaKLBackward"
    assert torch.autograd.gradcheck(kl("numba"), leaves)
    w = torch.randn(4, dtype=torch.float64, generator=g)
    grads = [torch.autograd.grad((kl(k)(*leaves) * w).sum(), leaves) for k in ("numba", "torch")]
    torch.testing.assert_close(kl("numba")(*leaves), kl("torch")(*leaves), rtol=0, atol=1e-12)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("constrained", [False, True])
def test_entropy_and_kl_pass_gradcheck(constrained):
    layer = _layer(6, constrained, kernels="torch")
    g = torch.Generator().manual_seed(7)
    E = torch.randn(3, 4, K, dtype=torch.float64, generator=g).requires_grad_()
    s, e, t = (x.detach().clone().requires_grad_() for x in _scores(layer))
    Q = torch.randn(3, 4, K, dtype=torch.float64, generator=g).requires_grad_()
    mask = MASKS[[0, 1, 4], :4]

    def both(E_, Q_, s_, e_, t_):
        H, D = ops.information(E_, mask, s_, e_, t_, _penalty(layer), (Q_, s_ * 0.5, e_, t_.t(), None))
        return torch.cat([H, D])

    assert torch.autograd.gradcheck(both, (E, Q, s, e, t))
    H = layer.entropy(E, mask)
    H.sum().backward()                     # through the layer: finite gradients on every parameter
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


def test_entropy_keeps_its_digits_in_float32_when_log_z_is_large():
    """Rows of log Z ~ 10^3, where float32 holds log Z to ~1e-4 only: the normalized recursion's H keeps
    digits that log Z - E_p[s(y)] would lose."""
    E = torch.randn(4, 30, K, dtype=torch.float64, generator=torch.Generator().manual_seed(9)) * 40
    exact = _layer(8, False).entropy(E)                                       # compiled, float64 inside
    torch_path = _layer(8, False, kernels="torch")
    assert (torch_path.log_partition(E) > 500).all() and (exact > 0.1).all()
    torch.testing.assert_close(torch_path.entropy(E), exact, rtol=0, atol=1e-12)
    fast = torch_path.float().entropy(E.float())
    torch.testing.assert_close(fast.double(), exact, rtol=0, atol=5e-6)      # uncentred messages: 2e-5


@pytest.mark.parametrize("device", DEVICES)
def test_samples_follow_the_crf(device):
    layer = _layer(10, True, device=device)
    E = (torch.randn(3, 5, K, dtype=torch.float64, generator=torch.Generator().manual_seed(11))).to(device)
    mask = MASKS[[1, 2, 4]].to(device)
    n = 30_000
    gen = torch.Generator(device=device).manual_seed(12)
    S = layer.sample(E, mask, n=n, generator=gen)
    assert S.shape == (3, n, 5) and S.dtype == torch.int64 and S.device.type == device
    assert ((S == -1) == ~mask[:, None, :]).all()
    for b in (0, 2):
        seqs, lp = _enumerate(layer.cpu(), E[b].cpu(), mask[b].cpu())
        layer.to(device)
        drawn = Counter(tuple(row[mask[b]].tolist()) for row in S[b].cpu())
        assert set(drawn) <= set(seqs)                    # nothing forbidden is ever drawn
        observed = [drawn.get(y, 0) for y in seqs]
        assert pooled_pvalue(observed, lp.exp().numpy(), n) > 1e-3
    again = layer.sample(E, mask, n=n, generator=torch.Generator(device=device).manual_seed(12))
    assert torch.equal(S, again)


def test_samples_in_time_major_layout_and_of_the_layer_dtypes():
    layer = _layer(13, False, batch_first=False).float()
    E = torch.randn(6, 2, K)                          # (T, B, K)
    S = layer.sample(E, n=4, generator=torch.Generator().manual_seed(0))
    assert S.shape == (2, 4, 6) and (S >= 0).all()     # batch-first, as decode(nbest=k)
    H = layer.entropy(E)
    assert H.dtype == torch.float32 and H.shape == (2,)


def test_refusals_name_the_field():
    layer, E = _layer(14, False), torch.randn(2, 4, K, dtype=torch.float64)
    for bad in (0, -1, True, 2.0):
        with pytest.raises(SSVMInputError, match="n: expected an int >= 1"):
            layer.sample(E, n=bad)
    with pytest.raises(SSVMInputError, match="generator"):
        layer.sample(E, generator=3)
    with pytest.raises(SSVMInputError, match="other: expected a LinearChain of num_tags = 3"):
        layer.kl(E, E, other=LinearChain(4).double())
    with pytest.raises(SSVMInputError, match="other: expected a LinearChain"):
        layer.kl(E, E, other="teacher")
    with pytest.raises(SSVMInputError, match="other_emissions: expected a tensor of the emissions' shape"):
        layer.kl(E, E[:, :3])
    with pytest.raises(SSVMInputError, match="other_emissions: expected scores without NaN"):
        layer.cross_entropy(E, torch.full_like(E, float("nan")))
    nowhere = _layer(14, False)
    nowhere.set_constraints({"start": torch.tensor([True, False, False]), "end": torch.tensor([False, True, False]),
                             "transitions": torch.eye(K, dtype=torch.bool)})   # tag 0 for ever, yet end in 1
    for call in (lambda: nowhere.entropy(E), lambda: nowhere.sample(E), lambda: nowhere.kl(E, E)):
        with pytest.raises(SSVMInputError, match="constraints: expected at least one allowed tag sequence"):
            call()
