"""SemiMarkovChain's entropy, KL divergence, cross-entropy and exact samples (ssvm_torch/segments/information.py):
against enumeration of every segmentation (tests/test_segments.py's helpers), torch-struct's SemiMarkovCRF
entropy, gradcheck, and the samples' frequencies against the exact probabilities."""
from collections import Counter

import pytest
import torch
from frequency_check import pooled_pvalue
from test_segments import enumerate_row, random_problem

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import SemiMarkovChain
from ssvm_torch.segments import ops
from ssvm_torch.segments.reference import torch_struct_potentials

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


def _exact(S, first, last, trans, lengths, b):
    ys, scores = enumerate_row(S, first, last, trans, lengths, b)
    return ys, scores - torch.logsumexp(scores, 0)


@pytest.mark.parametrize("forbid", [0.0, 0.3])
def test_entropy_kl_and_cross_entropy_equal_enumeration(forbid):
    p, q = random_problem(0, forbid=forbid), random_problem(1)
    lengths = p[4]
    H, D = ops.information(*p, other=q[:4])
    for b in range(lengths.shape[0]):
        if lengths[b] == 0:
            assert H[b] == 0 and D[b] == 0
            continue
        _, lp = _exact(*p, b)
        _, lq = _exact(*q[:4], lengths, b)
        w = lp.exp()
        assert H[b].item() == pytest.approx(-(w * torch.where(w > 0, lp, 0)).sum().item(), abs=1e-12)
        assert D[b].item() == pytest.approx((w * torch.where(w > 0, lp - lq, 0)).sum().item(), abs=1e-12)


def test_the_layer_adds_its_parameters_and_length_table():
    layer, teacher = SemiMarkovChain(3, 3, loss="crf", length_scores=True).double(), SemiMarkovChain(3, 3).double()
    with torch.no_grad():
        layer.length_scores.normal_()
    S, _, _, _, lengths = random_problem(2)
    mask = torch.arange(S.shape[1])[None, :] < lengths[:, None]
    Q = torch.randn_like(S)
    full = S + layer.length_scores
    start, end, trans = layer.start_transitions, layer.end_transitions, layer.transitions.t()
    H, D = ops.information(full, start, end, trans, lengths,
                           (Q, teacher.start_transitions, teacher.end_transitions, teacher.transitions.t()))
    torch.testing.assert_close(layer.entropy(S, mask), H, rtol=0, atol=1e-12)
    torch.testing.assert_close(layer.kl(S, Q, mask, other=teacher), D, rtol=0, atol=1e-12)
    torch.testing.assert_close(layer.cross_entropy(S, Q, mask, other=teacher), H + D, rtol=0, atol=1e-12)
    assert layer.kl(S, S, mask).abs().max() < 1e-12


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_entropy_equals_torch_structs_where_its_potentials_are_finite():
    """torch-struct 0.5's SemiMarkovCRF entropy is NaN as soon as a potential is -inf (its initial-label layout
    needs them: segments/reference.py); with -1e4 in their place it is ours to 1e-10. Its ``kl`` raises."""
    torch_struct = pytest.importorskip("torch_struct")
    S, first, last, trans, _ = random_problem(3, B=3, T=5)
    lengths = torch.full((3,), 5)                      # torch-struct is wrong on rows of different lengths
    potentials = torch_struct_potentials(S, first, last, trans, lengths)
    assert torch.isnan(torch_struct.SemiMarkovCRF(potentials, lengths=lengths + 1).entropy).all()
    theirs = torch_struct.SemiMarkovCRF(potentials.clamp(min=-1e4), lengths=lengths + 1).entropy
    torch.testing.assert_close(ops.information(S, first, last, trans, lengths)[0], theirs, rtol=0, atol=1e-10)


def test_entropy_and_kl_pass_gradcheck():
    S, first, last, trans, lengths = random_problem(4, B=3, T=5, forbid=0.2)
    Q = random_problem(5, B=3, T=5)[0]
    inputs = tuple(x.clone().requires_grad_() for x in (S, first, last, trans, Q))

    def both(S_, first_, last_, trans_, Q_):
        H, D = ops.information(S_, first_, last_, trans_, lengths, (Q_, first_ * 0.5, last_, trans_.t()))
        return torch.cat([H, D])

    assert torch.autograd.gradcheck(both, inputs)


@pytest.mark.parametrize("device", DEVICES)
def test_samples_follow_the_crf(device):
    with torch.random.fork_rng(devices=[]):        # the layer's initial parameters, whatever ran before
        torch.manual_seed(0)
        layer = SemiMarkovChain(3, 3, loss="crf").double().to(device)
    S, _, _, _, lengths = random_problem(6, forbid=0.2)
    S, lengths = S.to(device), torch.tensor([6, 4, 0, 5], device=device)
    n = 30_000
    draws = layer.sample(S, lengths=lengths, n=n, generator=torch.Generator(device=device).manual_seed(7))
    assert draws.shape == (4, n, 6) and (draws[2] == -1).all() and (draws[1, :, 4:] == -1).all()
    assert (draws[:, :, 0][lengths > 0] >= 0).all()               # every row's first position starts a segment
    params = (layer.start_transitions, layer.end_transitions, layer.transitions.t())
    for b in (0, 1):
        ys, lp = _exact(S.cpu(), *(p.detach().cpu() for p in params), lengths.cpu(), b)
        index = {tuple(y.tolist()): i for i, y in enumerate(ys)}
        drawn = Counter(tuple(row.tolist()) for row in draws[b].cpu())
        assert all(y in index and lp[index[y]] > float("-inf") for y in drawn)       # nothing forbidden
        observed = [drawn.get(tuple(y.tolist()), 0) for y in ys]
        assert pooled_pvalue(observed, lp.exp().numpy(), n) > 1e-3
    again = layer.sample(S, lengths=lengths, n=n, generator=torch.Generator(device=device).manual_seed(7))
    assert torch.equal(draws, again)


def test_refusals_name_the_field():
    layer = SemiMarkovChain(3, 3).double()
    S, _, _, _, lengths = random_problem(8)
    for bad in (0, True, 1.5):
        with pytest.raises(SSVMInputError, match="n: expected an int >= 1"):
            layer.sample(S, lengths=lengths, n=bad)
    with pytest.raises(SSVMInputError, match="generator"):
        layer.sample(S, lengths=lengths, generator="seed")
    with pytest.raises(SSVMInputError, match="other: expected a SemiMarkovChain of num_labels = 3, max_length = 3"):
        layer.kl(S, S, lengths=lengths, other=SemiMarkovChain(3, 2))
    with pytest.raises(SSVMInputError, match="other_scores: expected a tensor of the segment scores' shape"):
        layer.kl(S, S[:, :4], lengths=lengths)
    with pytest.raises(SSVMInputError, match="other_scores: expected a float tensor"):
        layer.kl(S, S.long(), lengths=lengths)              # was cast to S's dtype without a word
    with pytest.raises(SSVMInputError, match="other_scores: expected scores without NaN"):
        layer.cross_entropy(S, torch.full_like(S, float("nan")), lengths=lengths)   # was named seg_scores
    S[1] = float("-inf")
    for call in (lambda: layer.entropy(S, lengths=lengths), lambda: layer.sample(S, lengths=lengths),
                 lambda: layer.kl(S, S.nan_to_num(neginf=0.0), lengths=lengths)):
        with pytest.raises(SSVMInputError, match="seg_scores: row 1 has no segmentation"):
            call()
