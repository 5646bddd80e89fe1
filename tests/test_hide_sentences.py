"""Whole sentences hidden (``hide_labels(..., sentences=True)``, ``ssvm-train --hide-labels F --hide-sentences``):
round(F n) of the n training sentences lose every label (span, head), the others keep all of theirs, the draw is
the seed's, CCCP descends on it, and the command records the sentences and refuses a checkpoint of the other
setting by name."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import assert_descends, random_chain_data, random_dependency_data, random_span_data
from ssvm_torch.cli.train import main
from ssvm_torch.data.partial import hidden_positions
from ssvm_torch.latent import hidden_parts, hide_heads, hide_labels, train_latent
from ssvm_torch.models.chain import ChainModel
from ssvm_torch.solvers import SolverConfig


def _whole(observed: torch.Tensor, offsets: torch.Tensor) -> list:
    """Per sentence: True (every part hidden), False (every part observed); a mixed sentence fails."""
    out = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        seen = observed[a:b]
        assert bool(seen.all()) or not bool(seen.any()), f"sentence {a}:{b} is partly hidden"
        out.append(not bool(seen.any()))
    return out


@pytest.mark.parametrize("kind", ["chain", "spans", "heads"])
def test_whole_sentences_are_hidden_by_the_seed(kind):
    rng = np.random.default_rng(3)
    if kind == "chain":
        data = random_chain_data(rng, 20, 3, 2)
        hidden, offsets = hide_labels(data, 0.4, 7, sentences=True), data.offsets
    elif kind == "spans":
        data = random_span_data(rng, 20, 6, 2, lmin=1, lmax=4)
        hidden, offsets = hide_labels(data, 0.4, 7, sentences=True), data.span_offsets
    else:
        data = random_dependency_data(rng, 20, 6)
        hidden, offsets = hide_heads(data, 0.4, 7, sentences=True), data.offsets
    gone = _whole(hidden.observed.cpu(), offsets.cpu())
    assert sum(gone) == round(0.4 * 20)
    assert gone == hidden_positions(20, 0.4, 7, ("hide_labels", "hide_seed")).tolist()     # the seed's draw over n
    assert torch.equal(~hidden.observed.cpu(), hidden_parts(int(offsets[-1]), 0.4, 7, offsets))
    again = hide_labels(data, 0.4, 7, sentences=True) if kind != "heads" else hide_heads(data, 0.4, 7, sentences=True)
    assert torch.equal(again.observed, hidden.observed)


def test_cccp_descends_with_whole_sentences_hidden():
    data = hide_labels(random_chain_data(np.random.default_rng(5), 16, 3, 3, tmin=2, tmax=5), 0.5, 1, sentences=True)
    model = ChainModel.for_data(data)
    w, records = train_latent(model, data, 0.1, SolverConfig(passes=20, gap_check=5, step="pairwise", cache=True),
                              max_outer=4)
    assert_descends(records)
    assert records[-1]["objective"] < records[0]["objective"]


def test_ssvm_train_hide_sentences_records_them_and_refuses_the_other_setting(tmp_path, capsys):
    args = ["--dataset", "conll2000", "--train-size", "30", "--hide-labels", "0.5", "--hide-seed", "2", "--passes", "4",
            "--gap-check", "2", "--latent-outer", "1", "--quiet", "--checkpoint"]
    out = tmp_path / "run"
    assert main([*args, "--hide-sentences", "--out", str(out)]) == 0
    hidden = json.loads((out / "hidden.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["hide_sentences"] is True and len(hidden["hidden_sentences"]) == 15
    assert hidden["hidden_sentences"] == torch.nonzero(hidden_positions(30, 0.5, 2, ("a", "b")))[:, 0].tolist()
    assert len(hidden["hidden"]) == config["hidden_positions"] < hidden["positions"]
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "other"), "--resume", str(out / "checkpoint.pt")]) == 2
    assert "hide_sentences" in capsys.readouterr().err
    assert main(["--dataset", "ocr-small", "--passes", "2", "--hide-sentences", "--out", str(tmp_path / "r")]) == 2
    assert "hide_sentences: trains the latent SSVM, with --hide-labels" in capsys.readouterr().err


def test_whole_trees_lose_their_labels_beside_labeled_ones():
    """--hide-bracket-labels U with --hide-sentences: every label of round(U n) trees hidden (their brackets kept),
    the other trees keep every label; drawn by the seed's second stream, apart from the trees hidden whole."""
    data = random_span_data(np.random.default_rng(4), 20, 6, 2, lmin=1, lmax=4)
    only_labels = hide_labels(data, 0.0, 3, unlabeled=0.6, sentences=True)
    assert bool(only_labels.observed.all())
    unlabeled = _whole(only_labels.labeled.cpu(), data.span_offsets.cpu())
    assert sum(unlabeled) == 12
    assert unlabeled == hidden_positions(20, 0.6, 3, ("a", "b"), stream=1).tolist()
    both = hide_labels(data, 0.25, 3, unlabeled=0.6, sentences=True)
    assert _whole(both.observed.cpu(), data.span_offsets.cpu()) == hidden_positions(20, 0.25, 3, ("a", "b")).tolist()
    seen = both.observed
    assert torch.equal(both.labeled[seen], only_labels.labeled[seen])      # the label draw ignores the tree draw
