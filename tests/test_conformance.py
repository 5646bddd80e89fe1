"""Conformance suite: every structure passes the same checks through the one model interface.

A structure enters by one line in STRUCTURES: a tiny-instance generator (model, data, the indices
of w kept >= 0) and a brute-force enumerator of all labelings of one example. The checks:

* decode(scores(w)) attains the brute-force max of <w, phi(x_i, y)>;
* the loss-augmented oracle returns H_i = max_y L_i(y) - <w, psi_i(y)> and a labeling attaining it;
* scores(w) is linear in w (the feature map does not depend on w);
* the exact duality gap of a run equals an independent primal - dual (brute-force H_i);
* the store's v equals the sum of its blocks after many random steps (no drift, no lost update);
* a checkpoint written and read through ssvm_torch.outputs resumes to the same trajectory;
* where a structure has two kernels (compiled and pure torch), both give the same result;
* every other solver (batch FW, SSG, EG, the dual extragradient, the cutting plane) on every store, the
  edge-feature chain's too, is refused by name or certified: its model's primal the brute-force one, its gap the
  brute-force primal minus the store's dual, and each block (w_i, ell_i) a convex combination of its corners
  (non-negative least squares over every labeling).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch

from conftest import (all_labeled_trees, all_segmentations, random_chain_data, random_dependency_data,
                      random_segment_data, random_sibling_data, random_span_data)
from tree_reference import all_trees
from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.solvers import make_solver
from ssvm_torch.data import ChainData, ExplicitData, FlatData, GraphData, GraphExample, PairData, PoseData
from ssvm_torch.models import (ChainModel, ConstituencyModel, DependencyModel, ExplicitModel, GraphCRFModel,
                               GraphCutModel, MatchingModel, MulticlassModel, MultiLabelModel, SemiMarkovModel,
                               SiblingDependencyModel, TreePoseModel)
from ssvm_torch.oracles.distance_transform import tree_max_sum, torch_dt1d
from ssvm_torch.outputs import load_checkpoint, save_checkpoint


@dataclass
class Structure:
    make: Callable            # rng -> (model, data, nonnegative index or None)
    enumerate: Callable       # (model, data, i) -> every labeling of example i, batched
    two_kernels: bool = False


# -- tiny instances and enumerators ------------------------------------------------------------
def chain(rng, sparse=False):
    data = random_chain_data(rng, 5, 3, 4, tmin=1, tmax=4)
    if sparse:
        X = data.X * torch.tensor(rng.uniform(size=data.X.shape) < 0.5)
        data = ChainData(X.to_sparse_csr(), data.Y, data.offsets, data.n_states)
    return ChainModel.for_data(data), data, None


def chain_labelings(model, data, i):
    return torch.tensor(list(itertools.product(range(model.K), repeat=int(data.lengths[i]))))


def multiclass(rng):
    data = FlatData(rng.normal(size=(8, 3)), rng.integers(0, 4, size=8))
    return MulticlassModel.for_data(data, 4), data, None


def multilabel(rng):
    data = FlatData(rng.normal(size=(6, 3)), rng.integers(0, 2, size=(6, 3)))
    return MultiLabelModel.for_data(data), data, None


def graphcut(rng):
    graphs = []
    for _ in range(5):
        N = int(rng.integers(2, 7))
        pairs = np.array(list(itertools.combinations(range(N), 2)))
        edges = pairs[rng.uniform(size=len(pairs)) < 0.5]
        edges = edges if len(edges) else pairs[:1]
        graphs.append(GraphExample(rng.normal(size=(N, 3)), edges, rng.uniform(size=(len(edges), 2)),
                                   rng.integers(0, 2, size=N)))
    data = GraphData(graphs)
    model = GraphCutModel.for_data(data)
    return model, data, model.pairwise_index


def binary_labelings(model, data, i):
    return torch.tensor(list(itertools.product((0, 1), repeat=int(data.sizes[i]))))


def graph_crf(rng, tree=True, inference="enumerate"):
    """Multi-class pairwise graphs with signed edge features: forests under the LP oracle (exact there), graphs
    with cycles under an exact oracle (enumeration, or branch and bound over the LP)."""
    graphs = []
    for _ in range(5):
        N = int(rng.integers(1, 6))
        if tree:
            edges = np.array([[v, int(rng.integers(0, v))] for v in range(1, N)]).reshape(-1, 2)
        else:
            pairs = np.array(list(itertools.combinations(range(N), 2))).reshape(-1, 2)
            edges = pairs[rng.uniform(size=len(pairs)) < 0.7]
        graphs.append(GraphExample(rng.normal(size=(N, 3)), edges, rng.normal(size=(len(edges), 2)),
                                   rng.integers(0, 3, size=N)))
    data = GraphData(graphs, n_states=3)
    # the loopy instance ties its first edge feature's table symmetric (symmetric_edge_features)
    return GraphCRFModel.for_data(data, inference="lp" if tree else inference,
                                  symmetric_edge_features=() if tree else (0,)), data, None


def graph_labelings(model, data, i):
    Y = torch.tensor(list(itertools.product(range(model.K), repeat=int(data.sizes[i]))))
    return model.one_hot(data, torch.full((len(Y),), i), Y.reshape(-1))


def pose(rng):
    J, H, W = 3, 3, 3
    parents = [-1] + [int(rng.integers(0, j)) for j in range(1, J)]
    data = PoseData(torch.tensor(rng.normal(size=(3, J, H, W))),
                    torch.stack([torch.tensor(rng.integers(0, [H, W], size=(J, 2))) for _ in range(3)]))
    model = TreePoseModel.for_data(data, parents, scale=2.0, radius=0)
    return model, data, model.pairwise_index


def pose_labelings(model, data, i):
    cells = list(itertools.product(range(data.H), range(data.W)))
    return torch.tensor(list(itertools.product(cells, repeat=model.J)))


def alignments(m, n):
    for a in itertools.product(range(-1, n), repeat=m):
        used = [j for j in a if j >= 0]
        if len(used) == len(set(used)):
            yield list(a)


def matching(rng):
    X, Ne, Nf, T = [], [], [], []
    for _ in range(4):
        m, n = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        X.append(rng.normal(size=(m, n, 3)))
        Ne.append(rng.normal(size=(m, 2)))
        Nf.append(rng.normal(size=(n, 2)))
        cands = list(alignments(m, n))
        T.append(np.array(cands[int(rng.integers(len(cands)))]))
    data = PairData(X, Ne, Nf, T)
    return MatchingModel.for_data(data), data, None


def matching_labelings(model, data, i):
    m, n = data.X[i].shape[:2]
    return torch.tensor(list(alignments(m, n)))


def explicit(rng):
    psi, losses = [], []
    for _ in range(6):
        m = int(rng.integers(2, 6))
        p = rng.normal(size=(m, 4))
        p[0] = 0.0
        psi.append(p)
        losses.append(np.r_[0.0, rng.uniform(0.1, 1.0, size=m - 1)])
    data = ExplicitData(psi, losses)
    return ExplicitModel.for_data(data), data, None


def explicit_labelings(model, data, i):
    return torch.arange(int(torch.isfinite(data.losses[i]).sum()))


def dependency(rng, projective=True):
    data = random_dependency_data(rng, 5, 7, lmin=1, lmax=4, per_arc=3, projective_only=projective)
    return DependencyModel.for_data(data, projective=projective), data, None


def dependency_trees(model, data, i):
    """Every tree of the model's space over sentence i's words, as labeling rows (-1 at the root position)."""
    return torch.tensor(all_trees(int(data.lengths[i]), model.projective, model.multiroot))


def sibling(rng, table_max=None, first_child=True):
    data = random_sibling_data(rng, 5, 7, lmin=1, lmax=4, per_arc=3, table_max=table_max, first_child=first_child)
    return SiblingDependencyModel.for_data(data), data, None


def semimarkov(rng, outside=None):
    data = random_segment_data(rng, 5, 3, 2, 3, tmin=1, tmax=4, outside=outside, sparse=True)
    return SemiMarkovModel.for_data(data, max_length=2, outside=outside), data, None


def segmentations(model, data, i):
    return torch.tensor(all_segmentations(int(data.lengths[i]), model.K, model.L, model.outside))



def constituency(rng, loss="hamming", inside=True):
    data = random_span_data(rng, 5, 4, 2, lmin=1, lmax=4)
    return ConstituencyModel.for_data(data, loss=loss, fill=0, inside=inside), data, None


def labeled_trees(model, data, i):
    return all_labeled_trees(int(data.lengths[i]), model.L)

STRUCTURES = {
    "chain": Structure(chain, chain_labelings, two_kernels=True),
    "sparse-chain": Structure(lambda rng: chain(rng, sparse=True), chain_labelings, two_kernels=True),
    "multiclass": Structure(multiclass, lambda m, d, i: torch.arange(m.K)),
    "multilabel": Structure(multilabel, lambda m, d, i: m.all),
    "graphcut": Structure(graphcut, binary_labelings),
    "graph-crf": Structure(graph_crf, graph_labelings),
    "graph-crf-loopy-enumerate": Structure(lambda rng: graph_crf(rng, tree=False), graph_labelings),
    "graph-crf-loopy-exact": Structure(lambda rng: graph_crf(rng, tree=False, inference="exact"), graph_labelings),
    "pose": Structure(pose, pose_labelings, two_kernels=True),
    "matching": Structure(matching, matching_labelings),
    "explicit": Structure(explicit, explicit_labelings),
    "dependency": Structure(dependency, dependency_trees, two_kernels=True),
    "dependency-nonprojective": Structure(lambda rng: dependency(rng, projective=False), dependency_trees,
                                          two_kernels=True),
    "sibling-dependency": Structure(sibling, dependency_trees),
    "sibling-dependency-searched": Structure(lambda rng: sibling(rng, table_max=0), dependency_trees),
    "sibling-dependency-adjacent": Structure(lambda rng: sibling(rng, first_child=False), dependency_trees),
    "semimarkov": Structure(semimarkov, segmentations, two_kernels=True),
    "semimarkov-outside": Structure(lambda rng: semimarkov(rng, outside=0), segmentations),
    "constituency": Structure(constituency, labeled_trees, two_kernels=True),
    "constituency-boundary-normalized": Structure(lambda rng: constituency(rng, "normalized", inside=False),
                                                  labeled_trees),
}


def instance(name, seed=0):
    rng = np.random.default_rng(seed)
    model, data, nonneg = STRUCTURES[name].make(rng)
    w = torch.tensor(rng.normal(size=model.d))
    if nonneg is not None:
        w[nonneg] = w[nonneg].abs()
    return model, data, nonneg, w


def values(name, model, data, i, w, augment):
    """<w, phi(x_i, y)> (+ L_i(y)) of every labeling y of example i, by enumeration."""
    Y = STRUCTURES[name].enumerate(model, data, i)
    idx = torch.full((len(Y),), i)
    v = model.phi(data, idx, Y) @ w
    return v + model.loss(data, idx, Y) if augment else v


each = pytest.mark.parametrize("name", list(STRUCTURES))


def strip(h):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in h]


# -- the checks --------------------------------------------------------------------------------
@each
def test_conformance_decode_is_brute_force_argmax(name):
    model, data, _, w = instance(name)
    pred = model.predict(w, data)
    for i in range(data.n):
        v = values(name, model, data, i, w, augment=False)
        got = float(model.phi(data, torch.tensor([i]), pred[i:i + 1]) @ w)
        assert got == pytest.approx(float(v.max()), abs=1e-10), f"{name} example {i}"


@each
def test_conformance_loss_augmented_oracle_is_brute_force(name):
    model, data, _, w = instance(name, seed=1)
    idx = torch.arange(data.n)
    labels, H = model.oracle(w, data, idx)
    for i in range(data.n):
        v = values(name, model, data, i, w, augment=True)
        one = torch.tensor([i])
        gt = float(model.phi(data, one, model.gt_batch(data, one)) @ w)
        assert float(H[i]) == pytest.approx(float(v.max()) - gt, abs=1e-10), f"{name} example {i}"
        attained = float(model.phi(data, one, labels[i:i + 1]) @ w + model.loss(data, one, labels[i:i + 1]))
        assert attained == pytest.approx(float(v.max()), abs=1e-10)
        assert float(model.loss(data, one, model.gt_batch(data, one))) == 0.0          # L_i(y_i) = 0


#: the structures whose models sum a labeling's part scores (StructuredModel.labeling_scores); the others' oracles
#: build phi
SUMMED = {"chain", "sparse-chain", "semimarkov", "semimarkov-outside", "constituency",
          "constituency-boundary-normalized"}


@each
def test_conformance_labeling_scores_are_w_dot_phi(name):
    """Where a model sums a labeling's part scores from its decoder's scores (the oracle's H without a (B, d) phi),
    the sum is <w, phi(x_i, y)> for every labeling y of every example, and the oracle's labelings and H are those
    it gives through phi (``phi_gt`` given)."""
    model, data, _, w = instance(name, seed=4)
    idx = torch.arange(data.n)
    scores = model.scores(w, data, idx)
    summed = model.labeling_scores(scores, data, idx, model.gt_batch(data, idx))
    assert (summed is not None) == (name in SUMMED)
    if summed is None:
        return
    for i in range(data.n):
        Y = STRUCTURES[name].enumerate(model, data, i)
        rows = torch.full((len(Y),), i)
        got = model.labeling_scores(model.scores(w, data, rows), data, rows, Y)
        torch.testing.assert_close(got, model.phi(data, rows, Y) @ w, rtol=0, atol=1e-10)
    labels, H = model.oracle(w, data, idx)
    labels_phi, H_phi = model.oracle(w, data, idx, model.phi(data, idx, model.gt_batch(data, idx)))
    assert torch.equal(labels, labels_phi)
    torch.testing.assert_close(H, H_phi, rtol=0, atol=1e-10)


def _floats(x):
    """The floating-point tensors of a (nested) scores value."""
    if isinstance(x, torch.Tensor):
        return [x] if x.is_floating_point() else []
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _floats(v)]
    return []


@each
def test_conformance_scores_are_linear_in_w(name):
    model, data, nonneg, w1 = instance(name, seed=2)
    w2 = torch.tensor(np.random.default_rng(3).normal(size=model.d), dtype=w1.dtype)    # the same data's
    if nonneg is not None:
        w2[nonneg] = w2[nonneg].abs()
    idx = torch.arange(data.n)
    a, b = 0.7, 1.9
    mixed = _floats(model.scores(a * w1 + b * w2, data, idx))
    parts = zip(_floats(model.scores(w1, data, idx)), _floats(model.scores(w2, data, idx)))
    expected = [a * s1 + b * s2 for s1, s2 in parts]
    assert len(mixed) == len(expected) >= 1
    for got, exp in zip(mixed, expected):
        finite = torch.isfinite(exp)
        assert torch.equal(finite, torch.isfinite(got))
        assert torch.allclose(got[finite], exp[finite], atol=1e-10)
    # the augmented scores differ from the plain ones by w-independent offsets
    s0, s1 = model.scores(0 * w1, data, idx), model.scores(w1, data, idx)
    off0 = [x - y for x, y in zip(_floats(model.augment(s0, data, idx)), _floats(s0))]
    off1 = [x - y for x, y in zip(_floats(model.augment(s1, data, idx)), _floats(s1))]
    for o0, o1 in zip(off0, off1):
        finite = torch.isfinite(o0)
        assert torch.allclose(o0[finite], o1[finite], atol=1e-12)


GAP_RUNS = {"best-cache": dict(step="best", cache=True), "minibatch": dict(batch_size=3)}


@each
@pytest.mark.parametrize("run", list(GAP_RUNS))
def test_conformance_gap_is_independent_primal_minus_dual(name, run):
    model, data, nonneg, _ = instance(name)
    lam = 0.1
    store = make_store(model, data, lam, nonnegative=nonneg)
    hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=6, gap_check=2, seed=4,
                                      **GAP_RUNS[run])).run()
    w, v = store.w.clone(), store.v.clone()
    H = []
    for i in range(data.n):
        best = values(name, model, data, i, w, augment=True)
        one = torch.tensor([i])
        H.append(float(best.max()) - float(model.phi(data, one, model.gt_batch(data, one)) @ w))
    primal = lam / 2 * float(w @ w) + float(np.mean(H))
    dual = store.ell - lam * float(w @ v) + lam / 2 * float(w @ w)       # App. H; = ell - lam/2 |w|^2 if v = w
    last = hist[-1]                                  # the iterate's values (the model may be an earlier check's)
    assert last.get("primal_last", last["primal"]) == pytest.approx(primal, abs=1e-9)
    assert last.get("gap_last", last["gap"]) == pytest.approx(primal - dual, abs=1e-9)
    assert last["gap"] >= -1e-12 and last["primal"] <= primal + 1e-12
    duals = [r["dual"] for r in hist]
    assert all(y >= x - 1e-12 for x, y in zip(duals, duals[1:])) and duals[-1] > duals[0]   # ascent (App. H)


@each
def test_conformance_store_is_the_sum_of_its_blocks(name):
    model, data, nonneg, _ = instance(name, seed=5)
    store = make_store(model, data, 0.05, nonnegative=nonneg)
    sets = None                  # the away steps go on from the pairwise run's decomposition of the point
    for step, cache, tau in (("pairwise", True, 1), ("away", False, 1), ("fw", False, 1), ("fw", False, 2)):
        solver = Solver(store, SolverConfig(solver="bcfw", sampling="perm", step=step, cache=cache, passes=15,
                                            gap_check=15, recompute_every=1000, seed=6, batch_size=tau), sets=sets)
        solver.run()
        sets = solver.sets
        blocks = sum(store.block_w(i) for i in range(data.n))
        assert torch.allclose(store.v, blocks, atol=1e-10), f"{name} after {step} steps"
    if nonneg is not None:
        assert bool((store.w[nonneg] >= 0).all())


@each
def test_conformance_checkpoint_round_trip(name, tmp_path):
    """As ``ssvm-train --checkpoint`` / ``--resume``: the state saved at a gap check, written and
    read back through the run format, continues to the uninterrupted trajectory."""
    model, data, nonneg, _ = instance(name, seed=7)
    cfg = SolverConfig(solver="bcfw", sampling="gap", step="pairwise", cache=True, passes=9, gap_check=2, seed=8)
    full = None

    def save_second(rec):
        if len(full.state.history) == 2:
            save_checkpoint(tmp_path / "checkpoint.pt", full.state_dict())
    full = Solver(make_store(model, data, 0.05, nonnegative=nonneg), cfg, progress=save_second)
    h_full = full.run()
    resumed = Solver(make_store(model, data, 0.05, nonnegative=nonneg), cfg)
    resumed.load_state_dict(load_checkpoint(tmp_path / "checkpoint.pt"))
    assert len(resumed.state.history) == 2 < len(h_full)
    h_res = resumed.run()
    assert strip(h_res) == strip(h_full)
    assert torch.equal(resumed.dual.w, full.dual.w)


@pytest.mark.parametrize("config", [dict(solver="fw"), dict(solver="bcfw", sampling="gap", step="pairwise", cache=True),
                                    dict(solver="cutting-plane", sampling="perm")], ids=lambda c: c["solver"])
def test_a_state_saved_at_any_check_resumes_to_the_uninterrupted_run(config, tmp_path):
    """``progress``'s state at every gap check, the last one included (where the run stops), resumes to the
    uninterrupted history and w: batch FW's state is the one after the iteration's step (its record describes the
    point before it), and a state saved where a stopping criterion held resumes stopped, not one interval later."""
    model, data, nonneg, _ = instance(next(iter(STRUCTURES)), seed=9)
    cfg = SolverConfig(passes=8, gap_check=2, seed=3, **config)
    states = []
    full = None
    full = make_solver(make_store(model, data, 0.05, nonnegative=nonneg), cfg,
                       progress=lambda rec: states.append(save_checkpoint(tmp_path / f"{len(states)}.pt",
                                                                          full.state_dict())))
    h_full = strip(full.run())
    assert len(states) == len(h_full) >= 4
    for path in states[1:]:
        resumed = make_solver(make_store(model, data, 0.05, nonnegative=nonneg), cfg)
        resumed.load_state_dict(load_checkpoint(path))
        assert strip(resumed.run()) == h_full, path.name
        assert torch.equal(resumed.model_point()[0], full.model_point()[0])


@each
def test_conformance_a_foreign_block_state_is_refused_and_touches_nothing(name):
    """A checkpoint's block state from another run: another lam, a tensor of another shape that
    ``Tensor.copy_`` would broadcast (one row of a block matrix), a missing tensor. Each is refused
    naming the field, and the store keeps its own point exactly."""
    from ssvm_torch.errors import SSVMInputError
    model, data, nonneg, _ = instance(name, seed=11)
    donor = make_store(model, data, 0.05, nonnegative=nonneg)
    Solver(donor, SolverConfig(passes=2, gap_check=2, seed=3)).run()
    good = donor.state_dict()
    store = make_store(model, data, 0.05, nonnegative=nonneg)
    Solver(store, SolverConfig(passes=1, gap_check=1, seed=4)).run()
    before = store.state_dict()

    def blocks(state):                  # a box-constrained store nests its inner store's state
        return state["inner"] if "inner" in state else state

    def variant(edit):
        state = {k: (dict(v) if isinstance(v, dict) else v) for k, v in good.items()}
        edit(blocks(state))
        return state

    tensors = [k for k, v in blocks(good).items() if isinstance(v, torch.Tensor) and v.dim() >= 1 and k != "ell"]
    widest = max(tensors, key=lambda k: blocks(good)[k].dim())
    cases = {"state['lam']": variant(lambda s: s.update(lam=0.1)),
             f"state[{widest!r}]": variant(lambda s: s.update({widest: s[widest][:1]})),
             f"state[{tensors[0]!r}]": variant(lambda s: s.pop(tensors[0]))}
    for field, state in cases.items():
        with pytest.raises(SSVMInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
            store.load_state_dict(state)
        after = store.state_dict()
        for key, value in blocks(before).items():
            same = torch.equal(value, blocks(after)[key]) if isinstance(value, torch.Tensor) else value == \
                blocks(after)[key]
            assert same, f"{name}: refusing {field} changed {key}"
    store.load_state_dict(good)
    assert torch.equal(store.w, donor.w)


@pytest.mark.parametrize("name", [n for n, s in STRUCTURES.items() if s.two_kernels])
def test_conformance_torch_kernel_equals_compiled(name):
    model, data, nonneg, w = instance(name, seed=9)
    if isinstance(model, (ChainModel, ConstituencyModel, DependencyModel, SemiMarkovModel)):
        runs = []
        for kernels in ("numba", "torch"):
            store = make_store(model, data, 0.1, kernels=kernels)
            hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=6, gap_check=2, seed=1)).run()
            runs.append((hist, store))
        (ha, a), (hb, b) = runs
        assert (a.kernels, b.kernels) == ("numba", "torch")
        assert hb[-1]["gap"] == pytest.approx(ha[-1]["gap"], rel=1e-9)
        assert torch.allclose(a.w, b.w, atol=1e-10)
        gpa, gpb = a.gap_pass(), b.gap_pass()
        assert torch.allclose(gpa.block_gaps, gpb.block_gaps, atol=1e-10)
        return
    idx = torch.arange(data.n)
    unary, w_pair = model.augment(model.scores(w, data, idx), data, idx)
    rest = model.rest.to(unary)
    loc_nb, best_nb = tree_max_sum(unary, model.parents, w_pair, rest, model.scale)
    loc_t, best_t = tree_max_sum(unary, model.parents, w_pair, rest, model.scale, dt=torch_dt1d)
    assert torch.allclose(best_nb, best_t, atol=1e-10)
    vals = model.phi(data, idx, loc_t) @ w + model.loss(data, idx, loc_t)
    assert torch.allclose(vals, model.phi(data, idx, loc_nb) @ w + model.loss(data, idx, loc_nb), atol=1e-10)


def edge_chain(rng):
    """A chain with edge-observation features (its model has no padded torch oracle: it enters the solver matrix
    below, not STRUCTURES)."""
    from ssvm_torch.models import EdgeChainModel
    from test_chain_edges import random_edge_chains
    data = random_edge_chains(int(rng.integers(1 << 30)), n=5)
    return EdgeChainModel.for_data(data), data, None


def partially_observed(make):
    """The instance of ``make`` with half its positions' labels hidden and completed at a random w (the latent SSVM's
    inner problem: the gold labeling is the completion, the loss counts the observed positions)."""
    def build(rng):
        from ssvm_torch.latent import hide_labels, with_labels
        model, data, nonneg = make(rng)
        part = hide_labels(data, 0.5, int(rng.integers(1 << 30)))
        return model, with_labels(part, model.complete(torch.tensor(rng.normal(size=model.d)), part)), nonneg
    return build


#: the solver matrix's structures: STRUCTURES, the edge-feature chain, and the chains and segmentations with
#: unobserved labels
SOLVER_STRUCTURES = {**STRUCTURES, "chain-edges": Structure(edge_chain, chain_labelings),
                     "chain-partial": Structure(partially_observed(chain), chain_labelings),
                     "chain-edges-partial": Structure(partially_observed(edge_chain), chain_labelings),
                     "semimarkov-partial": Structure(partially_observed(semimarkov), segmentations)}
OTHER_SOLVERS = ("fw", "ssg", "eg", "deg", "cutting-plane")


@pytest.mark.parametrize("name", list(SOLVER_STRUCTURES))
@pytest.mark.parametrize("solver", OTHER_SOLVERS)
def test_conformance_every_solver_is_refused_by_name_or_certified(name, solver):
    """Each solver on each store is refused by name at construction (SSVMInputError) or runs to records that hold:
    the returned model's primal is the brute-force objective (1) at its w, and where the store holds the dual point
    (all but SSG and the dual extragradient, whose records are their own) the last iterate's gap is the brute-force
    primal minus the store's dual. A store that runs a solver it cannot serve (EG on an edge-feature chain before
    2026-12-03: the chain's marginal moves left the edge statistics behind) fails here."""
    from ssvm_torch.errors import SSVMInputError
    from ssvm_torch.solvers import make_solver
    rng = np.random.default_rng(12)
    model, data, nonneg = SOLVER_STRUCTURES[name].make(rng)
    lam = 0.1
    store = make_store(model, data, lam, nonnegative=nonneg)
    try:
        run = make_solver(store, SolverConfig(solver=solver, sampling="perm", passes=6, gap_check=2, seed=1))
    except SSVMInputError as e:
        assert f"solver: {solver!r}" in str(e) or "solver:" in str(e), str(e)
        return
    hist = run.run()

    def brute_primal(w):
        H = []
        for i in range(data.n):
            Y = SOLVER_STRUCTURES[name].enumerate(model, data, i)
            idx, one = torch.full((len(Y),), i), torch.tensor([i])
            best = float((model.phi(data, idx, Y) @ w + model.loss(data, idx, Y)).max())
            H.append(best - float(model.phi(data, one, model.gt_batch(data, one)) @ w))
        return lam / 2 * float(w @ w) + float(np.mean(H))
    last = hist[-1]
    assert last["primal"] == pytest.approx(brute_primal(run.model_point()[0]), abs=1e-9), name
    if solver not in ("ssg", "deg"):
        w, v = store.w, store.v
        dual = store.ell - lam * float(w @ v) + lam / 2 * float(w @ w)
        assert last.get("gap_last", last["gap"]) == pytest.approx(brute_primal(w) - dual, abs=1e-9), name
        assert last["gap"] >= -1e-12
    if solver in ("fw", "eg", "deg"):             # the blocks are the dual point (the cutting plane's is its own)
        for i in range(data.n):
            assert block_is_a_dual_point(store, model, data, i, lam, SOLVER_STRUCTURES[name].enumerate), \
                f"{name}: block {i} after {solver} is no convex combination of its corners"


BCFW_RUNS = {"pairwise-cache": dict(step="pairwise", cache=True), "away": dict(step="away"),
             "minibatch": dict(batch_size=3), "averaging": dict(averaging=True)}


@pytest.mark.parametrize("name", list(SOLVER_STRUCTURES))
@pytest.mark.parametrize("run", list(BCFW_RUNS))
def test_conformance_bcfw_variants_keep_every_block_a_dual_point(name, run):
    """BCFW's step rules, mini-batches and averaging on every store (the edge-feature chain's too): each block
    (w_i, ell_i) stays a convex combination of its corners (the gaps against brute force: the tests above)."""
    rng = np.random.default_rng(13)
    model, data, nonneg = SOLVER_STRUCTURES[name].make(rng)
    lam = 0.1
    store = make_store(model, data, lam, nonnegative=nonneg)
    if run == "averaging" and not store.supports_averaging:
        return
    Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=6, gap_check=2, seed=2, **BCFW_RUNS[run])).run()
    for i in range(data.n):
        assert block_is_a_dual_point(store, model, data, i, lam, SOLVER_STRUCTURES[name].enumerate), \
            f"{name}: block {i} after {run} is no convex combination of its corners"


def block_is_a_dual_point(store, model, data, i, lam, enumerate_):
    """Whether (w_i, ell_i) of block i is a convex combination of its corners (psi_i(y) / (lam n), L_i(y) / n) over
    every labeling y: what makes -lam/2 |w|^2 + ell a value of the dual (3). Non-negative least squares with the
    sum-to-one row weighted up, a residual at rounding level (an LP solver's feasibility tolerances misread points
    whose weights are 1e-5 apart: it refused a Gibbs point that NNLS fits to 1e-13)."""
    from scipy.optimize import nnls
    Y = enumerate_(model, data, i)
    idx, one = torch.full((len(Y),), i), torch.tensor([i])
    psi = (model.phi(data, one, model.gt_batch(data, one)) - model.phi(data, idx, Y)) / (lam * data.n)
    loss = model.loss(data, idx, Y).double() / data.n
    A = torch.cat([psi.T, loss[None], 1e3 * torch.ones(1, len(Y), dtype=torch.float64)]).numpy()
    b = torch.cat([store.block_w(i).cpu(), store.ell_i[i:i + 1].cpu(), 1e3 * torch.ones(1, dtype=torch.float64)])
    _, residual = nnls(A, b.numpy(), maxiter=50 * len(Y))
    return residual <= 1e-9 * (1.0 + float(b.abs().max()))


def test_conformance_registry_covers_every_structure():
    kinds = {type(STRUCTURES[n].make(np.random.default_rng(0))[0]) for n in STRUCTURES}
    assert kinds == {ChainModel, ConstituencyModel, DependencyModel, ExplicitModel, GraphCRFModel, GraphCutModel,
                     MatchingModel, MulticlassModel, MultiLabelModel, SemiMarkovModel, SiblingDependencyModel, TreePoseModel}
