"""Property tests of every store and of the latent completion on instances drawn by hypothesis, beside the
fixed-seed conformance suite (tests/test_conformance.py, whose tiny-instance generators and enumerators they use).

* Every solver and BCFW variant (steps, cache, mini-batches, averaging) on every structure's store, fully labeled or
  with part of its labels hidden and completed (the latent SSVM's inner problem; the conformance suite runs the
  partial chains and segmentations only), lambda from 1e-4 to 100: each record finite with a gap >= 0, the model
  point's primal the objective (1) by enumeration, the last gap that primal minus the store's dual, and after FW,
  BCFW and EG every block a convex combination of its corners.
* CCCP (``train_latent``) on every hideable structure with labels or whole sentences hidden, four inner solvers and
  both starts: its objective never increases and its last value is the latent objective J(w) of the returned w by
  enumeration, lam/2 |w|^2 + 1/n sum_i [max_y s_i(y) + Delta_i(y) - max_{h keeps the observed parts} s_i(h)].
* ``model.complete(w, partial data)``: the completion keeps every observed part (its loss on the partial data is 0)
  and scores as the best labeling that does, by enumeration; hidden fractions 0 to 0.99, single parts or whole
  sentences, w Gaussian, in {-1, 0, 1} (ties everywhere) or 0.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from test_conformance import SOLVER_STRUCTURES, STRUCTURES, Structure, block_is_a_dual_point, partially_observed
from ssvm_torch import SolverConfig, make_store
from ssvm_torch.data import ChainData, GraphData
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.latent import hide_labels, train_latent, with_labels
from ssvm_torch.solvers.make import make_solver

#: structures whose data can hide labels (chains, segmentations, trees, constituency trees, graphs)
HIDEABLE = [name for name in STRUCTURES
            if name not in ("multiclass", "multilabel", "graphcut", "pose", "matching", "explicit")]
#: every store of the solver matrix, and the hideable structures with half their labels hidden
STORES = {**SOLVER_STRUCTURES, **{f"{name}-partial": Structure(partially_observed(STRUCTURES[name].make),
                                                                STRUCTURES[name].enumerate)
                                  for name in HIDEABLE if f"{name}-partial" not in SOLVER_STRUCTURES}}


def brute_primal(structure: Structure, model, data, lam: float, w: torch.Tensor) -> float:
    """Objective (1) at w with every H_i by enumeration."""
    H = []
    for i in range(data.n):
        Y = structure.enumerate(model, data, i)
        idx, one = torch.full((len(Y),), i), torch.tensor([i])
        best = float((model.phi(data, idx, Y) @ w + model.loss(data, idx, Y)).max())
        H.append(best - float(model.phi(data, one, model.gt_batch(data, one)) @ w))
    return lam / 2 * float(w @ w) + float(np.mean(H))


@st.composite
def runs(draw):
    """(structure name, instance seed, lambda, SolverConfig fields)."""
    solver = draw(st.sampled_from(["bcfw", "bcfw", "fw", "ssg", "eg", "deg", "cutting-plane"]))
    config = dict(solver=solver, sampling=draw(st.sampled_from(["uniform", "perm", "gap"])),
                  passes=draw(st.sampled_from([1, 3, 6, 12])), gap_check=draw(st.sampled_from([0.5, 1, 2])),
                  seed=draw(st.integers(0, 5)))
    if solver in ("bcfw", "ssg"):
        config["averaging"] = draw(st.booleans())
    if solver == "bcfw":
        config.update(step=draw(st.sampled_from(["fw", "pairwise", "away", "best"])), cache=draw(st.booleans()),
                      recompute_every=draw(st.sampled_from([1, 10])))
        if config["step"] == "fw" and not config["cache"] and draw(st.booleans()):
            config["batch_size"] = draw(st.integers(1, 3))    # every generator's instance has at least 3 blocks
    if solver == "cutting-plane":
        config["cache"] = draw(st.booleans())
    return (draw(st.sampled_from(sorted(STORES))), draw(st.integers(0, 2 ** 31)),
            draw(st.sampled_from([1e-4, 1e-2, 1.0, 100.0])), config)


@given(runs())
# DAQP cycled on this working set's singular Q (no point returned: the run died with a qp_solver error)
@example(("dependency-nonprojective-partial", 0, 0.1, dict(solver="cutting-plane", sampling="uniform", passes=10,
                                                           gap_check=0.5, seed=0, cache=False)))
# the second-order store dropped a pending image at a recompute and later images summed its stale slots: the dual
# fell (1.49 -> 0.58) and the gap rose to 3.4 at lam 0.98 with pairwise steps
@example(("sibling-dependency", 1, 0.98, dict(solver="bcfw", sampling="gap", passes=300, gap_check=50, seed=0,
                                              step="pairwise", cache=False, averaging=False, recompute_every=10)))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_store_and_solver_certifies_what_it_reports(run):
    name, seed, lam, config = run
    model, data, nonnegative = STORES[name].make(np.random.default_rng(seed))
    store = make_store(model, data, lam, nonnegative=nonnegative)
    try:
        solver = make_solver(store, SolverConfig(**config))
    except SSVMInputError as e:           # a solver the store cannot serve is refused by name (conformance suite)
        assert str(e).split(":")[0] in ("solver", "averaging", "step", "cache", "batch_size"), str(e)
        return
    history = solver.run()
    assert history
    for record in history:
        assert all(math.isfinite(v) for v in record.values() if isinstance(v, float)), record
        if config["solver"] != "ssg":                        # SSG keeps no dual: its records certify nothing
            assert record["gap"] >= -1e-9 * max(1.0, abs(record["primal"])), record
    last, primal = history[-1], brute_primal(STORES[name], model, data, lam, solver.model_point()[0])
    assert abs(last["primal"] - primal) <= 1e-8 * max(1.0, abs(primal)), (name, last["primal"], primal)
    if config["solver"] not in ("ssg", "deg"):            # the store holds the dual point of the last iterate
        dual = store.ell - lam * float(store.w @ store.v) + lam / 2 * float(store.w @ store.w)
        reference = brute_primal(STORES[name], model, data, lam, store.w) - dual
        assert abs(last.get("gap_last", last["gap"]) - reference) <= 1e-8 * max(1.0, abs(primal), abs(reference))
    if config["solver"] in ("fw", "bcfw", "eg"):
        for i in range(data.n):
            assert block_is_a_dual_point(store, model, data, i, lam, STORES[name].enumerate), (name, i)
        # the point the certificate reads is the blocks' sum (v = A alpha), not a drifted copy
        v = sum(store.block_w(i) for i in range(data.n))
        assert float((store.v - v).abs().max()) <= 1e-9 * max(1.0, float(v.abs().max())), name
        assert abs(store.ell - float(store.ell_i.sum())) <= 1e-9 * max(1.0, abs(store.ell)), name
    if config["solver"] == "fw" or (config["solver"] == "bcfw" and not config["averaging"]):
        duals = [r["dual"] for r in history]                  # every step is an exact line search on the dual
        assert all(b >= a - 1e-9 * max(1.0, abs(a)) for a, b in zip(duals, duals[1:])), duals


@given(st.sampled_from(HIDEABLE), st.integers(0, 2 ** 31), st.sampled_from([0.0, 0.3, 0.7, 0.99]), st.booleans(),
       st.sampled_from(["normal", "ties", "zero"]), st.integers(0, 1000))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_completion_is_the_best_labeling_that_keeps_the_observed_parts(name, seed, fraction, sentences, weights,
                                                                        hide_seed):
    rng = np.random.default_rng(seed)
    model, data, nonnegative = STRUCTURES[name].make(rng)
    part = hide_labels(data, fraction, hide_seed, sentences=sentences)
    w = {"normal": torch.tensor(rng.normal(size=model.d)), "zero": torch.zeros(model.d, dtype=torch.float64),
         "ties": torch.tensor(rng.integers(-1, 2, size=model.d), dtype=torch.float64)}[weights]
    if nonnegative is not None:
        w[nonnegative] = w[nonnegative].abs()
    done = with_labels(part, model.complete(w, part))      # trees and spans: refused if it moves an observed part
    assert keeps_observed(data, part, done), name
    for i in range(data.n):
        Y = STRUCTURES[name].enumerate(model, part, i)
        idx, one = torch.full((len(Y),), i), torch.tensor([i])
        keeps = model.loss(done, idx, Y) <= 1e-12             # the loss of partial data counts the observed parts
        best = float((model.phi(part, idx, Y) @ w)[keeps].max())
        completion = model.gt_batch(done, one)
        assert abs(float(model.phi(done, one, completion) @ w) - best) <= 1e-9 * max(1.0, abs(best)), (name, i)


def keeps_observed(data, part, done) -> bool:
    """Whether the completed data ``done`` holds the labels of ``data`` wherever ``part`` observes them (chains and
    segmentations: positions; graphs: nodes; trees and spans check it themselves on ``with_labels``)."""
    if isinstance(data, ChainData):
        seen = part.observed if part.observed is not None else torch.ones_like(data.Y, dtype=torch.bool)
        return bool((done.Y[seen] == data.Y[seen]).all())
    if isinstance(data, GraphData):
        return all(np.array_equal(d.y[p.observed], g.y[p.observed]) if p.observed is not None else
                   np.array_equal(d.y, g.y) for g, p, d in zip(data.graphs, part.graphs, done.graphs))
    return True


@given(st.sampled_from(HIDEABLE), st.integers(0, 2 ** 31), st.sampled_from([0.3, 0.7]), st.booleans(),
       st.sampled_from([1e-2, 0.1, 1.0]), st.sampled_from(["bcfw", "fw", "ssg", "cutting-plane"]),
       st.sampled_from(["auto", None]), st.integers(0, 100))
# the graph start indexed node arrays with a graph's float (empty) edge list: IndexError before 2026-12-06
@example("graph-crf", 0, 0.3, False, 0.01, "bcfw", "auto", 0)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_cccp_never_raises_its_objective_and_reports_the_enumerated_one(name, seed, fraction, sentences, lam, solver,
                                                                        start, hide_seed):
    model, data, nonnegative = STRUCTURES[name].make(np.random.default_rng(seed))
    if nonnegative is not None:                  # box constraints: CCCP refuses them (tests/test_latent.py)
        return
    part = hide_labels(data, fraction, hide_seed, sentences=sentences)
    w, records = train_latent(model, part, lam, SolverConfig(solver=solver, passes=8, gap_check=2, seed=1),
                              max_outer=3, w0=start)
    objectives = [r["objective"] for r in records]
    assert all(math.isfinite(J) for J in objectives)
    assert all(b <= a + 1e-9 * max(1.0, abs(a)) for a, b in zip(objectives, objectives[1:])), objectives
    done = with_labels(part, model.complete(w, part))
    hinge = 0.0
    for i in range(part.n):
        Y = STRUCTURES[name].enumerate(model, part, i)
        idx = torch.full((len(Y),), i)
        scores, loss = model.phi(part, idx, Y) @ w, model.loss(done, idx, Y)
        hinge += float((scores + loss).max()) - float(scores[loss <= 1e-12].max())
    J = lam / 2 * float(w @ w) + hinge / part.n
    assert abs(J - objectives[-1]) <= 1e-8 * max(1.0, abs(J)), (J, objectives)
