"""The UD English-EWT tasks of the registry (:mod:`ssvm_torch.tasks`): first-order dependency parsing (``ud-ewt``)
and the phrase-structure constituency task (``ud-ewt-spans``), each a builder of a :class:`~ssvm_torch.problem.Problem`
with its options, its recommended configuration and its run defaults (the grids its results ran)."""
from __future__ import annotations

import torch

from .errors import check
from .problem import Problem

# UD English-EWT's configuration chosen on its dev split (docs/structures.md, benchmarks/results/ud_ewt_dev.json)
UD_RECOMMENDED = {"features": "mcdonald", "trees": "projective", "loss": "hamming", "min_count": 1}
UD_RUN_DEFAULTS = {"passes": 20, "gap_check": 5, "lams": [1e-2, 3e-3, 1e-3, 3e-4]}
# the constituency task's grid and budget (docs/structures.md: its results ran this protocol)
UD_SPANS_RUN_DEFAULTS = {"passes": 60, "gap_check": 10, "lams": [1e-2, 3e-3, 1e-3, 3e-4, 1e-4]}

TREE_KINDS = ("projective", "non-projective", "second-order")
SIBLING_FEATURES = "mcdonald-pereira"       # the second-order features (data/sibling_features.py)


def ud_ewt(name, train_size=None, unary_only=False, device=None, dtype=torch.float64, features=None, min_count=1,
           heldout=None, loss=None, trees=None, siblings=None) -> Problem:
    """UD English-EWT dependency parsing: first-order arc features of a template (default ``mcdonald``),
    projective (Eisner) or non-projective (Chu-Liu-Edmonds) single-root trees, or ``trees="second-order"``:
    projective trees with adjacent-sibling parts too (McDonald & Pereira 2006's features, the second-order
    Eisner algorithm; models/sibling_dependency.py; ``siblings`` the sibling template, default
    :data:`SIBLING_FEATURES`, with first-child parts); ``heldout="dev"`` evaluates on
    the released dev split (model selection; the test file's trees are then never scored). Gold UPOS / XPOS
    are inputs (the treebank's own tags). Metrics: UAS and LAS in percent by the CoNLL 2018 shared task's
    definitions (every word, punctuation included; LAS on the universal part of DEPREL, the relations from
    the second-stage labeler of :mod:`ssvm_torch.labeler`)."""
    from .data.sibling_features import get_sibling_template
    from .data.trees import load_ud_dependencies
    from .models import DependencyModel, SiblingDependencyModel
    check(heldout in (None, "dev"), "heldout", f"None or 'dev' for {name!r} (it has a released development split)",
          heldout)
    trees = trees or "projective"
    check(trees in TREE_KINDS, "trees", f"one of {list(TREE_KINDS)}", repr(trees))
    second = trees == "second-order"
    check(siblings is None or second, "siblings", "no sibling template unless trees='second-order'", repr(siblings))
    stemplate = get_sibling_template(siblings or SIBLING_FEATURES) if second else None     # refused before loading
    train, test = load_ud_dependencies(features or "mcdonald", min_count, "dev" if heldout else "test", train_size,
                                       siblings=stemplate)
    model = (SiblingDependencyModel if second else DependencyModel).for_data(
        train, projective=trees != "non-projective", loss=loss or "hamming")
    labeler = {}

    def evaluate(w):
        from .labeler import attachment_scores
        w64 = w.detach().to("cpu", torch.float64)
        pred = model.predict_flat(w64, test)
        scores = attachment_scores(test, pred, labeler)
        return {"train_error": model.metrics(w64, train)["error"], "test_error": 1.0 - scores["uas"] / 100.0,
                "test_uas": scores["uas"], "test_las": scores["las"], "test_position_error": scores["sentence_error"]}
    def predictions(w):
        from .labeler import attachment_scores
        pred = model.predict_flat(w.detach().to("cpu", torch.float64), test)
        attachment_scores(test, pred, labeler)                  # trains the labeler if no record did
        rel = labeler["labeler"].predict(test, pred)
        names, off = train.meta["label_names"], test.offsets.tolist()
        return {"split": test.name, "kind": "heads", "heads": [pred[a:b].tolist() for a, b in zip(off, off[1:])],
                "labels": [[names[k] for k in rel[a:b].tolist()] for a, b in zip(off, off[1:])],
                "sent_ids": test.meta["sent_ids"]}
    p = Problem(name, model, train, test, evaluate, "1 - UAS: the share of words with a wrong head",
                "the share of sentences with a wrong head (1 - unlabeled complete match)", predictions=predictions)
    p.layout = {**model.describe(), "featurization": train.meta["featurization"], "trees": trees}
    labeler["train"] = train            # the labeler is trained on first use, on the training trees
    return p



SPAN_FEATURES = ("fenceposts",)


def ud_ewt_spans(name, train_size=None, unary_only=False, device=None, dtype=torch.float64, features=None,
                 min_count=1, heldout=None, loss=None) -> Problem:
    """UD English-EWT's dependency trees read as phrase structures (a constituent per word with dependents, labeled
    with its UPOS; binarized from the left: ssvm_torch.data.span_data), a span-factored constituency SSVM over
    fencepost features (Hall, Durrett & Klein 2014's surface features; gold UPOS are inputs); the projective
    sentences only (a non-projective tree has no such phrase structure; the layout records how many).
    ``heldout="dev"`` evaluates on the released dev split (model selection). Metrics: labeled bracket F1 of the
    debinarized trees (evalb's counts: one-word spans not counted), unlabeled F1, exact match."""
    from .data.span_data import load_ud_spans
    from .models import ConstituencyModel
    check(heldout in (None, "dev"), "heldout", f"None or 'dev' for {name!r} (it has a released development split)",
          heldout)
    check(features in (None, *SPAN_FEATURES), "features", f"one of {list(SPAN_FEATURES)} for {name!r}", features)
    train, test = load_ud_spans(min_count, "dev" if heldout else "test", train_size)
    model = ConstituencyModel.for_data(train, loss=loss or "hamming", fill=0)

    def evaluate(w):
        w64 = w.detach().to("cpu", torch.float64)
        te = model.metrics(w64, test)
        return {"train_error": model.metrics(w64, train)["error"], "test_error": te["error"], "test_f1": te["f1"],
                "test_unlabeled_f1": te["unlabeled_f1"], "test_position_error": 1.0 - te["exact"]}

    def predictions(w):
        from .spans import debinarize, spans_of_chart
        out = [None] * test.n
        for idx, charts in model.predict_charts(w.detach().to("cpu", torch.float64), test):
            for i, row in zip(idx.tolist(), spans_of_chart(charts)):
                out[i] = [list(s) for s in debinarize(row, 0)]
        return {"split": test.name, "kind": "spans", "labels": train.meta["label_names"], "spans": out,
                "sent_ids": test.meta["sent_ids"]}
    p = Problem(name, model, train, test, evaluate, "1 - labeled bracket F1 (debinarized, one-word spans not counted)",
                "the share of sentences whose labeled tree is not exact", predictions=predictions)
    p.layout = {**model.describe(), "featurization": train.meta["featurization"],
                "sentences": {"train": [train.meta["kept"], train.meta["of"]], test.name: [test.meta["kept"],
                                                                                           test.meta["of"]]}}
    return p
