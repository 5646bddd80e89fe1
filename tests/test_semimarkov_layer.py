"""The SemiMarkovChain layer (ssvm_torch.nn) against the segment package's functions, span_sums against their
definition, and the semi-Markov CoNLL chunker (recipes/conll_deep_semimarkov_*.yaml): a tiny run, an exact
resume, and its refusals."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssvm_torch.data.conll import read_conll
from ssvm_torch.data.types import data_file
from ssvm_torch.deep.__main__ import main as deep_main
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.nn import SemiMarkovChain, span_sums
from ssvm_torch.segments import (segment_crf_nll, segment_decode, segment_hinge, segment_lengths, segment_marginals,
                                 segment_softmax_margin, segments_from_tags)

ROOT = Path(__file__).resolve().parents[1]


def test_span_sums_are_the_sums_over_each_span():
    E = torch.randn(2, 6, 3, dtype=torch.float64)
    got = span_sums(E, 4)
    for t in range(6):
        for l in range(4):
            expect = E[:, t:t + l + 1].sum(1) if t + l < 6 else torch.zeros(2, 3, dtype=torch.float64)
            assert torch.allclose(got[:, t, l], expect, atol=1e-12)


@pytest.mark.parametrize("loss, fn", [("hinge", segment_hinge), ("softmax_margin", segment_softmax_margin),
                                      ("crf", segment_crf_nll)])
@pytest.mark.parametrize("seg_loss", ["tokens", "segments"])
def test_layer_losses_are_the_functions_with_its_parameters(loss, fn, seg_loss):
    torch.manual_seed(0)
    layer = SemiMarkovChain(3, 4, loss=loss, seg_loss=seg_loss, cost="normalized", length_scores=True).double()
    with torch.no_grad():
        layer.length_scores.normal_()
    S = torch.randn(5, 7, 4, 3, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([7, 3, 0, 1, 5])
    gold = segment_decode(torch.randn(5, 7, 4, 3, dtype=torch.float64), lengths=lengths)
    got = layer(S, gold, lengths=lengths, reduction="none")
    eff = S + layer.length_scores
    args = (layer.start_transitions, layer.end_transitions, layer.transitions.t())
    extra = {} if loss == "crf" else {"loss": seg_loss, "cost": "normalized"}
    expect = fn(eff, gold, *args, lengths=lengths, **extra)
    assert torch.allclose(got, expect, atol=1e-12)
    got.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())
    assert float(layer.transitions.grad.abs().sum()) > 0 and float(S.grad.abs().sum()) > 0
    assert torch.equal(layer.decode(S, lengths=lengths), segment_decode(eff, *args, lengths=lengths))
    assert torch.equal(layer.decode(S, lengths=lengths, nbest=4), segment_decode(eff, *args, lengths=lengths, nbest=4))
    assert torch.allclose(layer.marginals(S, lengths=lengths), segment_marginals(eff, *args, lengths=lengths))
    assert layer(S, gold, lengths=lengths, reduction="token_mean").item() == pytest.approx(
        got.sum().item() / 16, abs=1e-12)
    if loss == "crf":                                  # the CRF loss is log Z - s(gold): the layer's score is s
        torch.testing.assert_close(got, layer.log_partition(S, lengths=lengths) - layer.score(S, gold, lengths=lengths),
                                   rtol=0, atol=1e-12)
    rows = torch.tensor([0, 1, 4])                     # the rows of 4 or more segmentations
    best = layer.decode(S[rows], lengths=lengths[rows], nbest=4)
    scores = torch.stack([layer.score(S[rows], best[:, j], lengths=lengths[rows]) for j in range(4)], 1)
    assert bool((scores[:, :-1] >= scores[:, 1:] - 1e-12).all())    # the n best in non-increasing score order


def test_layer_refusals_name_the_field():
    layer = SemiMarkovChain(3, 2)
    with pytest.raises(SSVMInputError, match="seg_scores: expected shape"):
        layer(torch.zeros(1, 4, 3, 3), torch.zeros(1, 4, dtype=torch.int64))
    with pytest.raises(SSVMInputError, match="segments: expected an integer tensor"):
        layer(torch.zeros(1, 4, 2, 3), torch.zeros(1, 3, dtype=torch.int64))
    with pytest.raises(SSVMInputError, match="segments: expected"):
        layer.score(torch.zeros(1, 4, 2, 3), torch.tensor([[0, -1, -1, 1]]))      # a segment of 3 > max_length 2
    with pytest.raises(SSVMInputError, match="max_length: expected an int >= 1"):
        SemiMarkovChain(3, 0)
    with pytest.raises(SSVMInputError, match="seg_loss: expected one of"):
        SemiMarkovChain(3, 2, seg_loss="f1")
    with pytest.raises(SSVMInputError, match="emissions: expected shape"):
        layer.from_emissions(torch.zeros(1, 4, 2))


def test_docs_segments_examples_run():
    import re
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "segments.md").read_text(), re.S)
    assert len(blocks) == 5
    scope = {}
    exec(compile(blocks[0], "docs/segments.md functions", "exec"), scope)
    assert scope["gold"].tolist() == [[1, -1, 2, 0], [1, 0, -1, -1]]
    assert scope["S"].grad is not None and scope["P"].shape == (2, 4, 3, 3)
    assert [len(t) for t in scope["tags"]] == [4, 2]
    exec(compile(blocks[1], "docs/segments.md partial", "exec"), scope)
    constrained = scope["constrained"]
    assert constrained[0, 0] == 1 and constrained[0, 2] == 2 and constrained[1].tolist() == [1, 0, -1, -1]
    assert (scope["nll"] >= 0).all() and (scope["hinge"] >= 0).all() and scope["allowed"].shape == (2, 4, 3, 3)
    exec(compile(blocks[2], "docs/segments.md layer", "exec"), scope)
    assert scope["best"].shape == (2, 4) and float(scope["loss"]) >= 0
    exec(compile(blocks[3], "docs/segments.md linear SSVM", "exec"), scope)
    history = scope["history"]
    assert history[-1]["gap"] < 0.1 * history[0]["gap"] and scope["pred"].shape == (2, 5)
    exec(compile(blocks[4], "docs/segments.md estimator", "exec"), scope)
    est = scope["est"]
    assert 0.7 < est.score(scope["X_test"], scope["tags_test"]) < 1.0
    assert [len(t) for t in est.predict(scope["X_test"][:2])] == [len(t) for t in scope["tags_test"][:2]]


def run(tmp_path, *extra, loss="crf", epochs=3):
    args = ["fit", "--config", str(ROOT / "recipes" / f"conll_deep_semimarkov_{loss}.yaml"), "--model.train_size",
            "200", "--model.hidden", "16", "--model.word_dim", "16", "--model.char_filters", "8", "--model.lr",
            "0.01", "--trainer.max_epochs", str(epochs), "--trainer.default_root_dir", str(tmp_path), *extra]
    assert deep_main(args) == 0
    return sorted(tmp_path.glob("lightning_logs/version_*"))[-1]


@pytest.mark.long
def test_tiny_semimarkov_chunker_learns_and_writes_bio_predictions(tmp_path):
    out = run(tmp_path, epochs=4)
    losses = [r["loss"] for r in json.loads((out / "history.json").read_text())]
    assert losses[-1] < 0.8 * losses[0]
    pred = torch.load(out / "test_predictions.pt", weights_only=True)["predictions"]
    test = read_conll(data_file("conll2000_test.txt.gz"))
    assert [len(p) for p in pred] == [len(s) for s in test]
    from seqeval.metrics import f1_score
    results = json.loads((out / "results.json").read_text())
    assert results["test_f1"] == pytest.approx(100 * f1_score([[t[2] for t in s] for s in test], pred), abs=1e-12)
    assert results["test_f1"] > 20
    saved = torch.load(out / "chunker.pt", weights_only=True)
    assert saved["segment_labels"][0] == "O" and "NP" in saved["segment_labels"]
    fit = read_conll(data_file("conll2000_train.txt.gz"))[:180]          # train_size 200, the last 10% dev
    segments, lengths = segments_from_tags([[t[2] for t in s] for s in fit], saved["segment_labels"])
    longest = int(segment_lengths(segments, lengths).max())                 # max_segment null: the fit's longest
    assert saved["hparams"]["max_segment"] is None and saved["state_dict"]["chain.length_scores"].shape[0] == longest


@pytest.mark.long
def test_semimarkov_chunker_trains_from_hidden_tags(tmp_path):
    """hide_fraction with a semi-Markov head: the observed BIOES tags as a PartialSegmentation that the gold
    segmentation agrees with, a loss below the full-annotation one, a run that learns."""
    out = run(tmp_path, "--model.hide_fraction", "0.5", "--model.tags", "bioes", epochs=4)
    results = json.loads((out / "results.json").read_text())
    assert 0.4 < results["hidden_positions"] / results["fit_positions"] < 0.6
    assert results["test_f1"] > 20
    from ssvm_torch.deep import ConllChunker
    from ssvm_torch.segments import PartialSegmentation, allowed_segments
    model = ConllChunker(loss="crf", tags="bioes", constraints=False, structure="semimarkov", train_size=200,
                         hide_fraction=0.5, hidden=16, word_dim=16, char_filters=8)
    model.build()
    labels, begins, ends = model.fit_observed
    assert bool((labels >= 0).any()) and bool((labels < 0).any()) and bool((ends >= 0).any())
    known = labels >= 0
    assert torch.equal(begins[known] == 1, model.fit_segments[known] >= 0)       # the observed begin flags are gold's
    idx = torch.arange(8)
    losses = []
    for observed in (model.fit_observed, None):                  # the same dropout draws for both
        model.fit_observed = observed
        torch.manual_seed(0)
        model.gen.manual_seed(0)
        losses.append(model.batch_loss(idx).item())
    assert 0 <= losses[0] < losses[1]
    fit = model.corpus.fit
    sentences = [fit.batch(torch.tensor([i]))["rows"][0] for i in range(8)]
    for row in sentences:
        row = row[row >= 0]
        obs = PartialSegmentation(*(x[row][None] for x in (labels, begins, ends)))
        gold = model.fit_segments[row][None]
        S = torch.zeros(1, len(row), model.tagger.chain.max_length, len(model.segment_labels))
        allowed = allowed_segments(S, obs)
        from ssvm_torch.segments import spans
        assert all(bool(allowed[0, t, e - t - 1, k]) for t, e, k in spans(gold, torch.tensor([len(row)]))[0])


@pytest.mark.long
def test_hybrid_semimarkov_chunker_trains_token_begin_and_end_attribute_scores(tmp_path):
    """The semi-Markov hybrid (recipes/conll_deep_hybrid_semimarkov_softmax_margin.yaml): an attribute's row holds a
    token, a begin, an end and (the recipe's single_scores) a one-word-segment score per segment label; SparseAdam
    moves all four, and each reaches the segment scores where the docstring says (token: every position of the
    segment, begin: its first, end: its last, single: the one-position segment)."""
    args = ["fit", "--config", str(ROOT / "recipes" / "conll_deep_hybrid_semimarkov_softmax_margin.yaml"),
            "--model.features", "w[0] p[0]", "--model.train_size", "200", "--model.hidden", "16", "--model.word_dim",
            "16", "--model.char_filters", "8", "--model.lr", "0.01", "--trainer.max_epochs", "2",
            "--trainer.default_root_dir", str(tmp_path)]
    assert deep_main(args) == 0
    out = sorted(tmp_path.glob("lightning_logs/version_*"))[-1]
    saved = torch.load(out / "chunker.pt", weights_only=True)
    K = len(saved["segment_labels"])
    rows = saved["state_dict"]["attributes.weight"]
    assert rows.shape[1] == 4 * K and all(float(part.abs().sum()) > 0 for part in rows.split(K, 1))   # + one-word
    assert json.loads((out / "results.json").read_text())["test_f1"] > 0
    from ssvm_torch.deep import ConllChunker
    model = ConllChunker(loss="softmax_margin", tags="bio", constraints=False, structure="semimarkov",
                         features="w[0] p[0]", train_size=200, hidden=16, word_dim=16, char_filters=8)
    model.build()
    tagger = model.tagger.eval()
    batch = model.corpus.fit.batch(torch.arange(2))
    before = tagger.segment_scores(batch)
    ids, offsets = batch["bag"]
    token0 = ids[offsets[0]:offsets[1]]                 # the attributes of the first sentence's first word
    with torch.no_grad():
        tagger.attributes.weight[token0[0], K + 2] += 1.0          # its begin score of label 2
        tagger.attributes.weight[token0[0], 2 * K + 3] += 1.0      # its end score of label 3
    diff = tagger.segment_scores(batch) - before
    moved = diff.abs() > 1e-6
    assert torch.allclose(diff[0, 0, :, 2], torch.ones_like(diff[0, 0, :, 2]), atol=1e-5)   # every segment from 0
    assert bool(moved[0, 0, 0, 3])                       # the one-word segment at 0 also ends there
    assert int(moved.sum()) == diff.shape[2] + 1
    single = ConllChunker(loss="softmax_margin", tags="bio", constraints=False, structure="semimarkov",
                          features="w[0] p[0]", train_size=200, hidden=16, word_dim=16, char_filters=8,
                          single_scores=True)
    single.build()
    tagger = single.tagger.eval()
    assert tagger.attributes.weight.shape[1] == 4 * K
    before = tagger.segment_scores(batch)
    with torch.no_grad():
        tagger.attributes.weight[token0[0], 3 * K + 2] += 1.0      # its one-word-segment score of label 2
    diff = tagger.segment_scores(batch) - before
    assert float(diff[0, 0, 0, 2]) == pytest.approx(1.0, abs=1e-5) and int((diff.abs() > 1e-6).sum()) == 1
    with pytest.raises(SSVMInputError, match="single_scores: expected false unless a semi-Markov hybrid"):
        ConllChunker(structure="chain", features="w[0]", single_scores=True)


@pytest.mark.slow
def test_semimarkov_chunker_resumes_exactly(tmp_path):
    full = run(tmp_path / "full", loss="hinge", epochs=2)
    first = run(tmp_path / "cut", loss="hinge", epochs=1)
    resumed = run(tmp_path / "cut", "--ckpt_path", str(next(first.glob("checkpoints/last.ckpt"))), loss="hinge",
                  epochs=2)
    h = [json.loads((d / "history.json").read_text()) for d in (full, resumed)]
    assert [(r["loss"], r["dev_f1"]) for r in h[0]] == [(r["loss"], r["dev_f1"]) for r in h[1]]


@pytest.mark.parametrize("flag, value, message", [
    ("constraints", "true", "constraints: expected false with structure 'semimarkov'"),
    ("max_segment", "3", "max_segment: expected >= "),
    ("structure", "tree", "structure: expected one of")])
def test_bad_semimarkov_settings_are_refused_by_name(tmp_path, capsys, flag, value, message):
    assert deep_main(["fit", "--config", str(ROOT / "recipes" / "conll_deep_semimarkov_crf.yaml"), "--model.train_size",
                      "50", f"--model.{flag}", value, "--trainer.max_epochs", "1",
                      "--trainer.default_root_dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err, err


@pytest.mark.parametrize("kernels", ["auto", "torch"])
def test_an_empty_batch_decodes_samples_and_scores_nothing(kernels):
    """B = 0: the torch Viterbi's back-trace once took lengths.max() of an empty tensor and raised."""
    layer = SemiMarkovChain(3, 3, kernels=kernels)
    S, lengths = torch.randn(0, 6, 3, 3), torch.zeros(0, dtype=torch.int64)
    assert layer.decode(S, lengths=lengths).shape == (0, 6)
    assert layer.sample(S, lengths=lengths, n=2).shape == (0, 2, 6)
    assert layer.entropy(S, lengths=lengths).shape == (0,)
