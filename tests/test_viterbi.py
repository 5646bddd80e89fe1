"""Viterbi (torch batched and numba ragged) against brute-force enumeration."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import brute_force_chain, chain_score
from ssvm_torch.oracles import decode, viterbi, viterbi_ragged


def random_batch(rng, B, K, tmax, ties, dtype):
    lengths = rng.integers(1, tmax + 1, size=B)
    lengths[0] = 1                                   # always include a length-1 chain
    draw = (lambda *s: rng.integers(-2, 3, size=s).astype(float)) if ties else (lambda *s: rng.normal(size=s))
    U = draw(B, tmax, K)
    first, last, trans = draw(K), draw(K), draw(K, K)
    gt = np.stack([rng.integers(0, K, size=tmax) for _ in range(B)])
    t = lambda a: torch.tensor(a, dtype=dtype)
    return U, first, last, trans, gt, lengths, t


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("augment", [False, True])
def test_viterbi_equals_brute_force(dtype, ties, augment):
    rng = np.random.default_rng(hash((str(dtype), ties, augment)) % 2**32)
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    checked = 0
    for K in (1, 2, 3, 4):
        U, first, last, trans, gt, lengths, t = random_batch(rng, 60, K, 5, ties, dtype)
        gt_t = torch.tensor(np.where(np.arange(5)[None] < lengths[:, None], gt, -1))
        labels, scores = viterbi(t(U), torch.tensor(lengths), t(first), t(last), t(trans),
                                 gt=gt_t if augment else None)
        # the ragged numba kernel on the same chains
        rows = np.concatenate([U[b, :lengths[b]] for b in range(len(lengths))])
        off = np.concatenate([[0], np.cumsum(lengths)])
        gflat = np.concatenate([gt[b, :lengths[b]] for b in range(len(lengths))])
        rlab, rscores = viterbi_ragged(rows, off, first, last, trans, gt=gflat if augment else None)
        for b, T in enumerate(lengths):
            g = gt[b, :T] if augment else None
            best = brute_force_chain(U[b, :T], first, last, trans, g)
            assert abs(float(scores[b]) - best) <= tol * max(1.0, abs(best))
            assert abs(rscores[b] - best) <= 1e-10 * max(1.0, abs(best))
            # the returned labelings attain the maximum (ties may pick any maximizer)
            for y in (labels[b, :T].tolist(), rlab[off[b]:off[b + 1]].tolist()):
                v = chain_score(U[b, :T], first, last, trans, y) + (np.mean(np.array(y) != g) if augment else 0)
                assert abs(v - best) <= tol * max(1.0, abs(best))
            assert (labels[b, T:] == -1).all()
            checked += 1
    assert checked == 240


def test_many_random_chains_ragged():
    """Thousands of chains (K <= 4, T <= 5) through the ragged kernel in one call."""
    rng = np.random.default_rng(7)
    n, K = 2000, 3
    lengths = rng.integers(1, 6, size=n)
    off = np.concatenate([[0], np.cumsum(lengths)])
    U = rng.integers(-3, 4, size=(off[-1], K)).astype(float)
    first, last, trans = rng.normal(size=K), rng.normal(size=K), rng.normal(size=(K, K))
    gt = rng.integers(0, K, size=off[-1])
    _, scores = viterbi_ragged(U, off, first, last, trans, gt=gt)
    for i in range(n):
        best = brute_force_chain(U[off[i]:off[i + 1]], first, last, trans, gt[off[i]:off[i + 1]])
        assert abs(scores[i] - best) < 1e-10


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.lists(st.integers(1, 6), min_size=1, max_size=8), st.integers(0, 2**31 - 1))
def test_torch_and_ragged_agree(K, lengths, seed):
    rng = np.random.default_rng(seed)
    lengths = np.array(lengths)
    T = lengths.max()
    U = rng.normal(size=(len(lengths), T, K))
    first, last, trans = rng.normal(size=K), rng.normal(size=K), rng.normal(size=(K, K))
    lab, sc = viterbi(torch.tensor(U), torch.tensor(lengths), torch.tensor(first), torch.tensor(last),
                      torch.tensor(trans))
    rows = np.concatenate([U[b, :lengths[b]] for b in range(len(lengths))])
    off = np.concatenate([[0], np.cumsum(lengths)])
    rlab, rsc = viterbi_ragged(rows, off, first, last, trans)
    np.testing.assert_allclose(sc.numpy(), rsc, rtol=1e-12, atol=1e-12)
    # continuous random potentials: the maximizer is unique almost surely
    assert lab[torch.arange(T)[None] < torch.tensor(lengths)[:, None]].tolist() == rlab.tolist()


@pytest.mark.parametrize("augment", [False, True])
def test_decode_backends_are_one_call(augment):
    """oracles.decode: the numba and torch kernels behind one padded call give the same optimum."""
    rng = np.random.default_rng(7)
    U, first, last, trans, gt, lengths, t = random_batch(rng, 80, 4, 6, False, torch.float64)
    L = torch.tensor(lengths)
    gt_t = torch.tensor(np.where(np.arange(6)[None] < lengths[:, None], gt, -1)) if augment else None
    out = {b: decode(t(U), L, t(first), t(last), t(trans), gt=gt_t, backend=b) for b in ("numba", "torch", "auto")}
    assert torch.equal(out["numba"][0], out["auto"][0])
    assert torch.allclose(out["numba"][1], out["torch"][1], atol=1e-10)
    assert bool(((out["numba"][0] == -1) == (torch.arange(6)[None] >= L[:, None])).all())
    for b in range(len(lengths)):
        y = out["numba"][0][b, :lengths[b]].tolist()
        val = chain_score(U[b], first, last, trans, y) + (np.mean(np.array(y) != gt[b, :lengths[b]]) if augment else 0)
        assert val == pytest.approx(float(out["torch"][1][b]), abs=1e-10)
    with pytest.raises(ValueError, match="backend"):
        decode(t(U).float(), L, t(first).float(), t(last).float(), t(trans).float(), backend="numba")


@pytest.mark.parametrize("constraints", [False, True])
@pytest.mark.parametrize("ties", [False, True])
def test_columnwise_recursion_equals_the_rowwise_step_bit_for_bit(constraints, ties):
    """One transition matrix runs either loop order (forced, or picked by K); the same matrix repeated
    per position runs the row-wise step. Same sums, same association, same tie rule: the labels and
    scores must be equal bit for bit across all of them, with ties and with 0 / -inf tag penalties,
    loss-augmented or not, on both sides of the crossover K."""
    from ssvm_torch.chain.numba_viterbi import (AUTO, COLUMNWISE, COLUMNWISE_MIN_K, NO_PEN, ROWWISE,
                                                viterbi_segment_tt)
    rng = np.random.default_rng(7 + 2 * constraints + ties)
    for K in (1, 2, 3, 7, 8, 9, COLUMNWISE_MIN_K - 1, COLUMNWISE_MIN_K, 22, 45):
        for _ in range(12):
            T = int(rng.integers(1, 30))
            draw = (lambda *s: rng.integers(-2, 3, size=s).astype(float)) if ties else (lambda *s: rng.normal(size=s))
            U, first, last, trans = draw(T, K), draw(K), draw(K), draw(K, K)
            pen = np.where(rng.random((K + 2, K)) < 0.3, -np.inf, 0.0) if constraints else NO_PEN
            gt = rng.integers(0, K, size=T)
            lw = float(rng.choice([0.0, 1.0 / T]))
            runs = []
            for per_position, order in ((False, ROWWISE), (False, COLUMNWISE), (False, AUTO), (True, AUTO)):
                trans3 = np.repeat(trans[None], T, axis=0) if per_position else trans[None].copy()
                out = np.empty(T, dtype=np.int64)
                score = viterbi_segment_tt(U, 0, T, first, last, trans3, per_position, gt, lw, out, np.empty(K),
                                           np.empty(K), np.empty((T, K), dtype=np.int64), pen, order)
                runs.append((out, score))
            for out, score in runs[1:]:
                assert np.array_equal(runs[0][0], out) and runs[0][1] == score
