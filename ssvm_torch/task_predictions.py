"""What every task of the registry (:mod:`ssvm_torch.tasks`, :mod:`ssvm_torch.ud_tasks`) writes beside its model as
``test_predictions.json`` (:func:`ssvm_torch.outputs.save_predictions`): the decoded output of every test example
in the task's own terms, in the test split's order, so that a run's reported test figures can be recomputed from
its run directory against the split's gold (``tests/test_task_predictions.py`` does so for every task).

Each builder returns ``predictions(w) -> dict`` (JSON-able) for :class:`~ssvm_torch.problem.Problem`; every dict
has ``split`` (the test split's name) and ``kind`` (what the rows hold):

=============  ==============================================================================================
kind           rows
=============  ==============================================================================================
``labels``     per sequence its labels (int), ``tags`` the tag strings (BIO where the data name chunk tags,
               the scored reading of BIOES), ``words`` the letters of OCR words
``segments``   per sentence its segments ``[start, end (exclusive), label name]`` and ``tags`` (their BIO tags)
``classes``    per example its class (multiclass; ``words``: OCR letters) or its 0/1 label vector (multi-label)
``nodes``      per graph each node's label, ``fractional`` the graphs whose LP optimum was fractional
``joints``     per example each joint's ``[row, col]`` cell
``links``      per sentence pair its ``[i, j]`` links (English word i, French word j, NULL omitted), sorted
``heads``      per sentence each word's head (0 the root) and ``labels`` its relation (ud-ewt: ud_tasks.py)
``spans``      per sentence its debinarized labeled spans ``[i, j, label]`` (ud-ewt-spans: ud_tasks.py)
=============  ==============================================================================================
"""
from __future__ import annotations

import string
from typing import Callable

import torch

#: OCR's classes 0..25 are the letters a..z (datasets/README.md)
OCR_ALPHABET = string.ascii_lowercase

Predictions = Callable[[torch.Tensor], dict]


def _host(w: torch.Tensor) -> torch.Tensor:
    return w.detach().to("cpu", torch.float64)


def _rows(flat: list, offsets: list) -> list:
    return [flat[a:b] for a, b in zip(offsets, offsets[1:])]


def chain_labels(model, test, split: str, alphabet: str | None = None) -> Predictions:
    """A chain task's Viterbi labels (the decode its ``evaluate`` scores: ``model.predict_ragged``); chunk tags as
    :func:`ssvm_torch.data.conll.chunk_f1` reads them (:func:`~ssvm_torch.data.conll.scored_tag_names`)."""
    def predictions(w):
        rows = _rows(model.predict_ragged(_host(w), test).tolist(), test.offsets.tolist())
        out = {"split": split, "kind": "labels", "labels": rows}
        if "tag_names" in (test.meta or {}):
            from .data.conll import scored_tag_names
            names = scored_tag_names(test)
            out["tags"] = [[names[k] for k in row] for row in rows]
        if alphabet is not None:
            out["words"] = ["".join(alphabet[k] for k in row) for row in rows]
        return out
    return predictions


def segmentations(model, test, split: str, labels: list) -> Predictions:
    """A semi-Markov task's best segmentations (``model.predict``) as segments and as BIO tags."""
    from .segments import tags_from_segments
    from .segments.convert import spans

    def predictions(w):
        pred = model.predict(_host(w), test)
        lengths = test.lengths
        return {"split": split, "kind": "segments",
                "segments": [[[a, b, labels[k]] for a, b, k in row] for row in spans(pred, lengths)],
                "tags": tags_from_segments(pred, lengths, labels)}
    return predictions


def classes(model, test, split: str, alphabet: str | None = None) -> Predictions:
    """A flat task's predictions (``model.predict``): one class per example, or one 0/1 vector per example."""
    def predictions(w):
        pred = model.predict(w.detach().to("cpu", test.X.dtype), test).tolist()
        out = {"split": split, "kind": "classes", "classes": pred}
        if alphabet is not None:
            out["words"] = "".join(alphabet[k] for k in pred)
        return out
    return predictions


def graph_cut_nodes(model, test, split: str) -> Predictions:
    """A graph-cut task's min-cut labels (``model.predict``), each graph's nodes in its own order."""
    def predictions(w):
        pred = model.predict(w, test).tolist()
        sizes = (test.node_off[1:] - test.node_off[:-1]).tolist()
        return {"split": split, "kind": "nodes", "nodes": [row[:m] for row, m in zip(pred, sizes)],
                "fractional": []}
    return predictions


def graph_crf_nodes(model, test, split: str) -> Predictions:
    """A graph CRF task's node labels (``model.predict_states`` read through its state labels: what its metrics
    score) and the graphs whose LP optimum was fractional (rounded node by node)."""
    def predictions(w):
        states, integral = model.predict_states(w, test)
        labels = model.state_labels[states.cpu().numpy()].tolist()
        return {"split": split, "kind": "nodes", "nodes": _rows(labels, test.node_off.tolist()),
                "fractional": [i for i, ok in enumerate(integral.tolist()) if not ok]}
    return predictions


def pose_joints(model, test, split: str) -> Predictions:
    """A pose task's joint cells (``model.predict``: max-sum with distance transforms)."""
    def predictions(w):
        return {"split": split, "kind": "joints", "joints": model.predict(w, test).tolist()}
    return predictions


def alignment_links(model, test, split: str) -> Predictions:
    """A word-alignment task's links (``model.links``: the matching of each pair, NULL omitted)."""
    def predictions(w):
        return {"split": split, "kind": "links", "links": [sorted([i, j] for i, j in pair)
                                                           for pair in model.links(w, test)]}
    return predictions
