"""The CPU guard of the device path (issue: device-true paths).

Every dataset's store runs the pure-torch kernels (``kernels="torch"``, the code CUDA runs) under
:func:`ssvm_torch.devices.host_guard`, which makes ``Tensor.numpy()``, ``np.asarray(tensor)``,
``torch.from_numpy`` and tensor factories without ``device=`` raise. Those are exactly the calls
that fail on a GPU (``can't convert cuda:0 device type tensor to numpy``, ``indices should be either
on cpu or on the same device``), so a CPU machine without a GPU catches them. Tiny subsets keep the
whole file to seconds.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssvm_torch import Solver, SolverConfig, make_store
from ssvm_torch.devices import HostCopyError, from_host, host_guard, to_host
from ssvm_torch.path import regularization_path
from ssvm_torch.tasks import TASKS, load_task

SIZES = {"ocr-small": 12, "ocr-large": 12, "conll2000": 8, "scene": 16, "ocr-letters": 16,
         "segmentation-synth": 5, "pose-synth": 4, "hansards": 6, "ud-ewt": 6, "conll2000-segments": 8,
         "ud-ewt-spans": 6, "scene-graph": 8, "ocr-graph": 8}

CONFIGS = {
    "bcfw-gap": dict(solver="bcfw", sampling="gap"),
    "pairwise-cache": dict(solver="bcfw", sampling="perm", step="pairwise", cache=True),
    "away": dict(solver="bcfw", sampling="uniform", step="away"),
    "best-cache": dict(solver="bcfw", sampling="gap", step="best", cache=True),
    "fw": dict(solver="fw"),
    "ssg": dict(solver="ssg", sampling="perm"),
    "bcfw-averaging": dict(solver="bcfw", sampling="perm", averaging=True),
    "minibatch": dict(solver="bcfw", sampling="gap", batch_size=3),
}


@pytest.fixture(scope="module")
def problems():
    cache = {}

    def get(name):
        if name not in cache:
            task = TASKS[name]
            cache[name] = load_task(name, train_size=SIZES[name] if task.train_size else None)
        return cache[name]
    return get


def tiny_store(problem, name):
    sub = problem.train.subset(range(min(SIZES[name], problem.n_train)))
    return make_store(problem.model, sub, 0.1, kernels="torch", nonnegative=problem.nonnegative)


@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_torch_path_never_leaves_the_device(problems, name, config):
    problem = problems(name)
    store = tiny_store(problem, name)
    opts = dict(CONFIGS[config])
    if opts.get("averaging") and not store.supports_averaging:
        pytest.skip("averaging is refused with box constraints")
    cfg = SolverConfig(passes=2.0, gap_check=1.0, seed=3, **opts)
    with host_guard() as guard:
        hist = Solver(store, cfg).run()
        store.recompute()
        if store.supports_path:
            store.max_margins(store.w)
            store.block_wdots()
    assert len(hist) >= 2 and hist[-1]["passes"] >= 2.0
    if cfg.solver != "ssg":
        assert np.isfinite(hist[-1]["gap"]) and hist[-1]["gap"] >= -1e-9
    # CPU-library oracles (graph cut, assignment) copy once per batch: a handful of copies per
    # gap pass and per block step, never one per node or edge
    steps = hist[-1]["passes"] * store.n + len(hist)
    assert guard.host_copies <= 8 * steps


def test_minibatch_of_every_block_never_leaves_the_device(problems):
    """tau = n takes batch FW's primitives (MiniBatchStep.full_step) on the torch path too."""
    store = tiny_store(problems("ocr-small"), "ocr-small")
    with host_guard():
        hist = Solver(store, SolverConfig(batch_size=store.n, passes=3.0, gap_check=1.0, averaging=True)).run()
    assert hist[-1]["steps"] == 2 and hist[-1]["gap"] >= 0 and hist[-1]["dual"] > hist[0]["dual"]


@pytest.mark.parametrize("heuristic", [False, True])
def test_regularization_path_never_leaves_the_device(problems, heuristic):
    problem = problems("ocr-small")
    store = make_store(problem.model, problem.train.subset(range(8)), 1.0, kernels="torch")
    with host_guard():
        path = regularization_path(store, 0.2, kappa=0.7, heuristic=heuristic, lam_min=0.05)
    assert len(path.lambdas) >= 2 and float(path.lambdas[-1]) < float(path.lambdas[0])


def test_every_registered_task_is_guarded():
    assert set(SIZES) == set(TASKS), "add the new dataset to SIZES (a tiny subset size)"


def test_model_prediction_and_metrics_stay_on_device(problems):
    for name in SIZES:
        problem = problems(name)
        sub = problem.test.subset(range(4)) if hasattr(problem.test, "subset") else problem.test
        model = problem.model.with_kernels("torch")
        w = torch.zeros(model.d, dtype=torch.float64)
        with host_guard():
            model.metrics(w, sub)


def test_the_guard_catches_what_fails_on_cuda():
    t = torch.arange(3, device="cpu")
    with host_guard() as guard:
        with pytest.raises(HostCopyError, match="numpy"):
            t.numpy()
        with pytest.raises(HostCopyError, match="asarray"):
            np.asarray(t)
        with pytest.raises(HostCopyError, match="device="):
            t[torch.tensor([0, 1])]                    # a CPU index into what would be a CUDA tensor
        with pytest.raises(HostCopyError, match="from_numpy"):
            torch.from_numpy(np.zeros(2))
        assert to_host(t).tolist() == [0, 1, 2]
        assert from_host(np.ones(2), "cpu").sum() == 2
        assert torch.as_tensor(t) is t                 # re-wrapping a tensor stays where it is
    assert guard.host_copies == 2
    assert t.numpy().tolist() == [0, 1, 2]             # restored on exit


@pytest.mark.parametrize("name", list(SIZES))
def test_cutting_plane_and_deg_torch_paths_never_leave_the_device(problems, name):
    """The cutting plane on every store (its QP runs on the host through to_host / from_host) and
    DEG on matchings (the projection QP likewise). DEG and EG on chains go through torch-struct on
    this path, whose internals create tensors without ``device=`` (tests/test_nn.py pins it), so
    the guard cannot cover them."""
    from ssvm_torch.solvers import make_solver
    from ssvm_torch.stores.optional_moves import JointConstraints
    problem = problems(name)
    store = tiny_store(problem, name)
    if not store.supports_dual_point:
        pytest.skip("no batch corner: the cutting plane refuses this store")
    with host_guard() as guard:
        hist = make_solver(store, SolverConfig(solver="cutting-plane", passes=3, gap_check=1)).run()
    assert guard.host_copies > 0 and hist[-1]["gap"] >= 0
    if isinstance(store, JointConstraints):              # chains: the working set as joint labelings too
        compact = tiny_store(problem, name)
        with host_guard():
            hist = make_solver(compact, SolverConfig(solver="cutting-plane", passes=3, gap_check=1,
                                                     working_set="labelings")).run()
        assert hist[-1]["gap"] >= 0
    if name == "hansards":
        deg_store = tiny_store(problem, name)
        with host_guard():
            hist = make_solver(deg_store, SolverConfig(solver="deg", passes=4, gap_check=2)).run()
        assert hist[-1]["geometry"] == "euclidean" and 0 <= hist[-1]["gap"] < hist[0]["gap"]


def test_direction_shares_never_leave_the_device(problems):
    """The distributed gather exchange's coordinate shares (BlockDual.direction_share / joined_shares)
    on the torch path: built and joined under the guard, equal to the whole sparse direction."""
    store = tiny_store(problems("conll2000"), "conll2000")
    store.sparse_direction = True
    assert store.shares_direction
    with host_guard():
        parts = store.batch_corners(torch.arange(4, device=store.device), with_direction=False).parts
        whole = store.direction(parts)
        shares = [store.direction_share(parts, (r, 3)) for r in range(3)]
        joined = store.joined_shares(torch.cat([c for c, _ in shares]), torch.cat([v for _, v in shares]))
    assert torch.equal(joined.indices(), whole.indices()) and torch.equal(joined.values(), whole.values())


def test_semimarkov_sparse_direction_and_partial_states_never_leave_the_device(problems):
    """The semi-Markov store's torch path with its mini-batch direction as touched coordinates, and on a
    completion of partially observed states (the loss counted at the observed positions; the completion itself,
    SemiMarkovModel.complete, under the guard too), and the cutting plane's joint products and point."""
    from ssvm_torch.latent import hide_labels, with_labels
    problem = problems("conll2000-segments")
    store = tiny_store(problem, "conll2000-segments")
    store.sparse_direction = True
    with host_guard():
        hist = Solver(store, SolverConfig(batch_size=3, passes=2.0, gap_check=1.0, seed=1)).run()
    assert hist[-1]["gap"] >= -1e-9 and hist[-1]["dual"] > hist[0]["dual"]
    part = hide_labels(store.data, 0.5, 0)
    with host_guard():
        done = with_labels(part, store.model.complete(store.w, part))
    partial = make_store(store.model, done, 0.1, kernels="torch")
    with host_guard():
        hist = Solver(partial, SolverConfig(step="pairwise", cache=True, passes=2.0, gap_check=1.0, seed=1)).run()
    assert partial.data.partial and np.isfinite(hist[-1]["gap"]) and hist[-1]["gap"] >= -1e-9
    # the cutting plane's joint constraints as segmentations on the torch path (their products and point)
    with host_guard():
        labels = [store.joint_labels(store.gap_pass())]
        dots, point = store.joint_dots(store.w, labels), store.joint_point([0.5], labels)
    assert dots.shape == (1,) and point.shape == store.w.shape and bool(torch.isfinite(point).all())


@pytest.mark.parametrize("name", list(SIZES))
def test_the_perceptron_never_leaves_the_device(problems, name):
    """ssvm_torch/perceptron.py on every task's model through its torch decoders (plain and loss-augmented,
    mini-batched): every tensor it makes is on the data's device."""
    from ssvm_torch.perceptron import PerceptronConfig, train_perceptron
    problem = problems(name)
    sub = problem.train.subset(range(min(SIZES[name], problem.n_train)))
    model = problem.model.with_kernels("torch")
    for cfg in (PerceptronConfig(epochs=2), PerceptronConfig(epochs=1, batch_size=3, loss_augmented=True)):
        with host_guard():
            run = train_perceptron(model, sub, cfg, nonnegative=problem.nonnegative)
        assert len(run.history) >= 1 and bool(torch.isfinite(run.w).all())


@pytest.mark.parametrize("name", sorted(__import__("test_conformance").STRUCTURES))
def test_every_structures_model_interface_stays_on_the_device(name):
    """The model interface of every structure of the conformance suite (also those no task registers: second-order
    trees, loopy graphs by branch and bound, explicit tables), through its torch decoders: prediction, the
    loss-augmented oracle, psi, the loss, the metrics and a perceptron epoch make no CPU tensor; with half the
    labels hidden (the structures that can hide them), the latent completion and the oracle neither."""
    from test_conformance import STRUCTURES, instance, partially_observed
    from test_store_properties import HIDEABLE
    from ssvm_torch.perceptron import PerceptronConfig, train_perceptron
    model, data, nonneg, w = instance(name, seed=1)
    model = model.with_kernels("torch")
    idx = torch.arange(data.n)
    with host_guard():
        model.predict(w, data, idx)
        labels, H = model.oracle(w, data, idx)
        model.psi(data, idx, labels)
        model.loss(data, idx, labels)
        model.metrics(w, data)
        train_perceptron(model, data, PerceptronConfig(epochs=1), w0=w, nonnegative=nonneg)
    assert bool(torch.isfinite(H).all())
    if name in HIDEABLE:
        rng = np.random.default_rng(2)
        model, data, _ = partially_observed(STRUCTURES[name].make)(rng)
        model, w, idx = model.with_kernels("torch"), torch.tensor(rng.normal(size=model.d)), torch.arange(data.n)
        assert data.partial
        with host_guard():
            model.complete(w, data)
            model.loss(data, idx, model.oracle(w, data, idx)[0])


def test_the_segment_span_and_edge_potential_layers_stay_on_the_device():
    """SemiMarkovChain, ConstituencyTree (plain and labeled) and the edge-potential chain through their torch
    paths: the three losses with backward, n-best and MBR decoding, log Z, marginals, entropy, KL, cross-entropy
    and samples make no CPU tensor (their own device tests need a GPU)."""
    from ssvm_torch.chain import edge_chain
    from ssvm_torch.nn import ConstituencyTree, SemiMarkovChain
    g = torch.Generator().manual_seed(0)
    B, T, L, K, N = 3, 6, 3, 4, 5
    S, S2 = (torch.randn(B, T, L, K, dtype=torch.float64, generator=g) for _ in range(2))
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 4:], mask[2, 1:] = False, False
    spans, spans2 = (torch.randn(B, N + 1, N + 1, dtype=torch.float64, generator=g) for _ in range(2))
    labels = torch.randn(B, N + 1, N + 1, 3, dtype=torch.float64, generator=g)
    lengths = torch.tensor([5, 3, 1])
    edges, edges2 = (torch.randn(B, N - 1, K, K, dtype=torch.float64, generator=g) for _ in range(2))
    tags = torch.randint(0, K, (B, N), generator=g)
    for loss in ("hinge", "crf", "softmax_margin"):
        seg, tree = SemiMarkovChain(K, L, loss=loss, kernels="torch", length_scores=True), \
            ConstituencyTree(loss=loss, kernels="torch")
        gold, chart, labeled = seg.decode(S, mask), tree.decode(spans, lengths=lengths), \
            tree.decode(spans, lengths=lengths, label_scores=labels)
        with host_guard():
            seg(S.clone().requires_grad_(True), gold, mask).backward()
            tree(spans.clone().requires_grad_(True), chart, lengths=lengths).backward()
            tree(spans, labeled, lengths=lengths, label_scores=labels)
            getattr(edge_chain, "crf_nll" if loss == "crf" else loss)(
                edges.clone().requires_grad_(True), tags, lengths, "torch").sum().backward()
    seg, tree = SemiMarkovChain(K, L, kernels="torch"), ConstituencyTree(kernels="torch")
    with host_guard():
        for layer, x, y, kw in ((seg, S, S2, {"mask": mask}), (tree, spans, spans2, {"lengths": lengths})):
            layer.decode(x, nbest=2, **kw)
            layer.decode(x, mbr=True, **kw)
            layer.log_partition(x, **kw)
            layer.marginals(x, **kw)
            layer.entropy(x, **kw)
            layer.kl(x, y, **kw)
            layer.cross_entropy(x, y, **kw)
            layer.sample(x, **kw)
        edge_chain.nbest(edges, lengths, 3, "torch")
        edge_chain.mbr_decode(edges, lengths, kernels="torch")
        edge_chain.position_marginals(edges, lengths, "torch")
        edge_chain.kl(edges, edges2, lengths)
        edge_chain.entropy(edges.clone().requires_grad_(True), lengths).sum().backward()
        samples = edge_chain.sample(edges, lengths, 4, generator=torch.Generator().manual_seed(1))
    assert samples.shape[-1] == N
