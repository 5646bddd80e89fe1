"""Every task of ``ssvm-train`` writes test_predictions.json (ssvm_torch/task_predictions.py), and the run's reported
test figures are recomputed from it against the test split's gold read here on its own (the dataset files, the
seeded generators), not through the task's evaluation: a run directory reproduces its result."""
from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
import torch

from ssvm_torch.cli.train import main as train_main
from ssvm_torch.data.types import data_dir
from ssvm_torch.outputs import load_model
from ssvm_torch.tasks import load_task


def _run(tmp_path, dataset, *extra):
    out = tmp_path / dataset
    assert train_main(["--dataset", dataset, "--passes", "2", "--gap-check", "1", "--out", str(out), "--quiet",
                       *extra]) == 0
    history = json.loads((out / "history.json").read_text())
    last = (history["records"] if isinstance(history, dict) else history)[-1]
    pred = json.loads((out / "test_predictions.json").read_text())
    return last, pred, load_model(out / "model.pt")["w"]


def _ocr_test_words(split="small"):
    z = np.load(data_dir() / "ocr_letters.npz")
    labels, off, folds = z["labels"].astype(int), z["word_offsets"].astype(int), z["folds"]
    test = np.flatnonzero(folds != 0) if split == "small" else np.flatnonzero(folds == 0)
    return [labels[off[i]:off[i + 1]].tolist() for i in test]


def _conll_test_tags():
    sents, tags = [], []
    with gzip.open(data_dir() / "conll2000_test.txt.gz", "rt") as f:
        for line in f:
            if line.strip():
                tags.append(line.split()[2])
            elif tags:
                sents.append(tags)
                tags = []
    return sents + ([tags] if tags else [])


def _chunk_f1(gold, pred):
    from seqeval.metrics import f1_score
    return 100 * f1_score(gold, pred, average="micro")


def test_ocr_small_letters_reproduce_the_per_letter_and_per_word_errors(tmp_path):
    last, pred, _ = _run(tmp_path, "ocr-small")
    gold = _ocr_test_words()
    assert pred["split"] == "ocr-small-test" and pred["kind"] == "labels" and len(pred["labels"]) == len(gold)
    assert pred["words"][0] == "".join(chr(97 + k) for k in pred["labels"][0])
    wrong = [sum(p != g for p, g in zip(pw, gw)) for pw, gw in zip(pred["labels"], gold)]
    assert [len(p) for p in pred["labels"]] == [len(g) for g in gold]
    assert last["test_position_error"] == pytest.approx(sum(wrong) / sum(map(len, gold)), abs=1e-12)
    assert last["test_error"] == pytest.approx(np.mean([e / len(g) for e, g in zip(wrong, gold)]), abs=1e-12)


def test_conll2000_tags_reproduce_the_chunk_f1_with_bioes_training(tmp_path):
    last, pred, _ = _run(tmp_path, "conll2000", "--train-size", "300", "--tags", "bioes", "--constraints",
                         "bioes")
    gold = _conll_test_tags()
    assert pred["split"] == "conll2000-test" and len(pred["tags"]) == len(gold) == 2012
    assert {t[0] for row in pred["tags"] for t in row} <= {"B", "I", "O"}      # scored as BIO
    assert last["test_f1"] == pytest.approx(_chunk_f1(gold, pred["tags"]), abs=1e-9)


def test_conll2000_segments_reproduce_the_chunk_f1_and_spell_their_tags(tmp_path):
    last, pred, _ = _run(tmp_path, "conll2000-segments", "--train-size", "200")
    gold = _conll_test_tags()
    assert pred["kind"] == "segments" and len(pred["segments"]) == len(gold)
    assert last["test_f1"] == pytest.approx(_chunk_f1(gold, pred["tags"]), abs=1e-9)
    for segs, tags, g in zip(pred["segments"], pred["tags"], gold):
        assert segs[0][0] == 0 and segs[-1][1] == len(g) == len(tags)
        assert all(a[1] == b[0] for a, b in zip(segs, segs[1:]))          # segments tile the sentence
        for start, end, label in segs:
            want = ["O"] * (end - start) if label == "O" else [f"B-{label}"] + [f"I-{label}"] * (end - start - 1)
            assert tags[start:end] == want


def test_scene_label_vectors_and_ocr_letters_reproduce_their_errors(tmp_path):
    last, pred, _ = _run(tmp_path, "scene")
    y = np.load(data_dir() / "scene.npz")["y_test"].astype(int)
    got = np.array(pred["classes"])
    assert pred["kind"] == "classes" and got.shape == y.shape and set(np.unique(got)) <= {0, 1}
    assert last["test_error"] == pytest.approx((got != y).mean(), abs=1e-12)
    assert last["test_position_error"] == pytest.approx((got != y).any(1).mean(), abs=1e-12)
    last, pred, _ = _run(tmp_path, "ocr-letters")
    gold = np.concatenate(_ocr_test_words())
    assert len(pred["classes"]) == len(gold) == len(pred["words"])
    assert last["test_error"] == pytest.approx((np.array(pred["classes"]) != gold).mean(), abs=1e-12)


@pytest.mark.long
def test_graph_tasks_nodes_reproduce_the_node_error_and_the_fractional_share(tmp_path):
    from ssvm_torch.data.segmentation_synth import make_segmentation_synth
    last, pred, _ = _run(tmp_path, "scene-graph", "--train-size", "100")
    y = np.load(data_dir() / "scene.npz")["y_test"].astype(int)
    nodes = np.array(pred["nodes"])
    assert pred["split"] == "scene-graph-test" and nodes.shape == y.shape       # image i: node k is label k
    assert last["test_position_error"] == pytest.approx((nodes != y).mean(), abs=1e-12)
    assert last["test_fractional"] == pytest.approx(len(pred["fractional"]) / len(y), abs=1e-12)
    last, pred, _ = _run(tmp_path, "ocr-graph", "--train-size", "100")
    gold = _ocr_test_words()
    assert [len(r) for r in pred["nodes"]] == [len(g) for g in gold] and pred["fractional"] == []  # chains: exact
    wrong = sum(p != g for pr, gr in zip(pred["nodes"], gold) for p, g in zip(pr, gr))
    assert last["test_position_error"] == pytest.approx(wrong / sum(map(len, gold)), abs=1e-12)
    last, pred, _ = _run(tmp_path, "segmentation-synth", "--train-size", "50")
    graphs = make_segmentation_synth()[1]
    assert [len(r) for r in pred["nodes"]] == [len(g.y) for g in graphs]
    wrong = sum(int((np.array(r) != g.y).sum()) for r, g in zip(pred["nodes"], graphs))
    assert last["test_position_error"] == pytest.approx(wrong / sum(len(g.y) for g in graphs), abs=1e-12)


@pytest.mark.long
def test_pose_joints_and_hansards_links_reproduce_the_joint_error_and_the_aer(tmp_path):
    from ssvm_torch.data.hansards import load_hansards
    from ssvm_torch.data.pose_synth import make_pose_synth
    last, pred, _ = _run(tmp_path, "pose-synth", "--train-size", "50")
    gold = make_pose_synth()[1].joints.double()
    got = torch.tensor(pred["joints"], dtype=torch.float64)
    assert pred["kind"] == "joints" and got.shape == gold.shape
    assert last["test_error"] == pytest.approx(float((got - gold).norm(dim=-1).mean()), abs=1e-12)
    last, pred, w = _run(tmp_path, "hansards", "--train-size", "60")
    pairs = load_hansards()[1]
    links = [{tuple(link) for link in pair} for pair in pred["links"]]
    assert len(links) == len(pairs) == 247
    assert all(0 <= i < len(p.e) and 0 <= j < len(p.f) for p, pair in zip(pairs, links) for i, j in pair)
    a = sum(map(len, links))
    s = sum(len(p.sure) for p in pairs)
    a_s = sum(len(A & p.sure) for A, p in zip(links, pairs))
    a_p = sum(len(A & p.probable) for A, p in zip(links, pairs))
    assert last["test_error"] == pytest.approx(1 - (a_s + a_p) / (a + s), abs=1e-12)       # Och & Ney's AER
    assert last["test_recall"] == pytest.approx(a_s / s, abs=1e-12)
    # the predictions are those of the saved weights
    task = load_task("hansards", train_size=60)
    assert pred == task.predictions(w)
    assert math.isfinite(last["gap"])
