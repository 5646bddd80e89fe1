"""The linear semi-Markov SSVM (models/semimarkov.py, stores/segments.py, the conll2000-segments task): the
compact store against the dense one (an independent implementation of the same dual through phi), the feature
map against the segment package's scores, refusals, the CoNLL-2000 reading and a short real run. The
conformance suite (tests/test_conformance.py) checks decode, oracle, gaps and checkpoints against enumeration."""
from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from conftest import random_segment_data
from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.data import ChainData
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.models import SemiMarkovModel
from ssvm_torch.segments.scoring import score
from ssvm_torch.stores import DenseDual, SegmentDual


def instance(seed=0, outside=None, n=6):
    rng = np.random.default_rng(seed)
    data = random_segment_data(rng, n, 3, 3, 4, tmin=1, tmax=6, outside=outside, sparse=True)
    return SemiMarkovModel.for_data(data, max_length=3, outside=outside), data


def test_phi_is_the_segment_packages_score():
    """<w, phi(x, y)> = s(y) of segments/scoring.py on the model's segment scores, for gold and random rows."""
    model, data = instance(1)
    w = torch.tensor(np.random.default_rng(2).normal(size=model.d))
    idx = torch.arange(data.n)
    S, lengths, first, last, trans = model.scores(w, data, idx)
    for labels in (model.gt_batch(data, idx), model.predict(w, data, idx)):
        assert torch.allclose(model.phi(data, idx, labels) @ w, score(S, first, last, trans, labels, lengths),
                              atol=1e-10)


@pytest.mark.parametrize("kernels", ["numba", "torch"])
@pytest.mark.parametrize("config", [dict(step="fw"), dict(step="pairwise", cache=True), dict(step="away"),
                                    dict(batch_size=3), dict(step="fw", averaging=True)],
                         ids=["fw", "pairwise-cache", "away", "minibatch", "averaging"])
def test_compact_store_follows_the_dense_store(config, kernels):
    """The same solver on the compact statistics store (its compiled block step or its torch path) and on the
    dense (n, d) store (w_i rows through phi): the same trajectory to 1e-10 (gaps, duals, w)."""
    model, data = instance(3, outside=0)
    runs = []
    compact = SegmentDual(model, data, 1.0, kernels=kernels)
    assert compact.kernels == kernels
    for store in (compact, DenseDual(model, data, 1.0)):
        hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=8, gap_check=2, seed=5,
                                          **config)).run()
        runs.append((hist, store))
    (ha, a), (hb, b) = runs
    assert len(ha) == len(hb) >= 4
    for ra, rb in zip(ha, hb):
        assert ra["gap"] == pytest.approx(rb["gap"], abs=1e-10) and ra["dual"] == pytest.approx(rb["dual"], abs=1e-10)
    assert torch.allclose(a.w, b.w, atol=1e-10) and ha[-1]["gap"] < 0.5 * ha[0]["gap"]
    for i in range(data.n):
        assert torch.allclose(a.block_w(i), b.block_w(i), atol=1e-10)
    assert torch.allclose(a.block_wdots(), b.block_wdots(), atol=1e-10)
    assert torch.allclose(a.max_margins(a.w), b.max_margins(a.w), atol=1e-10)


def test_compiled_gap_pass_is_the_torch_pass_on_any_thread_count():
    """The compiled gap pass (blocks in strided parts over threads) gives every block's labels, loss, gap and H
    of the torch pass, and bit for bit the same figures on one thread as on several."""
    model, data = instance(7, outside=1, n=40)
    compiled = SegmentDual(model, data, 0.1, kernels="numba")
    Solver(compiled, SolverConfig(solver="bcfw", passes=2, gap_check=2, seed=1)).run()
    torch_path = SegmentDual(model, data, 0.1, kernels="torch")
    torch_path.load_state_dict(compiled.state_dict())
    before = numba.get_num_threads()
    passes = []
    try:
        for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(threads)
            passes.append(compiled.gap_pass())
    finally:
        numba.set_num_threads(before)
    reference = torch_path.gap_pass()
    for gp in passes:
        assert torch.equal(gp.labels, passes[0].labels) and torch.equal(gp.block_gaps, passes[0].block_gaps)
        assert torch.equal(gp.H, passes[0].H) and torch.equal(gp.loss, passes[0].loss)
        assert torch.equal(gp.labels, reference.labels)
        for field in ("loss", "H", "block_gaps"):
            assert torch.allclose(getattr(gp, field), getattr(reference, field), atol=1e-10), field
    assert float(passes[0].block_gaps.sum()) > 1e-6          # a point off the optimum: the gaps are not all zero


def test_compiled_pair_terms_are_the_torch_paths():
    """The compiled active-set terms (gaps towards stored corners, ||A_i (s(P) - s(Q))||^2 with P or Q a
    segmentation or the block's point, the pairwise / away moves) equal the torch path's at a moved point."""
    model, data = instance(8, outside=0, n=12)
    stores = {k: SegmentDual(model, data, 0.1, kernels=k) for k in ("numba", "torch")}
    Solver(stores["numba"], SolverConfig(solver="bcfw", step="pairwise", passes=3, gap_check=3, seed=2)).run()
    stores["torch"].load_state_dict(stores["numba"].state_dict())
    rng = np.random.default_rng(9)
    w = torch.tensor(rng.normal(size=model.d))
    for i in range(data.n):
        idx = torch.tensor([i])
        corners = [model.gt(data, i)] + [model.predict(w * s, data, idx)[0, :int(data.lengths[i])] for s in (1, -1)]
        gaps = {k: st.corner_gaps(i, corners) for k, st in stores.items()}
        np.testing.assert_allclose(gaps["numba"], gaps["torch"], atol=1e-12)
        for P, Q in ((corners[1], corners[2]), (None, corners[1]), (corners[2], None)):
            sq = {k: st.pair_sqnorm(i, P, Q) for k, st in stores.items()}
            assert sq["numba"] == pytest.approx(sq["torch"], rel=1e-12, abs=1e-14)
            for st in stores.values():
                st.pair_move(i, P, Q, 0.01, 0.02, 0.1)
            assert torch.allclose(stores["numba"].w, stores["torch"].w, atol=1e-12)
            assert torch.allclose(stores["numba"].P, stores["torch"].P, atol=1e-12)
            assert torch.allclose(stores["numba"].Gc, stores["torch"].Gc, atol=1e-12)
    assert stores["numba"].ell == pytest.approx(stores["torch"].ell)


def partial_instance(seed, fraction=0.4, n=8):
    """A random instance with ``fraction`` of its states hidden (placeholders 0), and its completion at a random
    w (the store's data: the observed states kept, the others the model's best agreeing with them)."""
    from ssvm_torch.latent import hide_labels, with_labels
    model, data = instance(seed, outside=0, n=n)
    part = hide_labels(data, fraction, seed)
    w = torch.tensor(np.random.default_rng(seed + 100).normal(size=model.d))
    return model, part, with_labels(part, model.complete(w, part)), w


def test_completion_is_the_best_segmentation_agreeing_with_the_observed_states():
    """complete() (the latent SSVM's step 1) against enumeration: the best-scoring segmentation among those whose
    states equal the observed ones; observed states kept, the result a segmentation of segments <= L."""
    from conftest import all_segmentations
    from ssvm_torch.segments.convert import segment_states
    model, part, done, w = partial_instance(4)
    assert part.partial and torch.equal(done.Y[part.observed], part.Y[part.observed])
    model.check_segmentation(done)
    S, lengths, first, last, trans = model.scores(w, part, torch.arange(part.n))
    for i in range(part.n):
        s, e = int(part.offsets[i]), int(part.offsets[i + 1])
        T, obs = e - s, part.observed[s:e]
        best, arg = -np.inf, None
        for seg in all_segmentations(T, model.K, model.L, model.outside):
            seg = torch.tensor([seg])
            states = segment_states(seg, torch.tensor([T]), model.K)[0]
            if not torch.equal(states[obs], part.Y[s:e][obs]):
                continue
            v = float(score(S[i:i + 1, :T], first, last, trans, seg, torch.tensor([T]))[0])
            if v > best + 1e-12:
                best, arg = v, states
        assert torch.equal(done.Y[s:e], arg), i


@pytest.mark.parametrize("kernels", ["numba", "torch"])
@pytest.mark.parametrize("config", [dict(step="fw"), dict(step="pairwise", cache=True)], ids=["fw", "pairwise-cache"])
def test_partial_store_follows_the_dense_store(config, kernels):
    """On a completion with hidden states (the loss counts the observed positions only): the compact store's
    trajectory = the dense store's (through the model's masked loss and oracle) to 1e-10, and a partially observed
    row whose states are not a segmentation is refused by the store."""
    model, part, done, _ = partial_instance(5)
    runs = []
    for store in (SegmentDual(model, done, 0.5, kernels=kernels), DenseDual(model, done, 0.5)):
        hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=6, gap_check=2, seed=3,
                                          **config)).run()
        runs.append((hist, store))
    (ha, a), (hb, b) = runs
    for ra, rb in zip(ha, hb):
        assert ra["gap"] == pytest.approx(rb["gap"], abs=1e-10) and ra["dual"] == pytest.approx(rb["dual"], abs=1e-10)
    assert torch.allclose(a.w, b.w, atol=1e-10) and ha[-1]["gap"] < ha[0]["gap"]
    full = SegmentDual(model, ChainData(done.X, done.Y, done.offsets, done.n_states), 0.5, kernels=kernels)
    Solver(full, SolverConfig(solver="bcfw", sampling="gap", passes=6, gap_check=2, seed=3, **config)).run()
    assert not torch.allclose(full.w, a.w, atol=1e-6)             # the hidden positions' loss is not counted
    with pytest.raises(SSVMInputError, match="must be a completion"):
        hidden_inside = torch.where(part.observed, done.Y, torch.full_like(done.Y, 2 * model.K - 1))   # not a segmentation
        SegmentDual(model, ChainData(done.X, hidden_inside, done.offsets, done.n_states, observed=part.observed), 0.5)


def test_sparse_minibatch_direction_is_the_dense_one():
    """Mini-batch BCFW with the direction as touched coordinates (what d >= 2^20 uses: CoNLL) takes the steps of
    the dense direction: the same gaps and w to 1e-12."""
    model, data = instance(9, outside=0, n=12)
    runs = []
    for sparse in (False, True):
        store = SegmentDual(model, data, 0.1)
        store.sparse_direction = sparse
        corners = store.batch_corners(torch.arange(4))
        assert corners.dw.is_sparse == sparse
        hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", batch_size=4, passes=6, gap_check=2,
                                          seed=1)).run()
        runs.append((hist, store))
    (ha, a), (hb, b) = runs
    assert [r["gap"] for r in ha] == pytest.approx([r["gap"] for r in hb], abs=1e-12)
    assert torch.allclose(a.w, b.w, atol=1e-12) and ha[-1]["gap"] < ha[0]["gap"]


def test_batch_fw_and_path_rescaling_match_the_dense_store():
    model, data = instance(4)
    stores = [SegmentDual(model, data, 0.1), DenseDual(model, data, 0.1)]
    hists = [Solver(s, SolverConfig(solver="fw", passes=5, gap_check=1, seed=0)).run() for s in stores]
    assert [r["gap"] for r in hists[0]] == pytest.approx([r["gap"] for r in hists[1]], abs=1e-10)
    for s in stores:
        s.rescale(0.05, 0.7)
    assert torch.allclose(stores[0].w, stores[1].w, atol=1e-10) and stores[0].ell == pytest.approx(stores[1].ell)


@pytest.mark.long
@pytest.mark.parametrize("kernels", ["numba", "torch"])
@pytest.mark.parametrize("partial", [False, True], ids=["full", "partial"])
def test_cutting_plane_on_segmentations_is_the_dense_stores_run(partial, kernels):
    """The 1-slack cutting plane with its constraints kept as joint segmentations (stores/segment_joint.py: the
    compiled scores and statistics, or the torch path's) runs as on the dense (n, d) store's dense constraint rows
    (an independent phi): the same records to 1e-9, w to 1e-9, the gap falling below 1e-6 of the first; the
    labelings' products and point equal the dense rows'."""
    from ssvm_torch.solvers import make_solver
    from ssvm_torch.solvers.working_set import DenseWorkingSet, LabelingWorkingSet
    from ssvm_torch.stores.base import GapPass
    if partial:                                          # the store trains on the completion
        model, _, data, _ = partial_instance(5)
    else:
        model, data = instance(6, outside=0)
    runs = []
    for store, form in ((SegmentDual(model, data, 0.3, kernels=kernels), "labelings"),
                        (DenseDual(model, data, 0.3), "dense")):
        solver = make_solver(store, SolverConfig(solver="cutting-plane", passes=60, gap_check=5, working_set=form))
        runs.append((solver.run(), solver))
    (ha, a), (hb, b) = runs
    assert isinstance(a.ws, LabelingWorkingSet) and isinstance(b.ws, DenseWorkingSet)
    assert [r["working_set"] for r in ha] == [r["working_set"] for r in hb]
    for key in ("primal", "dual", "gap"):
        np.testing.assert_allclose([r[key] for r in ha], [r[key] for r in hb], rtol=0, atol=1e-9)
    assert torch.allclose(a.dual.w, b.dual.w, atol=1e-9) and ha[-1]["gap"] < 1e-6 * ha[0]["gap"]
    store, dense = a.dual, DenseWorkingSet(a.dual)
    for y in a.ws.labels:                                  # the compact constraints as dense rows of this store
        gp = GapPass(labels=y.long(), loss=torch.zeros(data.n, dtype=torch.float64), H=None, block_gaps=None)
        dense.append(store.corner_point(gp)[0], gp)
    w = torch.tensor(np.random.default_rng(0).normal(size=model.d))
    np.testing.assert_allclose(a.ws.lam_dots(w), dense.lam_dots(w), rtol=1e-12, atol=1e-12)
    alpha = np.linspace(0.1, 0.3, len(a.ws.labels)) / len(a.ws.labels)
    torch.testing.assert_close(a.ws.point(alpha), dense.point(alpha), rtol=0, atol=1e-12)


def test_the_outside_label_covers_one_position():
    model, data = instance(5, outside=0)
    w = torch.tensor(np.random.default_rng(6).normal(size=model.d))
    model.split(w)[4][1:] = 50.0                                   # long segments of every label, label 0 too
    idx = torch.arange(data.n)
    pred = model.predict(w, data, idx)
    from ssvm_torch.segments import segment_lengths
    seglen = segment_lengths(pred, data.lengths)
    assert bool(((pred == 0) <= (seglen <= 1)).all()) and int(seglen.max()) > 1


def test_bad_segment_data_are_refused_by_name():
    model, data = instance(7)
    Y = data.Y.clone()
    Y[int(data.offsets[1])] = model.K                               # a row that starts by going on a segment
    with pytest.raises(SSVMInputError, match=r"data.Y: sequence 1, position 0: state 3 goes on"):
        model.check_data(ChainData(data.X, Y, data.offsets, data.n_states))
    X = data.X.to_dense()
    long = ChainData(X[:5], torch.tensor([1, 4, 4, 4, 4]), torch.tensor([0, 5]), 6)
    with pytest.raises(SSVMInputError, match="covers 5 positions, more than the model's 3"):
        model.check_data(long)
    with pytest.raises(SSVMInputError, match=r"max_length: expected at least the longest gold segment, 5 positions "
                       r"\(sequence 0, from position 0\), got 3"):
        SemiMarkovModel.for_data(long, max_length=3)
    assert SemiMarkovModel.for_data(long, max_length=5).L == 5 == SemiMarkovModel.for_data(long).L
    with pytest.raises(SSVMInputError, match="n_states: expected 6"):
        model.check_data(ChainData(data.X, data.Y % 4, data.offsets, 4))
    with pytest.raises(SSVMInputError, match="an even number"):
        SemiMarkovModel.for_data(ChainData(data.X, data.Y % 5, data.offsets, 5))
    outside = SemiMarkovModel(model.n_features, 3, 3, outside=1)
    with pytest.raises(SSVMInputError, match="more than the model's 1 for label 1"):
        outside.check_data(ChainData(X[:2], torch.tensor([1, 4]), torch.tensor([0, 2]), 6))
    with pytest.raises(SSVMInputError, match="more than the model's 1 for label 1"):    # not max_length's fault
        SemiMarkovModel.for_data(ChainData(X[:2], torch.tensor([1, 4]), torch.tensor([0, 2]), 6), max_length=1,
                                 outside=1)


def test_chunk_segments_read_conll_as_conlleval_chunks():
    """Every sentence of CoNLL-2000's test file: segments -> BIO tags gives the file's tags back."""
    from ssvm_torch.data.conll import load_conll2000
    from ssvm_torch.data.segments import chunk_segments
    from ssvm_torch.segments import tags_from_segments
    train, test = load_conll2000(train_size=300, features="w[0]")
    seg_train = chunk_segments(train)
    labels = seg_train.meta["segment_labels"]
    assert labels[0] == "O" and "NP" in labels and seg_train.n_states == 2 * len(labels)
    seg_test = chunk_segments(test, labels)
    model = SemiMarkovModel.for_data(seg_train, outside=0)
    model.check_data(seg_train)
    idx = torch.arange(seg_test.n)
    tags = tags_from_segments(model.gt_batch(seg_test, idx), seg_test.lengths, labels)
    known = set(labels)
    expected = [[t if t == "O" or t[2:] in known else "O" for t in s] for s in test.meta["tags"]]
    assert tags == expected
    with pytest.raises(SSVMInputError, match="chunk type 'NP' is not among"):
        chunk_segments(train, ["O", "VP"])
    from ssvm_torch.tasks import load_task
    with pytest.raises(SSVMInputError, match="data.E: expected no edge-observation attributes"):
        load_task("conll2000-segments", train_size=50, features="w[0] edge:p[0]")


def test_conll_segments_task_trains_and_scores_chunk_f1():
    """A short real run: BCFW + gap sampling on 300 CoNLL-2000 sentences; the gap falls, the test F1 is seqeval's
    F1 of the decoded segments written as BIO tags, and the model's own segment F1 agrees with it."""
    from ssvm_torch.tasks import load_task
    from ssvm_torch.segments import tags_from_segments
    from seqeval.metrics import f1_score
    p = load_task("conll2000-segments", train_size=300, features="w[0] p[0]")
    store = make_store(p.model, p.train, p.lam())
    hist = Solver(store, SolverConfig(solver="bcfw", sampling="gap", passes=4, gap_check=2, seed=0)).run()
    assert hist[-1]["gap"] < 0.2 * hist[0]["gap"]
    rec = p.evaluate(store.w)
    idx = torch.arange(p.test.n)
    pred = p.model.predict(store.w, p.test, idx)
    tags = tags_from_segments(pred, p.test.lengths, p.train.meta["segment_labels"])
    assert rec["test_f1"] == pytest.approx(100 * f1_score(p.test.meta["tags"], tags), abs=1e-9)
    assert rec["test_f1"] > 60
    gold = p.model.gt_batch(p.test, idx)
    assert p.model.segment_counts(pred, gold, p.test.lengths)["segment_f1"] == pytest.approx(rec["test_f1"], abs=0.5)
