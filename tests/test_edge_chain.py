"""The edge-potential linear chain (ssvm_torch/chain/edge_chain.py): every operation against enumeration of all
labelings (hypothesis: ragged lengths 0..N, -inf moves, ties, both backends), against torch-struct's LinearChainCRF
(partition, marginals, argmax, the HMM adapter), against the factorized chain of the package, gradients (gradcheck,
the hinge's subgradient), potentials beyond float64's exponent range, and the refusals."""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ssvm_torch.chain import chain_decode, chain_log_partition, chain_marginals, edge_chain, edge_potentials
from ssvm_torch.errors import SSVMInputError

KERNELS = ("numba", "torch")


def labelings(phi: torch.Tensor, L: int, gold=None):
    """[(labeling, s(z), Delta(z, gold))] of one row's potentials (N-1, K, K) by enumeration."""
    K = phi.shape[-1]
    rows = []
    for z in itertools.product(range(K), repeat=L):
        s = sum(float(phi[n, z[n + 1], z[n]]) for n in range(L - 1))
        delta = 0 if gold is None else sum(int(a != int(g)) for a, g in zip(z, gold[:L]))
        rows.append((z, s, delta))
    return rows


def lse(values) -> float:
    values = [v for v in values if v > -math.inf]
    if not values:
        return -math.inf
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


@st.composite
def chains(draw):
    """(phi (B, N-1, K, K) float64, lengths (B,), gold (B, N)): integer potentials (ties) or Gaussian ones, a share
    of the moves forbidden (-inf) where every row keeps a labeling."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    B, N, K = draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    phi = rng.integers(-2, 3, size=(B, N - 1, K, K)).astype(float) if draw(st.booleans()) \
        else rng.normal(size=(B, N - 1, K, K)) * draw(st.sampled_from([0.1, 1.0, 10.0]))
    if draw(st.booleans()) and K > 1:
        forbid = rng.uniform(size=phi.shape) < 0.3
        forbid[..., 0, 0] = False                        # label 0 throughout stays allowed
        phi[forbid] = -np.inf
    lengths = rng.integers(0, N + 1, size=B)
    return torch.tensor(phi), torch.tensor(lengths), torch.tensor(rng.integers(0, K, size=(B, N)))


@given(chains(), st.sampled_from(KERNELS))
@example((torch.zeros(1, 0, 2, 2, dtype=torch.float64), torch.tensor([1]), torch.tensor([[1]])), "numba")
@example((torch.zeros(2, 2, 1, 1, dtype=torch.float64), torch.tensor([0, 3]), torch.zeros(2, 3, dtype=torch.int64)),
         "torch")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_equals_enumeration(chain, kernels):
    phi, lengths, gold = chain
    B, N1, K, _ = phi.shape
    logz = edge_chain.log_partition(phi, lengths, kernels)
    mu = edge_chain.marginals(phi, lengths, kernels)
    tags, best = edge_chain.decode(phi, lengths, kernels)
    nll = edge_chain.crf_nll(phi, gold, lengths, kernels)
    hinge = edge_chain.hinge(phi, gold, lengths, kernels)
    margin = edge_chain.softmax_margin(phi, gold, lengths, kernels)
    gold_score = edge_chain.score(phi, gold, lengths)
    for b in range(B):
        L = int(lengths[b])
        rows = labelings(phi[b], L, gold[b])
        z = lse([s for _, s, _ in rows])
        assert float(logz[b]) == pytest.approx(z, abs=1e-10)
        top = max(s for _, s, _ in rows)
        assert float(best[b]) == pytest.approx(top, abs=1e-10)
        assert (tags[b, L:] == -1).all()
        assert float(edge_chain.score(phi[b:b + 1], tags[b:b + 1].clamp(min=0), lengths[b:b + 1])) == \
            pytest.approx(top, abs=1e-10)
        expected = np.zeros((N1, K, K))
        for labels, s, _ in rows:
            for n in range(L - 1):
                expected[n, labels[n + 1], labels[n]] += math.exp(s - z) if s > -math.inf else 0.0
        np.testing.assert_allclose(mu[b].numpy(), expected, atol=1e-10)
        y = tuple(int(t) for t in gold[b, :L])
        s_gold = next(s for labels, s, _ in rows if labels == y)
        assert float(gold_score[b]) == pytest.approx(s_gold, abs=1e-10)
        if s_gold == -math.inf:
            continue                                        # a gold labeling on a forbidden move: infinite losses
        assert float(nll[b]) == pytest.approx(z - s_gold, abs=1e-10)
        assert float(hinge[b]) == pytest.approx(max(s + d for _, s, d in rows) - s_gold, abs=1e-10)
        assert float(margin[b]) == pytest.approx(lse([s + d for _, s, d in rows]) - s_gold, abs=1e-10)


@given(chains(), st.integers(1, 7), st.sampled_from(KERNELS))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_n_best_labelings_equal_enumeration(chain, n, kernels):
    phi, lengths, _ = chain
    tags, scores = edge_chain.nbest(phi, lengths, n, kernels)
    assert tags.shape == (phi.shape[0], n, phi.shape[1] + 1) and scores.shape == (phi.shape[0], n)
    for b in range(phi.shape[0]):
        L = int(lengths[b])
        finite = sorted((s for _, s, _ in labelings(phi[b], L) if s > -math.inf), reverse=True)
        assert scores[b].tolist() == pytest.approx((finite + [-math.inf] * n)[:n], abs=1e-10)
        found = [tuple(tags[b, q, :L].tolist()) for q in range(n) if scores[b, q] > -math.inf]
        assert len(set(found)) == len(found)                        # distinct labelings
        for q in range(n):
            if scores[b, q] == -math.inf:
                assert (tags[b, q] == -1).all()
                continue
            assert (tags[b, q, L:] == -1).all()
            assert float(edge_chain.score(phi[b:b + 1], tags[b:b + 1, q].clamp(min=0), lengths[b:b + 1])) == \
                pytest.approx(float(scores[b, q]), abs=1e-10)


@given(chains(), st.integers(1, 4), st.booleans(), st.sampled_from(KERNELS))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_mbr_labelings_have_the_least_expected_loss_by_enumeration(chain, n, hamming, kernels):
    phi, lengths, _ = chain
    K = phi.shape[-1]
    cost = None if hamming else torch.rand(K, K, generator=torch.Generator().manual_seed(K), dtype=torch.float64)
    C = 1.0 - torch.eye(K, dtype=torch.float64) if cost is None else cost
    tags, gains = edge_chain.mbr_decode(phi, lengths, cost, n, kernels)
    position = edge_chain.position_marginals(phi, lengths, kernels)
    if n == 1:
        tags, gains = tags[:, None], gains[:, None]
    for b in range(phi.shape[0]):
        L = int(lengths[b])
        rows = labelings(phi[b], L)
        z = lse([s for _, s, _ in rows])
        probs = [(labels, math.exp(s - z) if s > -math.inf else 0.0) for labels, s, _ in rows]
        for t in range(L):
            for k in range(K):
                assert float(position[b, t, k]) == pytest.approx(sum(p for y, p in probs if y[t] == k), abs=1e-10)
        risk = {y: sum(p * sum(float(C[g[t], y[t]]) for t in range(L)) for g, p in probs)
                for (y, s, _) in rows if s > -math.inf}
        best = (sorted(-r for r in risk.values())[::-1] + [-math.inf] * n)[:n]
        assert gains[b].tolist() == pytest.approx(best, abs=1e-10)
        for q in range(n):
            if best[q] > -math.inf:
                assert -risk[tuple(tags[b, q, :L].tolist())] == pytest.approx(best[q], abs=1e-10)


@given(chains(), st.integers(0, 2 ** 32 - 1))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_entropy_kl_and_cross_entropy_equal_enumeration(chain, seed):
    phi, lengths, _ = chain
    rng = np.random.default_rng(seed)
    other = torch.tensor(rng.normal(size=phi.shape))
    if phi.shape[-1] > 1 and rng.uniform() < 0.5:
        other[torch.tensor(rng.uniform(size=phi.shape) < 0.2)] = float("-inf")   # q may forbid what p allows
    H, D, C = (edge_chain.entropy(phi, lengths), edge_chain.kl(phi, other, lengths),
               edge_chain.cross_entropy(phi, other, lengths))
    for b in range(phi.shape[0]):
        L = int(lengths[b])
        p_rows, q_rows = labelings(phi[b], L), labelings(other[b], L)
        zp, zq = lse([s for _, s, _ in p_rows]), lse([s for _, s, _ in q_rows])
        # a q forbidding every labeling of the row (log Z_q = -inf) gives each one log q = -inf, not -inf - -inf
        probs = [(math.exp(s - zp), s - zp, sq - zq if zq > -math.inf else -math.inf)
                 for (_, s, _), (_, sq, _) in zip(p_rows, q_rows) if s > -math.inf]
        entropy = -sum(p * logp for p, logp, _ in probs)
        cross = math.inf if any(logq == -math.inf for _, _, logq in probs) else -sum(p * logq for p, _, logq in probs)
        assert float(H[b]) == pytest.approx(entropy, abs=1e-10)
        assert float(C[b]) == pytest.approx(cross, abs=1e-10)
        assert float(D[b]) == pytest.approx(cross - entropy if cross < math.inf else math.inf, abs=1e-10)


def test_entropy_and_kl_equal_torch_struct_and_their_gradients_pass_gradcheck():
    g = torch.Generator().manual_seed(8)
    phi, other = torch.randn(5, 6, 4, 4, generator=g, dtype=torch.float64), torch.randn(5, 6, 4, 4, generator=g,
                                                                                       dtype=torch.float64)
    lengths = torch.tensor([7, 3, 7, 2, 5])
    p, q = torch_struct_crf(phi.clone(), lengths), torch_struct_crf(other.clone(), lengths)
    torch.testing.assert_close(edge_chain.entropy(phi, lengths), p.entropy.detach())
    torch.testing.assert_close(edge_chain.kl(phi, other, lengths), p.kl(q).detach())
    small, small_q, L = phi[:2, :3, :3, :3], other[:2, :3, :3, :3], torch.tensor([4, 2])
    torch.autograd.gradcheck(lambda x: edge_chain.entropy(x, L), (small.clone().requires_grad_(),))
    torch.autograd.gradcheck(lambda x, y: edge_chain.kl(x, y, L), (small.clone().requires_grad_(),
                                                                  small_q.clone().requires_grad_()))
    with pytest.raises(SSVMInputError, match="other_edges: expected potentials like edges"):
        edge_chain.kl(phi, other[:, :3], lengths)


def test_samples_follow_the_crf_and_never_take_a_forbidden_move():
    g = torch.Generator().manual_seed(6)
    phi = torch.randn(3, 3, 3, 3, generator=g, dtype=torch.float64)
    phi[0, 1, 2, :] = float("-inf")                            # label 2 never at position 2 of row 0
    phi[1, 0, :, 1] = float("-inf")
    lengths, draws = torch.tensor([4, 2, 1]), 20000
    samples = edge_chain.sample(phi, lengths, n=draws, generator=torch.Generator().manual_seed(7))
    assert samples.shape == (3, draws, 4)
    for b in range(3):
        L = int(lengths[b])
        assert (samples[b, :, L:] == -1).all()
        rows = labelings(phi[b], L)
        z = lse([s for _, s, _ in rows])
        counts = {}
        for y in samples[b, :, :L].tolist():
            counts[tuple(y)] = counts.get(tuple(y), 0) + 1
        for labels, s, _ in rows:
            p = math.exp(s - z) if s > -math.inf else 0.0
            if p == 0.0:
                assert labels not in counts                    # a forbidden move is never drawn
            assert abs(counts.get(labels, 0) / draws - p) <= 4 * math.sqrt(p * (1 - p) / draws) + 1e-3
    with pytest.raises(SSVMInputError, match="n: expected an int >= 1"):
        edge_chain.sample(phi, lengths, n=0)


def torch_struct_crf(phi, lengths):
    import torch_struct
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch_struct.LinearChainCRF(phi, lengths=lengths)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_partition_marginals_and_argmax_equal_torch_struct(kernels, dtype):
    g = torch.Generator().manual_seed(3)
    phi = torch.randn(6, 11, 7, 7, generator=g, dtype=dtype) * 3
    lengths = torch.tensor([12, 2, 7, 12, 5, 9])
    ref = torch_struct_crf(phi.clone(), lengths)
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(edge_chain.log_partition(phi, lengths, kernels), ref.partition.detach(),
                               atol=tol, rtol=tol)
    torch.testing.assert_close(edge_chain.marginals(phi, lengths, kernels), ref.marginals.detach(), atol=tol, rtol=tol)
    tags, scores = edge_chain.decode(phi, lengths, kernels)
    torch.testing.assert_close(scores, (ref.argmax.detach() * phi).sum((1, 2, 3)), atol=tol, rtol=tol)
    assert scores.dtype == dtype and edge_chain.marginals(phi, lengths, kernels).dtype == dtype


def test_the_hmm_adapter_equals_torch_struct_and_scores_the_joint_log_probability():
    import torch_struct
    g = torch.Generator().manual_seed(0)
    T, E, I = (torch.randn(4, 4, generator=g).log_softmax(0), torch.randn(9, 4, generator=g).log_softmax(0),
               torch.randn(4, generator=g).log_softmax(0))
    x = torch.randint(0, 9, (3, 6), generator=g)
    edges = edge_chain.edges_from_hmm(T, E, I, x)
    torch.testing.assert_close(edges, torch_struct.LinearChain.hmm(T, E, I, x))
    z = torch.randint(0, 4, (3, 6), generator=g)
    joint = I[z[:, 0]] + E[x, z].sum(1) + T[z[:, 1:], z[:, :-1]].sum(1)
    torch.testing.assert_close(edge_chain.score(edges, z), joint)
    # p(x) sums the joint over z: log Z is the log-likelihood of the observations, <= 0
    assert (edge_chain.log_partition(edges) <= 1e-6).all()


@pytest.mark.parametrize("kernels", KERNELS)
def test_the_factorized_chain_is_the_case_of_shared_transitions(kernels):
    g = torch.Generator().manual_seed(1)
    U, first, last, trans = (torch.randn(5, 8, 6, generator=g, dtype=torch.float64), torch.randn(6, generator=g,
                             dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64),
                             torch.randn(6, 6, generator=g, dtype=torch.float64))
    lengths = torch.tensor([8, 2, 5, 8, 3])
    phi = edge_potentials(U, lengths, first, last, trans)
    torch.testing.assert_close(edge_chain.log_partition(phi, lengths, kernels),
                               chain_log_partition(U, lengths, first, last, trans))
    tags, _ = edge_chain.decode(phi, lengths, kernels)
    assert torch.equal(tags, chain_decode(U, lengths, first, last, trans))
    mu = edge_chain.marginals(phi, lengths, kernels)                   # the next label's marginals of every edge
    torch.testing.assert_close(mu.sum(3), chain_marginals(U, lengths, first, last, trans)[:, 1:]
                               * (torch.arange(1, 8)[None, :] < lengths[:, None])[..., None])


@pytest.mark.parametrize("kernels", KERNELS)
def test_gradients_are_the_marginals_and_pass_gradcheck(kernels):
    g = torch.Generator().manual_seed(2)
    phi = torch.randn(3, 4, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    lengths, gold = torch.tensor([5, 3, 1]), torch.randint(0, 3, (3, 5), generator=g)
    weights = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    (edge_chain.log_partition(phi, lengths, kernels) * weights).sum().backward()
    torch.testing.assert_close(phi.grad, weights[:, None, None, None] * edge_chain.marginals(phi.detach(), lengths))
    torch.autograd.gradcheck(lambda p: edge_chain.log_partition(p, lengths, kernels), (phi.detach().requires_grad_(),))
    for loss in (edge_chain.crf_nll, edge_chain.softmax_margin):
        torch.autograd.gradcheck(lambda p: loss(p, gold, lengths, kernels), (phi.detach().requires_grad_(),))
    # the hinge's gradient: the loss-augmented labeling's edge indicators minus the gold labeling's
    p = phi.detach().requires_grad_(True)
    edge_chain.hinge(p, gold, lengths, kernels).sum().backward()
    aug = edge_chain.loss_augmented(phi.detach(), gold, lengths)
    best, _ = edge_chain.decode(aug, lengths, kernels)
    expected = torch.zeros_like(phi)
    for b in range(3):
        for n in range(int(lengths[b]) - 1):
            expected[b, n, best[b, n + 1], best[b, n]] += 1
            expected[b, n, gold[b, n + 1], gold[b, n]] -= 1
    torch.testing.assert_close(p.grad, expected)


def test_potentials_beyond_the_exponent_range_take_the_log_space_recursion():
    """Spreads of thousands within one position underflow the scaled recursion's exponentials: the compiled kernel
    redoes such rows in log space and agrees with the torch scan."""
    g = torch.Generator().manual_seed(4)
    phi = torch.randn(4, 9, 5, 5, generator=g, dtype=torch.float64) * 2000
    lengths = torch.tensor([10, 4, 10, 2])
    torch.testing.assert_close(edge_chain.log_partition(phi, lengths, "numba"),
                               edge_chain.log_partition(phi, lengths, "torch"))
    torch.testing.assert_close(edge_chain.marginals(phi, lengths, "numba"), edge_chain.marginals(phi, lengths, "torch"),
                               atol=1e-9, rtol=0)


@pytest.mark.parametrize("kernels", KERNELS)
def test_refusals_name_the_field(kernels):
    phi = torch.zeros(2, 3, 2, 2)
    with pytest.raises(SSVMInputError, match="edges: expected a floating"):
        edge_chain.log_partition(torch.zeros(2, 3, 2), kernels=kernels)
    with pytest.raises(SSVMInputError, match="edges: expected a floating"):
        edge_chain.decode(torch.zeros(2, 3, 2, 3), kernels=kernels)
    with pytest.raises(SSVMInputError, match="edges: expected scores without NaN"):
        edge_chain.log_partition(phi.index_put((torch.tensor([1]),), torch.tensor(float("nan"))), kernels=kernels)
    with pytest.raises(SSVMInputError, match=r"lengths: expected row lengths in 0..4"):
        edge_chain.marginals(phi, torch.tensor([5, 2]), kernels)
    with pytest.raises(SSVMInputError, match="lengths: expected a \\(2,\\) integer tensor"):
        edge_chain.marginals(phi, torch.tensor([2.0, 2.0]), kernels)
    with pytest.raises(SSVMInputError, match="tags: expected labels in 0..1 at every position of a row, row 1 has 2"):
        edge_chain.crf_nll(phi, torch.tensor([[0, 1, 1, 0], [0, 2, 0, 0]]), kernels=kernels)
    blocked = phi.clone()
    blocked[1, 1] = float("-inf")                             # every move into position 2 of row 1 forbidden
    with pytest.raises(SSVMInputError, match="edges: expected at least one labeling of finite score for every row, "
                                             "row 1 "):
        edge_chain.log_partition(blocked, kernels=kernels)
    with pytest.raises(SSVMInputError, match="row 1"):
        edge_chain.decode(blocked, kernels=kernels)
    assert edge_chain.log_partition(blocked, torch.tensor([4, 2]), kernels)[1] == pytest.approx(math.log(4))
    with pytest.raises(SSVMInputError, match="kernels"):
        edge_chain.log_partition(phi, kernels="triton")
    with pytest.raises(SSVMInputError, match="observations: expected symbols in 0..2"):
        edge_chain.edges_from_hmm(torch.zeros(2, 2), torch.zeros(3, 2), torch.zeros(2), torch.tensor([[0, 3]]))


def test_numba_is_refused_off_the_cpu_dtypes_and_the_torch_path_serves_half_precision():
    phi = torch.randn(2, 3, 4, 4).to(torch.bfloat16)
    with pytest.raises(SSVMInputError, match="kernels: 'numba' needs CPU float32/float64"):
        edge_chain.log_partition(phi, kernels="numba")
    torch.testing.assert_close(edge_chain.log_partition(phi).float(), edge_chain.log_partition(phi.float()),
                               atol=0.1, rtol=0.02)


def test_torch_compile_traces_the_torch_path():
    """Under torch.compile the operations take the torch scan and skip the value checks (a traced graph cannot
    branch on values), with the eager results."""
    g = torch.Generator().manual_seed(9)
    phi, lengths = torch.randn(3, 5, 4, 4, generator=g, dtype=torch.float64), torch.tensor([6, 3, 1])
    gold = torch.randint(0, 4, (3, 6), generator=g)
    loss = torch.compile(lambda p: edge_chain.crf_nll(p, gold, lengths), backend="eager")
    torch.testing.assert_close(loss(phi), edge_chain.crf_nll(phi, gold, lengths))
    best = torch.compile(lambda p: edge_chain.decode(p, lengths)[0], backend="eager")
    assert torch.equal(best(phi), edge_chain.decode(phi, lengths)[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_torch_path_on_cuda_equals_the_compiled_kernels():
    g = torch.Generator().manual_seed(5)
    phi, lengths = torch.randn(8, 20, 9, 9, generator=g, dtype=torch.float64), torch.randint(1, 22, (8,), generator=g)
    logz = edge_chain.log_partition(phi.cuda(), lengths.cuda())
    torch.testing.assert_close(logz.cpu(), edge_chain.log_partition(phi, lengths))
    torch.testing.assert_close(edge_chain.marginals(phi.cuda(), lengths.cuda()).cpu(),
                               edge_chain.marginals(phi, lengths))
    assert torch.equal(edge_chain.decode(phi.cuda(), lengths.cuda())[0].cpu(), edge_chain.decode(phi, lengths)[0])
