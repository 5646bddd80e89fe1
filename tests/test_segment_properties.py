"""Property tests of the SemiMarkovChain layer on inputs drawn by hypothesis: 1-3 labels, segments of 1-3
positions, rows of 0-4 positions, ties (integer scores), a share of -inf segment scores up to all of them (rows
without a segmentation), per-(length, label) scores, the three losses with both segment losses and costs. Every
operation against enumeration of every segmentation (tests/test_segments.py's enumerator; the scores and the
losses' Delta written out here from each segmentation's spans), on the numba and the torch path. Before these
tests the marginals of a row without a segmentation were zeros and its log Z -inf where the decode refused it."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import SemiMarkovChain
from ssvm_torch.segments import PartialSegmentation, segment_log_partition, segment_marginals
from test_segments import all_segmentations

NEG = float("-inf")


def spans_of(row, n: int) -> list:
    """(start, end, label) of every segment of a segmentation row (label at each segment's first position)."""
    starts = [t for t in range(n) if row[t] >= 0]
    return [(t, starts[i + 1] if i + 1 < len(starts) else n, row[t]) for i, t in enumerate(starts)]


def bio(row, n: int) -> list:
    tags = [None] * n
    for t, e, k in spans_of(row, n):
        tags[t:e] = [("B", k)] + [("I", k)] * (e - t - 1)
    return tags


@st.composite
def problems(draw):
    """(K, L, seg_scores (B, T, L, K), lengths, (start, end, transitions[prev, next]), q's scores, length scores
    or None, loss, seg_loss, cost, a seed)."""
    K, L, B, T = (draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    ties = draw(st.booleans())

    def scores(*shape):
        return torch.tensor(rng.integers(-2, 3, size=shape).astype(float) if ties else rng.normal(size=shape) * 2)
    S = scores(B, T, L, K)
    S[torch.from_numpy(rng.random(S.shape) < draw(st.sampled_from([0.0, 0.1, 0.4, 1.0])))] = NEG
    length_scores = scores(L, K) if draw(st.booleans()) else None
    return (K, L, S, torch.from_numpy(rng.integers(0, T + 1, size=B)), (scores(K), scores(K), scores(K, K)),
            scores(B, T, L, K), length_scores, draw(st.sampled_from(["hinge", "crf", "softmax_margin"])),
            draw(st.sampled_from(["tokens", "segments"])), draw(st.sampled_from(["hamming", "normalized"])),
            int(rng.integers(2 ** 31)))


def _layer(K, L, params, length_scores, loss, seg_loss, cost, kernels):
    layer = SemiMarkovChain(K, L, loss=loss, seg_loss=seg_loss, cost=cost, length_scores=length_scores is not None,
                            kernels=kernels).double()
    with torch.no_grad():
        for p, x in zip((layer.start_transitions, layer.end_transitions, layer.transitions, layer.length_scores),
                        (*params, length_scores)):
            if p is not None:
                p.copy_(x)
    return layer


def _score(S, params, length_scores, row, n: int) -> float:
    start, end, trans = params
    parts = spans_of(row, n)
    if not parts:
        return 0.0
    s = float(start[parts[0][2]] + end[parts[-1][2]])
    for j, (t, e, k) in enumerate(parts):
        s += float(S[t, e - t - 1, k]) + (float(length_scores[e - t - 1, k]) if length_scores is not None else 0.0)
        s += float(trans[parts[j - 1][2], k]) if j else 0.0
    return s


def _log_sum_exp(s) -> float:
    return float(np.logaddexp.reduce(s[np.isfinite(s)]))


NO_SEGMENTATION = (1, 1, torch.full((2, 1, 1, 1), NEG, dtype=torch.float64), torch.tensor([0, 1]),
                   (torch.zeros(1, dtype=torch.float64),) * 2 + (torch.zeros(1, 1, dtype=torch.float64),),
                   torch.zeros(2, 1, 1, 1, dtype=torch.float64), None, "hinge", "tokens", "hamming", 0)


@given(problems(), st.sampled_from(["numba", "torch"]))
@example(NO_SEGMENTATION, "numba").via("a row without a segmentation: its marginals were zeros")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_equals_enumeration(problem, kernels):
    """decode (a best segmentation, any of the tied), log Z, the segment marginals, entropy, KL to q, the 3 best
    segmentations' scores and the three losses of a feasible gold: equal to enumeration; a row without a
    segmentation of finite score refused by every operation, the functional ones too."""
    K, L, S, lengths, params, Q, length_scores, loss, seg_loss, cost, seed = problem
    layer = _layer(K, L, params, length_scores, loss, seg_loss, cost, kernels)
    B, T = S.shape[:2]
    rows = []
    for b, n in enumerate(lengths.tolist()):
        segs = list(all_segmentations(n, L, K, T))
        rows.append((n, segs, np.array([_score(S[b], params, length_scores, r, n) for r in segs]),
                     np.array([_score(Q[b], params, length_scores, r, n) for r in segs])))
    if any(not np.isfinite(s).any() for _, _, s, _ in rows):
        kw = dict(lengths=lengths)
        for operation in (layer.decode, layer.log_partition, layer.marginals, layer.entropy, layer.sample,
                          lambda S, **kw: layer.decode(S, nbest=2, **kw),
                          lambda S, **kw: segment_log_partition(S, *params[:2], params[2].t(), kernels=kernels, **kw),
                          lambda S, **kw: segment_marginals(S, *params[:2], params[2].t(), kernels=kernels, **kw)):
            with pytest.raises(SSVMInputError, match="has no segmentation with a finite score"):
                operation(S, **kw)
        return
    with torch.no_grad():
        y, logz, M = layer.decode(S, lengths=lengths), layer.log_partition(S, lengths=lengths), layer.marginals(
            S, lengths=lengths)
        H, D, nbest = layer.entropy(S, lengths=lengths), layer.kl(S, Q, lengths=lengths), layer.decode(
            S, lengths=lengths, nbest=3)
    for b, (n, segs, s, q) in enumerate(rows):
        assert s[segs.index(y[b].tolist())] == pytest.approx(s.max(), abs=1e-9)
        ref_logz = _log_sum_exp(s)
        assert float(logz[b]) == pytest.approx(ref_logz, abs=1e-8)
        p = np.exp(s - ref_logz)
        ref_M = np.zeros((T, L, K))
        for weight, row in zip(p, segs):
            for t, e, k in spans_of(row, n):
                ref_M[t, e - t - 1, k] += weight
        assert np.abs(M[b].numpy() - ref_M).max() < 1e-8
        support = p > 0
        assert float(H[b]) == pytest.approx(-(p[support] * np.log(p[support])).sum(), abs=1e-8)
        log_q = q - _log_sum_exp(q)
        assert float(D[b]) == pytest.approx((p[support] * (np.log(p[support]) - log_q[support])).sum(), abs=1e-8)
        best = np.sort(s[np.isfinite(s)])[::-1][:3]
        found = [s[segs.index(r.tolist())] for r in nbest[b][:len(best)]]
        assert np.allclose(found, best, atol=1e-9) and (nbest[b][len(best):] == -1).all()
    rng = np.random.default_rng(seed)
    gold = torch.tensor(np.array([segs[rng.choice(np.flatnonzero(np.isfinite(s)))] for _, segs, s, _ in rows]))
    losses = layer(S, gold, lengths=lengths, reduction="none").detach()
    for b, (n, segs, s, _) in enumerate(rows):
        g = gold[b].tolist()
        if seg_loss == "tokens":
            delta = np.array([sum(a != c for a, c in zip(bio(r, n), bio(g, n))) for r in segs], dtype=float)
        else:
            delta = np.array([len(set(spans_of(r, n)) ^ set(spans_of(g, n))) for r in segs], dtype=float)
        delta /= max(n, 1) if cost == "normalized" else 1
        top = {"crf": _log_sum_exp(s), "hinge": (s + delta).max(), "softmax_margin": _log_sum_exp(s + delta)}[loss]
        assert float(losses[b]) == pytest.approx(top - s[segs.index(g)], abs=1e-8)


def _positions(row, n: int) -> tuple:
    """(label, begins, ends) of every position of a segmentation row: its segment's label, 1 at a segment's
    first position (0 after it), 1 at its last (0 before it)."""
    labels, begins, ends = [None] * n, [None] * n, [None] * n
    for t, e, k in spans_of(row, n):
        for u in range(t, e):
            labels[u], begins[u], ends[u] = k, int(u == t), int(u == e - 1)
    return labels, begins, ends


@given(problems(), st.sampled_from(["numba", "torch"]), st.sampled_from([0.3, 0.7, 1.0]), st.booleans())
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_partial_segmentations_equal_enumeration(problem, kernels, keep, with_ends):
    """A PartialSegmentation observing a share ``keep`` of a feasible segmentation's labels, begin flags (and end
    flags): the three losses (``seg_loss="tokens"``, the one defined on partial annotation) against C, the
    segmentations that agree, Delta_O = the observed positions whose label or begin flag differs."""
    K, L, S, lengths, params, _, length_scores, loss, _, cost, seed = problem
    layer = _layer(K, L, params, length_scores, loss, "tokens", cost, kernels)
    B, T = S.shape[:2]
    rows = []
    for b, n in enumerate(lengths.tolist()):
        segs = list(all_segmentations(n, L, K, T))
        rows.append((n, segs, np.array([_score(S[b], params, length_scores, r, n) for r in segs])))
    if any(not np.isfinite(s).any() for _, _, s in rows):
        return
    rng = np.random.default_rng(seed)
    seen = [torch.full((B, T), -1) for _ in range(3)]                                # labels, begins, ends
    for b, (n, segs, s) in enumerate(rows):
        gold = _positions(segs[rng.choice(np.flatnonzero(np.isfinite(s)))], n)
        for field, values in zip(seen[:3 if with_ends else 2], gold):
            field[b, :n] = torch.tensor([v if rng.random() < keep else -1 for v in values], dtype=torch.int64)
    observed = PartialSegmentation(seen[0], seen[1], seen[2] if with_ends else None)
    losses = layer(S, observed, lengths=lengths, reduction="none").detach()
    for b, (n, segs, s) in enumerate(rows):
        o = [field[b, :n].tolist() for field in seen]
        views = [_positions(r, n) for r in segs]
        if not any(v >= 0 for field in o for v in field):
            assert float(losses[b]) == 0
            continue
        agree = [all(o[f][t] < 0 or v[f][t] == o[f][t] for f in range(3) for t in range(n)) for v in views]
        missed = np.array([sum((o[0][t] >= 0 and v[0][t] != o[0][t]) or (o[1][t] >= 0 and v[1][t] != o[1][t])
                               for t in range(n)) for v in views], dtype=float) / (max(n, 1) if cost == "normalized"
                                                                                   else 1)
        in_C = np.where(agree, s, NEG)
        top = {"crf": _log_sum_exp(s), "hinge": (s + missed).max(), "softmax_margin": _log_sum_exp(s + missed)}[loss]
        assert float(losses[b]) == pytest.approx(top - (in_C.max() if loss == "hinge" else _log_sum_exp(in_C)),
                                                 abs=1e-8)
