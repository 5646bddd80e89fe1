"""Property tests of the LinearChain layer on inputs drawn by hypothesis: 1-3 tags, rows of 1-4 positions under
arbitrary masks (gaps, empty rows), ties (integer scores), random tag constraints (some rows then have no allowed
sequence), unobserved gold tags and the four task costs. Every operation against enumeration of every tag
sequence, on the numba and the torch path. The fixed-seed suites (test_linear_chain.py) never drew a row that
the constraints leave empty on the torch path, where log Z returned -inf instead of refusing the row as the
other paths and operations do."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import LinearChain

NEG = float("-inf")


@st.composite
def chains(draw):
    """(K, emissions (B, T, K), mask, (start, end, transitions[prev, next]), constraints or None, other
    emissions, gold tags with -1 unobserved, loss, token_loss)."""
    K, B, T = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    ties = draw(st.booleans())

    def scores(*shape):
        return torch.tensor(rng.integers(-2, 3, size=shape).astype(float) if ties else rng.normal(size=shape) * 2)
    mask = torch.tensor(rng.random((B, T)) < draw(st.sampled_from([0.5, 0.8, 1.0])))
    constraints = None
    if draw(st.booleans()):
        p = draw(st.sampled_from([0.2, 0.5]))
        constraints = {"start": torch.tensor(rng.random(K) > p), "end": torch.tensor(rng.random(K) > p),
                       "transitions": torch.tensor(rng.random((K, K)) > p)}
        constraints["start"][rng.integers(K)] = constraints["end"][rng.integers(K)] = True     # refused otherwise
    observed = rng.random((B, T)) >= draw(st.sampled_from([0.0, 0.0, 0.5]))
    tags = torch.tensor(np.where(observed, rng.integers(0, K, size=(B, T)), -1))
    loss = draw(st.sampled_from(["hinge", "crf", "softmax_margin"]))
    token_loss = "hamming" if loss == "crf" else draw(st.sampled_from(["hamming", "normalized", "vector", "matrix"]))
    if token_loss == "vector":
        token_loss = torch.tensor(rng.integers(0, 3, size=K).astype(float))
    elif token_loss == "matrix":
        C = rng.integers(0, 3, size=(K, K)).astype(float)
        np.fill_diagonal(C, 0)
        token_loss = torch.tensor(C)
    return (K, scores(B, T, K), mask, (scores(K), scores(K), scores(K, K)), constraints, scores(B, T, K), tags, loss,
            token_loss)


def _sequences(K, E, mask, params, constraints):
    """Per row: its masked-on positions, every tag sequence over them and its score (-inf where forbidden)."""
    start, end, trans = (x.numpy() for x in params)
    allowed = ((np.ones(K, bool), np.ones(K, bool), np.ones((K, K), bool)) if constraints is None else
               (constraints["start"].numpy(), constraints["end"].numpy(), constraints["transitions"].numpy()))
    rows = []
    for b in range(E.shape[0]):
        pos = np.flatnonzero(mask[b].numpy())
        seqs = np.array(list(itertools.product(range(K), repeat=len(pos))), dtype=np.int64)
        seqs = seqs.reshape(K ** len(pos), len(pos))
        if len(pos) == 0:
            rows.append((pos, seqs, np.zeros(1)))          # the empty sequence, score 0
            continue
        first, last, steps = seqs[:, 0], seqs[:, -1], (seqs[:, :-1], seqs[:, 1:])
        s = (start[first] + end[last] + E[b].numpy()[pos[None, :], seqs].sum(1) + trans[steps].sum(1))
        ok = allowed[0][first] & allowed[1][last] & allowed[2][steps].all(1)
        rows.append((pos, seqs, np.where(ok, s, NEG)))
    return rows


def _log_sum_exp(s):
    return float(np.logaddexp.reduce(s[np.isfinite(s)]))


def _layer(K, params, constraints, loss, token_loss, kernels):
    layer = LinearChain(K, batch_first=True, loss=loss, constraints=constraints, token_loss=token_loss,
                        kernels=kernels).double()
    with torch.no_grad():
        for p, x in zip((layer.start_transitions, layer.end_transitions, layer.transitions), params):
            p.copy_(x)
    return layer


ONE_TAG_NO_REPEAT = (1, torch.zeros(1, 2, 1, dtype=torch.float64), torch.ones(1, 2, dtype=torch.bool),
                     (torch.zeros(1, dtype=torch.float64),) * 2 + (torch.zeros(1, 1, dtype=torch.float64),),
                     {"start": torch.tensor([True]), "end": torch.tensor([True]),
                      "transitions": torch.tensor([[False]])},
                     torch.zeros(1, 2, 1, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.int64), "crf", "hamming")


@given(chains(), st.sampled_from(["numba", "torch"]))
@example(ONE_TAG_NO_REPEAT, "torch").via("a row the constraints leave empty: log Z was -inf on the torch path")
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_equals_enumeration(chain, kernels):
    """decode (a best sequence, any of the tied), log Z, marginals, entropy, KL to the CRF of other emissions,
    the 3 best sequences' scores, the three losses (with unobserved tags: against C, the sequences that agree
    with the observed ones): equal to enumeration; a row without an allowed sequence refused by every one."""
    K, E, mask, params, constraints, other, tags, loss, token_loss = chain
    layer = _layer(K, params, constraints, loss, token_loss, kernels)
    rows = _sequences(K, E, mask, params, constraints)
    k = min(3, K ** int(mask.sum(1).max()))
    if any(not np.isfinite(s).any() for _, _, s in rows):
        for operation in (layer.decode, layer.log_partition, layer.marginals, layer.entropy,
                          lambda E, m: layer.decode(E, m, nbest=k), lambda E, m: layer.sample(E, m)):
            with pytest.raises(SSVMInputError, match="no allowed|at least one allowed tag sequence"):
                operation(E, mask)
        return
    with torch.no_grad():
        y, logz = layer.decode(E, mask), layer.log_partition(E, mask)
        M, H = layer.marginals(E, mask), layer.entropy(E, mask)
        nbest = layer.decode(E, mask, nbest=k) if k > 1 else y[:, None]
        q_rows = _sequences(K, other, mask, params, constraints)
        KL = layer.kl(E, other, mask)
    for b, (pos, seqs, s) in enumerate(rows):
        assert (y[b][~mask[b]] == -1).all() and (nbest[b][:, ~mask[b]] == -1).all()
        assert s[(seqs == y[b, pos].numpy()).all(1)][0] == pytest.approx(s.max(), abs=1e-9)
        ref_logz = _log_sum_exp(s)
        assert float(logz[b]) == pytest.approx(ref_logz, abs=1e-8)
        p = np.exp(s - ref_logz)
        ref_M = np.array([np.bincount(seqs[:, t], weights=p, minlength=K) for t in range(len(pos))]).reshape(-1, K)
        assert np.abs(M[b, pos].numpy() - ref_M).max(initial=0) < 1e-8 and float(M[b][~mask[b]].abs().sum()) == 0
        support = p > 0
        assert float(H[b]) == pytest.approx(-(p[support] * np.log(p[support])).sum(), abs=1e-8)
        log_q = q_rows[b][2] - _log_sum_exp(q_rows[b][2])
        assert float(KL[b]) == pytest.approx((p[support] * (np.log(p[support]) - log_q[support])).sum(), abs=1e-8)
        found = [s[(seqs == path[pos].numpy()).all(1)][0] for path in nbest[b] if len(pos) and (path[pos] >= 0).all()]
        best = np.sort(s[np.isfinite(s)])[::-1][:k]
        assert len(pos) == 0 or np.allclose(found, best, atol=1e-9)
    try:
        losses = layer(E, tags, mask, reduction="none").detach()
    except SSVMInputError as e:         # an observed gold tag the constraints forbid, or an empty C: said by name
        assert str(e).startswith("tags: ")
        return
    for b, (pos, seqs, s) in enumerate(rows):
        gold = tags[b, pos].numpy()
        seen = gold >= 0
        if not seen.any():
            assert float(losses[b]) == 0
            continue
        wrong = (seqs != gold) & seen
        if isinstance(token_loss, str):
            delta = wrong.sum(1) / (len(pos) if token_loss == "normalized" else 1)
        elif token_loss.dim() == 1:
            delta = (token_loss.numpy()[gold.clip(0)] * wrong).sum(1)
        else:
            delta = (token_loss.numpy()[gold.clip(0)[None, :], seqs] * seen).sum(1)
        in_C = np.where((~wrong).all(1), s, NEG)
        top = {"crf": _log_sum_exp(s), "hinge": (s + delta).max(), "softmax_margin": _log_sum_exp(s + delta)}[loss]
        reference = top - (in_C.max() if loss == "hinge" else _log_sum_exp(in_C))
        assert float(losses[b]) == pytest.approx(reference, abs=1e-8)
