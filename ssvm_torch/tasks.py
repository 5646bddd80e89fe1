"""The task registry: every named dataset with its model, default lambda and evaluation, in one place.

A :class:`Task` knows how to load its data and build its model (:meth:`Task.load` returns a
:class:`Problem`); a :class:`Problem` is what every client (``ssvm-train``, ``ssvm-path``, the
Lightning module, the benchmarks) needs: the data-free model, the train/test containers, the
default lambda (1/n, objective (1) of Osokin et al. 2016), the block store and ``evaluate(w)``,
which returns the named metrics of a history record (``train_error``, ``test_error``,
``test_position_error`` and task-specific extras).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .data.examples import FlatData, GraphData, PairData, PoseData
from .data.ocr import load_ocr, load_ocr_letters, load_scene
from .data.types import ChainData
from .errors import SSVMInputError, check
from .models import ChainModel, EdgeChainModel, GraphCutModel, MatchingModel, MulticlassModel, MultiLabelModel, TreePoseModel
from . import task_predictions as predict
from .problem import Problem
from .ud_tasks import (UD_RECOMMENDED, UD_RUN_DEFAULTS, UD_SPANS_RUN_DEFAULTS, ud_ewt,
                       ud_ewt_spans)


@dataclass(frozen=True)
class Task:
    name: str
    build: Callable[..., Problem]
    description: str
    train_size: bool = False          # supports keeping the first N training examples
    unary_only: bool = False          # has a pairwise part that can be dropped (the unaries-only baseline)
    sequences: bool = False           # its data are ChainData (load_dataset)
    templates: bool = False           # featurized by a feature template (features, min_count, heldout)
    chunk_tags: bool = False          # its tags are chunk tags (B-X / I-X / O): --constraints applies
    trees: bool = False               # dependency trees: --loss and --trees (projective or not) apply
    segments: bool = False            # semi-Markov segmentations: --loss applies
    constituents: bool = False        # constituency trees: --loss applies
    dev_split: bool = False           # a released development split: --select-lam scores on it (no --heldout share)
    graphs: bool = False              # multi-class pairwise graphs: --graph-inference applies
    # the featurization ssvm-train uses where an option is not given: the configuration chosen on the
    # development split (docs/conll.md); load() itself keeps the plain defaults (sha-pereira, BIO, ...)
    recommended: dict = field(default_factory=dict)
    # ssvm-train's solver options where they are not given (passes, gap_check, lams): chosen on dev likewise
    run_defaults: dict = field(default_factory=dict)

    def options(self, **given) -> dict:
        """``given`` featurization options (features, min_count, loss, constraints, tags) with each one
        that is None replaced by :attr:`recommended`'s value, else by the plain default of :meth:`load`."""
        for k, v in given.items():                    # "" would read as "not given" further down (``or``)
            if isinstance(v, str) and not v.strip():
                raise SSVMInputError(f"{k}: expected a name (or leave the option out for the task's default), got an "
                                     "empty string")
        return {k: self.recommended.get(k, PLAIN_OPTIONS.get(k)) if v is None else v for k, v in given.items()}

    def load(self, train_size: int | None = None, unary_only: bool = False, device=None,
             dtype=torch.float64, features: str | None = None, min_count: int | None = None,
             heldout: float | str | None = None, loss: str | None = None, constraints: str | None = None,
             tags: str | None = None, trees: str | None = None, siblings: str | None = None,
             inference: str | None = None) -> Problem:
        if train_size is not None and not self.train_size:
            raise SSVMInputError(f"train_size: not supported for {self.name!r} "
                                 f"(supported for {[t.name for t in TASKS.values() if t.train_size]})")
        if unary_only and not self.unary_only:
            raise SSVMInputError(f"unary_only: only supported for {[t.name for t in TASKS.values() if t.unary_only]}, "
                                 f"not {self.name!r}")
        featurization = {"features": features,
                         "min_count": PLAIN_OPTIONS["min_count"] if min_count is None else min_count, "heldout": heldout}
        if not self.templates:
            given = [k for k, v in featurization.items() if v not in (None, 1)]
            if given:
                raise SSVMInputError(f"{given[0]}: only supported for "
                                     f"{[t.name for t in TASKS.values() if t.templates]}, not {self.name!r}")
            featurization = {}
        if loss is not None:
            if not (self.sequences or self.trees or self.segments or self.constituents):
                raise SSVMInputError(f"loss: only for the chain, segment and tree tasks "
                                     f"{[t.name for t in TASKS.values() if t.sequences or t.trees or t.segments or t.constituents]}, "
                                     f"not {self.name!r}")
            featurization["loss"] = loss
        if trees is not None:
            if not self.trees:
                raise SSVMInputError(f"trees: only for the dependency tasks {[t.name for t in TASKS.values() if t.trees]}, "
                                     f"not {self.name!r}")
            featurization["trees"] = trees
        if siblings is not None:
            if not self.trees:
                trees_tasks = [t.name for t in TASKS.values() if t.trees]
                raise SSVMInputError(f"siblings: only for the dependency tasks {trees_tasks}, not {self.name!r}")
            featurization["siblings"] = siblings
        if inference is not None:
            if not self.graphs:
                graph_tasks = [t.name for t in TASKS.values() if t.graphs]
                raise SSVMInputError(f"inference: only for the graph tasks {graph_tasks}, not {self.name!r}")
            featurization["inference"] = inference
        if constraints not in (None, "none"):
            if not self.chunk_tags:
                raise SSVMInputError(f"constraints: only for the tasks with chunk tags "
                                     f"{[t.name for t in TASKS.values() if t.chunk_tags]}, not {self.name!r}")
            featurization["constraints"] = constraints
        if tags not in (None, "bio"):
            if not self.chunk_tags:
                raise SSVMInputError(f"tags: only for the tasks with chunk tags "
                                     f"{[t.name for t in TASKS.values() if t.chunk_tags]}, not {self.name!r}")
            featurization["tags"] = tags
        return self.build(self.name, train_size=train_size, unary_only=unary_only, device=device, dtype=dtype,
                          **featurization)


def _keep(n: int, train_size: int | None) -> int:
    if train_size is None:
        return n
    check(isinstance(train_size, int) and 1 <= train_size <= n, "train_size", f"an int in [1, {n}]", train_size)
    return train_size


def _chain_problem(name, train: ChainData, test: ChainData, unit: str, position: str, loss=None,
                   emission="label-major", split=None, alphabet=None) -> Problem:
    """A first-order chain (Viterbi) on sequence data, with edge-observation features where the data
    have them; test_f1 where the data name chunk tags. ``loss``: normalized (default) or hamming;
    ``emission``: the layout of the emission weights (models/chain.py); ``split``, ``alphabet``: the test
    predictions' split name and letters (:func:`ssvm_torch.task_predictions.chain_labels`)."""
    model = (ChainModel if train.E is None else EdgeChainModel).for_data(train, loss or "normalized", emission)

    def evaluate(w):
        w64 = w.detach().to("cpu", torch.float64)
        labels = model.predict_ragged(w64, test)
        rec = {"train_error": model.metrics(w64, train)["error"],
               "test_error": float(model.ragged_loss(test, labels).mean()),
               "test_position_error": float((labels != test.Y).double().mean())}
        if "tag_names" in test.meta:
            from .data.conll import chunk_f1
            rec["test_f1"] = chunk_f1(test, labels)["f1"]
        return rec
    loss_text = "normalized Hamming" if model.loss_name == "normalized" else "Hamming count"
    return Problem(name, model, train, test, evaluate, f"per {unit}, {loss_text}", position,
                   predictions=predict.chain_labels(model, test, split or test.name, alphabet))


def _ocr(name, train_size=None, unary_only=False, device=None, dtype=torch.float64, loss=None) -> Problem:
    """OCR words (Taskar et al. 2003) with the papers' splits."""
    train, test = load_ocr(name.split("-")[1])
    return _chain_problem(name, train, test, "word", "per-letter error", loss, split=f"{name}-test",
                          alphabet=predict.OCR_ALPHABET)


def _conll(name, train_size=None, unary_only=False, device=None, dtype=torch.float64, features=None, min_count=1,
           heldout=None, loss=None, constraints=None, tags="bio") -> Problem:
    """CoNLL-2000 chunking with sparse attributes of a feature template (default ``sha-pereira``);
    ``train_size`` keeps the first N sentences, ``heldout`` makes the test set the last part of them;
    ``constraints``: a chunking scheme ("bio", "iob1", "bioes") whose transitions every oracle obeys;
    ``tags``: train on the file's BIO tags or on them converted to BIOES (F1 always on BIO chunks)."""
    from .data.conll import load_conll2000
    train, test = load_conll2000(train_size, features or "sha-pereira", min_count, heldout, tags=tags)
    p = _chain_problem(name, train, test, "sentence", "per-token error", loss, "feature-major")
    if constraints is not None:
        constrain(p.model, train, constraints)
    p.layout = {**p.model.describe(), "featurization": train.meta["featurization"]}
    return p


def _conll_segments(name, train_size=None, unary_only=False, device=None, dtype=torch.float64, features=None,
                    min_count=1, heldout=None, loss=None) -> Problem:
    """CoNLL-2000 chunking as segmentation (a semi-Markov SSVM, models/semimarkov.py): the attributes of a feature
    template (default ``sha-pereira``) score each chunk's words, its first and its last word, plus (length, type)
    and chunk-to-chunk transition weights; segments of at most the training split's longest chunk, "O" words one
    segment each. test_f1: conlleval's chunk F1 of the decoded segments written back as BIO tags."""
    from .data.conll import load_conll2000
    from .data.segments import chunk_segments
    from .models.semimarkov import SemiMarkovModel
    from .segments import tags_from_segments
    chain_train, chain_test = load_conll2000(train_size, features or "sha-pereira", min_count, heldout, tags="bio")
    train = chunk_segments(chain_train)
    labels = train.meta["segment_labels"]
    test = chunk_segments(chain_test, labels)
    model = SemiMarkovModel.for_data(train, loss=loss or "normalized", outside=0)

    def evaluate(w):
        from seqeval.metrics.sequence_labeling import precision_recall_fscore_support
        w64 = w.detach().to("cpu", torch.float64)
        idx = torch.arange(test.n)
        pred = model.predict(w64, test, idx)
        lengths = test.lengths
        loss = model.loss(test, idx, pred)
        tags = tags_from_segments(pred, lengths, labels)
        _, _, f1, _ = precision_recall_fscore_support(test.meta["tags"], tags, average="micro", zero_division=0)
        wrong = float((loss / model.token_loss(lengths)).sum())               # positions whose state differs
        return {"train_error": model.metrics(w64, train)["error"], "test_error": float(loss.mean()),
                "test_position_error": wrong / float(lengths.sum()), "test_f1": 100 * float(f1)}
    loss_text = "normalized" if model.loss_name == "normalized" else "count of"
    p = Problem(name, model, train, test, evaluate, f"per sentence, {loss_text} positions whose (chunk type, begins) "
                f"differs", "per-word error of the (chunk type, begins) states",
                predictions=predict.segmentations(model, test, test.name, labels))
    p.layout = {**model.describe(), "segment_labels": labels, "featurization": chain_train.meta["featurization"]}
    return p


def constrain(model, train: ChainData, scheme: str) -> None:
    """Give a chain model the transition constraints of ``scheme`` over the data's tag names, refused
    by name when the scheme does not fit the tag set or the training tags break it."""
    from .constraints import allowed_transitions
    names = train.meta.get("tag_names") if train.meta else None
    if names is None:
        raise SSVMInputError(f"constraints: the data {train.name!r} have no tag names")
    try:
        masks = allowed_transitions(scheme, names)
    except SSVMInputError as e:
        raise SSVMInputError(f"constraints: the scheme {scheme!r} does not fit the tag set ({e})") from None
    model.set_constraints(masks, scheme.upper())
    model.check_labels_allowed(train, "constraints")


def _flat_problem(name, model, train: FlatData, test: FlatData, dtype, names, alphabet=None) -> Problem:
    def evaluate(w):
        w = w.detach().to("cpu", dtype)
        te = model.metrics(w, test)
        return {"train_error": model.metrics(w, train)["error"], "test_error": te["error"],
                "test_position_error": te.get("example_error", te["error"])}
    return Problem(name, model, train, test, evaluate, *names,
                   predictions=predict.classes(model, test, f"{name}-test", alphabet))


def _scene(name, train_size=None, unary_only=False, device=None, dtype=torch.float64) -> Problem:
    """Scene multi-label (full pairwise label graph, exact enumeration)."""
    train, test = (FlatData(X, Y) for X, Y in _pairs(load_scene(dtype)))
    return _flat_problem(name, MultiLabelModel.for_data(train), train, test, dtype,
                         ("Hamming loss, fraction of wrong labels", "per-image 0/1 error"))


def _ocr_letters(name, train_size=None, unary_only=False, device=None, dtype=torch.float64) -> Problem:
    """OCR letters as independent multiclass examples (dense blocks: n x d = 4,617 x 3,354)."""
    train, test = (FlatData(X, Y) for X, Y in _pairs(load_ocr_letters("small", dtype)))
    return _flat_problem(name, MulticlassModel.for_data(train, 26), train, test, dtype,
                         ("0/1 error per letter", "0/1 error per letter"), predict.OCR_ALPHABET)


def _pairs(four):
    Xtr, Ytr, Xte, Yte = four
    return (Xtr, Ytr), (Xte, Yte)


def _segmentation(name, train_size=None, unary_only=False, device=None, dtype=torch.float64) -> Problem:
    """Graph-cut segmentation (App. I.3) on the seeded synthetic superpixel graphs; the Potts
    weights are kept >= 0 by box constraints (App. H) so every oracle call is an exact min cut."""
    from .data.segmentation_synth import make_segmentation_synth
    graphs_tr, graphs_te = make_segmentation_synth()
    train = GraphData(graphs_tr[:_keep(len(graphs_tr), train_size)], dtype, device)
    test = GraphData(graphs_te, dtype, device)
    model = GraphCutModel.for_data(train, pairwise=not unary_only)

    def evaluate(w):
        te = model.metrics(w, test)
        return {"train_error": model.metrics(w, train)["error"], "test_error": te["error"],
                "test_position_error": te["node_error"]}
    return Problem(name, model, train, test, evaluate, "class-balanced Hamming loss per image", "per-node error",
                   nonnegative=model.pairwise_index if model.pairwise else None,
                   predictions=predict.graph_cut_nodes(model, test, f"{name}-test"))


def _graph_crf_problem(name, train, test, train_size, inference="lp") -> Problem:
    """Labeled graphs (data/graph_views.py) under the multi-class pairwise model with the ``inference`` oracle (the
    local-polytope LP, enumeration or branch and bound); ``train_size``: the first training graphs."""
    from .models.graph_crf import GraphCRFModel
    train = train.subset(range(_keep(train.n, train_size))) if train_size else train
    model = GraphCRFModel.for_data(train, inference=inference)

    def evaluate(w):
        te = model.metrics(w, test)
        return {"train_error": model.metrics(w, train)["error"], "test_error": te["error"],
                "test_position_error": te["node_error"], "test_fractional": te["fractional"]}
    return Problem(name, model, train, test, evaluate, "Hamming loss per graph (share of wrong nodes)",
                   "per-node error", predictions=predict.graph_crf_nodes(model, test, f"{name}-test"))


def _scene_graph(name, train_size=None, unary_only=False, device=None, dtype=torch.float64, inference="lp") -> Problem:
    """Scene's complete label graphs (the LP is a relaxation there; enumeration and branch and bound are exact)."""
    from .data.graph_views import scene_graphs
    return _graph_crf_problem(name, *scene_graphs(dtype, device), train_size, inference)


def _ocr_graph(name, train_size=None, unary_only=False, device=None, dtype=torch.float64, inference="lp") -> Problem:
    """OCR-small's words as letter chains (the LP is exact there: max-sum on the forest)."""
    from .data.graph_views import ocr_graphs
    return _graph_crf_problem(name, *ocr_graphs("small", dtype, device), train_size, inference)


def _pose(name, train_size=None, unary_only=False, device=None, dtype=torch.float64) -> Problem:
    """Tree-structured pose (App. I.4 model) on seeded synthetic stick figures: max-sum with
    generalized distance transforms; the quadratic deformation weights are kept >= 0 (App. H)."""
    from .data.pose_synth import PARENTS, make_pose_synth
    tr, te = make_pose_synth()
    k = _keep(tr.n, train_size)
    train = PoseData(tr.scores[:k], tr.joints[:k], dtype, device)
    test = PoseData(te.scores, te.joints, dtype, device)
    model = TreePoseModel.for_data(train, PARENTS, pairwise=not unary_only)

    def evaluate(w):
        m = model.metrics(w, test)
        return {"train_error": model.metrics(w, train)["error"], "test_error": m["error"], "test_pck": m["pck"],
                "test_position_error": m["loss"]}
    return Problem(name, model, train, test, evaluate, "mean joint error in grid cells",
                   f"share of joints off by > {model.radius} cell (the loss)",
                   nonnegative=model.pairwise_index if model.pairwise else None,
                   predictions=predict.pose_joints(model, test, f"{name}-test"))


def _hansards(name, train_size=None, unary_only=False, device=None, dtype=torch.float64) -> Problem:
    """Word alignment by bipartite matching with NULL on the Hansards gold standard; test error = AER."""
    from .data.hansards import EDGE_FEATURES, NULL_FEATURES, aer, load_hansards
    pairs_tr, pairs_te = load_hansards()
    pairs_tr = pairs_tr[:_keep(len(pairs_tr), train_size)]
    train = PairData.from_pairs(pairs_tr, dtype=dtype, device=device)
    test = PairData.from_pairs(pairs_te, dtype=dtype, device=device)
    model = MatchingModel.for_data(train)

    def evaluate(w):
        te = aer(pairs_te, model.links(w, test))
        return {"train_error": aer(pairs_tr, model.links(w, train))["aer"], "test_error": te["aer"],
                "test_precision": te["precision"], "test_recall": te["recall"],
                "test_position_error": 1.0 - te["recall"]}
    layout = {"kind": "MatchingModel", "d": model.d, "edge": list(EDGE_FEATURES), "null_e": list(NULL_FEATURES),
              "null_f": list(NULL_FEATURES)}
    return Problem(name, model, train, test, evaluate, "alignment error rate (AER)", "1 - recall of sure links",
                   layout=layout, predictions=predict.alignment_links(model, test, f"{name}-test"))


# what load() does with an option not given (features None = the template's default, loss None = normalized)
PLAIN_OPTIONS = {"features": None, "min_count": 1, "loss": None, "constraints": "none", "tags": "bio", "trees": None}
# CoNLL-2000's best configuration on the dev split (docs/conll.md, benchmarks/results/conll_select_*.json):
# rich attributes with edge observations, trained on BIOES tags (scored as BIO) under the BIOES
# constraints, the Hamming-count loss, every attribute kept (min count 1: dev F1 95.14 against 95.05 with 2)
CONLL_RECOMMENDED = {"features": "rich-edges", "tags": "bioes", "constraints": "bioes", "loss": "hamming",
                     "min_count": 1}

TASKS: dict[str, Task] = {t.name: t for t in (
    Task("ocr-small", _ocr, "OCR words, train fold 0 (626 words), test folds 1-9", sequences=True),
    Task("ocr-large", _ocr, "OCR words, train folds 1-9 (6,251 words), test fold 0", sequences=True),
    Task("conll2000", _conll, "CoNLL-2000 chunking, sparse attributes of a feature template", train_size=True,
         sequences=True, templates=True, chunk_tags=True, recommended=CONLL_RECOMMENDED),
    Task("conll2000-segments", _conll_segments, "CoNLL-2000 chunking as segments (semi-Markov SSVM), sparse "
         "attributes of a feature template", train_size=True, templates=True, segments=True),
    Task("scene", _scene, "scene multi-label (6 labels, full pairwise graph)"),
    Task("ocr-letters", _ocr_letters, "OCR letters as independent multiclass examples"),
    Task("segmentation-synth", _segmentation, "graph-cut segmentation of synthetic superpixel graphs",
         train_size=True, unary_only=True),
    Task("scene-graph", _scene_graph, "scene as complete 6-node label graphs, multi-class pairwise model with the "
         "local-polytope LP oracle (a relaxation)", train_size=True, graphs=True),
    Task("ocr-graph", _ocr_graph, "OCR-small words as letter chains, multi-class pairwise model with the "
         "local-polytope LP oracle (exact on chains)", train_size=True, graphs=True),
    Task("pose-synth", _pose, "tree-structured pose of synthetic stick figures", train_size=True, unary_only=True),
    Task("hansards", _hansards, "Hansards word alignment by matching with NULL", train_size=True),
    Task("ud-ewt", ud_ewt, "UD English-EWT dependency parsing, first-order arc features (gold POS)", train_size=True,
         templates=True, trees=True, dev_split=True, recommended=UD_RECOMMENDED, run_defaults=UD_RUN_DEFAULTS),
    Task("ud-ewt-spans", ud_ewt_spans, "UD English-EWT phrase structures (a constituent per head), span-factored "
         "constituency trees over fencepost features (gold POS)", train_size=True, templates=True, constituents=True,
         dev_split=True, run_defaults=UD_SPANS_RUN_DEFAULTS),
)}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise SSVMInputError(f"dataset: expected one of {list(TASKS)}, got {name!r}")
    return TASKS[name]


def load_task(name: str, train_size: int | None = None, unary_only: bool = False, device=None,
              dtype=torch.float64, **featurization) -> Problem:
    """The :class:`Problem` of the registered task ``name`` (``features``, ``min_count``, ``heldout``
    for the tasks featurized by a template)."""
    return get_task(name).load(train_size=train_size, unary_only=unary_only, device=device, dtype=dtype,
                               **featurization)


def load_dataset(name: str, train_size: int | None = None) -> tuple[ChainData, ChainData]:
    """(train, test) :class:`ChainData` of a shipped sequence dataset (ocr-small, ocr-large, conll2000)."""
    task = get_task(name)
    if not task.sequences:
        raise SSVMInputError(f"dataset: expected a sequence dataset {[n for n, t in TASKS.items() if t.sequences]}, "
                             f"got {name!r}")
    p = task.load(train_size=train_size)
    return p.train, p.test
