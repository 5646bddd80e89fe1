"""Neural CoNLL-2000 chunkers (ssvm_torch.deep.ConllChunker, recipes/conll_deep_*.yaml): BIO <-> BIOES on
every training sentence, dev split = the linear model's, vocabularies from the fit split only, a
tiny run whose loss falls and whose predictions respect the tag constraints, the predictions file
format, an exact resume, the OCR recipes under the subclass-mode CLI, clear errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssvm_torch.constraints import allowed_transitions, bio_to_bioes, bioes_to_bio
from ssvm_torch.data.conll import load_conll2000, read_conll, split_heldout
from ssvm_torch.data.types import data_file
from ssvm_torch.deep.__main__ import main as deep_main
from ssvm_torch.deep.conll_text import UNK, load_chunking, tags_to_bio, word_dropout
from ssvm_torch.errors import SSVMInputError

ROOT = Path(__file__).resolve().parents[1]
TEST_SENTENCES, TEST_TOKENS = 2012, 47377


def valid_iob2(tags: list) -> bool:
    """Every I-X follows B-X or I-X (IOB2, the file's scheme)."""
    prev = "O"
    for t in tags:
        if t.startswith("I-") and prev[2:] != t[2:]:
            return False
        prev = t
    return True


def test_bio_bioes_round_trip_on_every_training_sentence():
    train = read_conll(data_file("conll2000_train.txt.gz"))
    assert len(train) == 8936
    names = sorted({t for s in train for t in bio_to_bioes([x[2] for x in s])})
    masks = allowed_transitions("BIOES", names)
    index = {n: i for i, n in enumerate(names)}
    for s in train:
        bio = [x[2] for x in s]
        bioes = bio_to_bioes(bio)
        assert bioes_to_bio(bioes) == bio
        ids = [index[t] for t in bioes]
        assert bool(masks["start"][ids[0]]) and bool(masks["end"][ids[-1]])
        assert all(bool(masks["transitions"][a, b]) for a, b in zip(ids, ids[1:]))
    assert len(names) == 40                      # 10 chunk types seen with B, I, E and S, 11 with S only, O


def test_dev_split_is_the_select_lam_split_and_nothing_of_dev_or_test_enters_the_vocabulary():
    corpus = load_chunking("bioes", heldout=0.1)
    train = read_conll(data_file("conll2000_train.txt.gz"))
    fit, dev = split_heldout(train, 0.1)
    assert (corpus.fit.n, corpus.dev.n, corpus.test.n) == (8042, 894, TEST_SENTENCES)
    assert corpus.dev.gold == [[t[2] for t in s] for s in dev]
    linear_fit, linear_dev = load_conll2000(features="w[0]", heldout=0.1)
    assert (linear_fit.n, linear_dev.n) == (corpus.fit.n, corpus.dev.n)
    assert int(corpus.dev.lengths.sum()) == sum(len(s) for s in dev)
    fit_words = {t[0].lower() for s in fit for t in s}
    assert set(corpus.vocab.words[2:]) <= fit_words
    unseen = {t[0].lower() for s in read_conll(data_file("conll2000_test.txt.gz")) for t in s} - fit_words
    assert unseen and not unseen & set(corpus.vocab.words)
    # a test-only word is UNK in the test split; the training tags come back as the file's BIO tags
    test_words = [t[0].lower() for s in read_conll(data_file("conll2000_test.txt.gz")) for t in s]
    first = next(i for i, w in enumerate(test_words) if w in unseen)
    assert int(corpus.test.word[first]) == UNK
    names = tags_to_bio(corpus.vocab.tags, corpus.scheme)
    decoded = [names[k] for k in corpus.fit.tag[:int(corpus.fit.offsets[50])].tolist()]
    assert decoded == [t[2] for s in fit[:50] for t in s]


def test_hybrid_bags_are_the_linear_models_attributes_of_each_token():
    corpus = load_chunking("bio", heldout=0.1, features="w[0] p[0]", train_size=300)
    batch = corpus.fit.batch(torch.tensor([3, 0]))
    ids, offsets = batch["bag"]
    assert offsets.numel() == int(batch["mask"].sum())
    counts = torch.diff(torch.cat([offsets, torch.tensor([ids.numel()])]))
    assert bool((counts == 2).all())             # w[0] and p[0] seen in fit: both attributes present
    assert int(ids.max()) < corpus.n_attributes
    with pytest.raises(SSVMInputError, match="features"):
        load_chunking("bio", features="rich-edges", train_size=50)


def run(tmp_path, *extra, recipe="conll_deep_hinge", epochs=4):
    args = ["fit", "--config", str(ROOT / "recipes" / f"{recipe}.yaml"), "--model.train_size", "200",
            "--model.hidden", "16", "--model.word_dim", "16", "--model.char_filters", "8", "--model.lr", "0.01",
            "--trainer.max_epochs", str(epochs), "--trainer.default_root_dir", str(tmp_path), *extra]
    assert deep_main(args) == 0
    return sorted(tmp_path.glob("lightning_logs/version_*"))[-1]


@pytest.mark.long
def test_tiny_run_loss_falls_predictions_respect_the_constraints_and_files_load_weights_only(tmp_path):
    out = run(tmp_path)
    history = json.loads((out / "history.json").read_text())
    losses = [r["loss"] for r in history]
    assert len(losses) == 4 and all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.8 * losses[0]
    raw = torch.load(out / "test_predictions.pt", weights_only=True)
    pred = raw["predictions"]
    test = read_conll(data_file("conll2000_test.txt.gz"))
    assert len(pred) == TEST_SENTENCES and sum(map(len, pred)) == TEST_TOKENS
    assert [len(p) for p in pred] == [len(s) for s in test]
    assert all(isinstance(t, str) for p in pred for t in p)
    assert all(valid_iob2(p) for p in pred)
    from seqeval.metrics import f1_score
    results = json.loads((out / "results.json").read_text())
    assert results["test_f1"] == pytest.approx(100 * f1_score([[t[2] for t in s] for s in test], pred), abs=1e-12)
    assert results["best_epoch"] == max(range(4), key=lambda e: (history[e]["dev_f1"], -e))
    saved = torch.load(out / "chunker.pt", weights_only=True)
    assert "state_dict" in saved and saved["vocab"]["tags"][0] == "B-ADJP"
    config = json.loads((out / "config.json").read_text())
    assert config["loss"] == "hinge" and config["device"] == {"type": "cpu", "torch": torch.__version__}


@pytest.mark.long
def test_hybrid_crf_run_trains_the_attribute_rows(tmp_path):
    out = run(tmp_path, "--model.features", "w[0] p[0]", recipe="conll_deep_hybrid_crf", epochs=2)
    state = torch.load(out / "chunker.pt", weights_only=True)["state_dict"]
    assert float(state["attributes.weight"].abs().sum()) > 0   # zero at start, moved by SparseAdam
    assert json.loads((out / "results.json").read_text())["test_f1"] > 0


@pytest.mark.long
@pytest.mark.parametrize("ema", [[], pytest.param(["--model.ema_decay", "0.9"], marks=pytest.mark.slow)],
                         ids=["plain", "ema"])
def test_resumed_run_ends_where_the_uninterrupted_run_ends(tmp_path, ema):
    full = run(tmp_path / "full", *ema, epochs=2)
    first = run(tmp_path / "cut", *ema, epochs=1)
    ckpt = next(first.glob("checkpoints/last.ckpt"))
    resumed = run(tmp_path / "cut", "--ckpt_path", str(ckpt), *ema, epochs=2)
    h_full = json.loads((full / "history.json").read_text())
    h_res = json.loads((resumed / "history.json").read_text())
    assert [(r["loss"], r["dev_f1"]) for r in h_full] == [(r["loss"], r["dev_f1"]) for r in h_res]
    a = torch.load(full / "test_predictions.pt", weights_only=True)["predictions"]
    b = torch.load(resumed / "test_predictions.pt", weights_only=True)["predictions"]
    assert a == b


def test_ema_weights_are_the_moving_average_of_the_trained_ones_and_are_what_dev_f1_measures():
    from ssvm_torch.deep import ConllChunker
    m = ConllChunker(train_size=64, hidden=8, word_dim=8, char_filters=4, ema_decay=0.5, batch_sentences=16)
    m.build()
    trained = [p for p in m.tagger.parameters()]
    start = [p.detach().clone() for p in trained]
    opt = torch.optim.SGD(m.tagger.dense_parameters(), lr=0.5)
    expect = []
    for step in range(3):                       # plain steps outside Lightning: the average's own rule
        opt.zero_grad()
        m.batch_loss(torch.arange(16 * step, 16 * step + 16)).backward()
        opt.step()
        m.ema.update_parameters(m.tagger)
        # AveragedModel starts the average at the weights after the first step
        now = [p.detach().clone() for p in trained]
        expect = now if step == 0 else [0.5 * e + 0.5 * p for e, p in zip(expect, now)]
    averaged = list(m.evaluated().parameters())
    assert m.evaluated() is not m.tagger
    moved = [i for i, (a, b) in enumerate(zip(start, trained)) if not torch.equal(a, b)]
    assert moved                                # the steps changed weights, so the check below can fail
    for e, a in zip(expect, averaged):
        torch.testing.assert_close(a, e)
    assert not any(p.requires_grad for p in averaged)
    dev = m.corpus.dev                          # predict() decodes with the network it is given
    averaged_pred, trained_pred = m.predict(dev, m.evaluated()), m.predict(dev)
    assert averaged_pred != trained_pred                 # so the two checks below tell them apart
    trained_state = {k: v.clone() for k, v in m.tagger.state_dict().items()}
    m.tagger.load_state_dict(m.evaluated().state_dict())
    assert m.predict(dev) == averaged_pred
    m.tagger.load_state_dict(trained_state)
    assert m.predict(dev) == trained_pred


def test_ocr_recipes_still_run_the_ocr_module_under_subclass_mode(capsys):
    for recipe in ("ocr_deep_hinge", "ocr_deep_alternating"):
        with pytest.raises(SystemExit) as done:
            deep_main(["fit", "--config", str(ROOT / "recipes" / f"{recipe}.yaml"), "--print_config"])
        assert done.value.code == 0
        printed = capsys.readouterr().out
        assert "class_path: ssvm_torch.deep.DeepChainModule" in printed
    assert "method: alternating" in printed


def test_bad_chunker_settings_are_refused_by_name(tmp_path, capsys):
    assert deep_main(["fit", "--config", str(ROOT / "recipes" / "conll_deep_hinge.yaml"), "--model.loss", "svm",
                      "--trainer.default_root_dir", str(tmp_path)]) == 2
    assert "loss" in capsys.readouterr().err
    assert deep_main(["fit", "--config", str(ROOT / "recipes" / "conll_deep_hinge.yaml"), "--model.train_size", "1",
                      "--trainer.default_root_dir", str(tmp_path)]) == 2
    assert "train_size" in capsys.readouterr().err
    # the audit's case: max_epochs 0 decoded the test set with untrained weights and wrote "dev_f1": -Infinity
    assert deep_main(["fit", "--config", str(ROOT / "recipes" / "conll_deep_hinge.yaml"), "--model.train_size", "50",
                      "--trainer.max_epochs", "0", "--trainer.default_root_dir", str(tmp_path / "zero")]) == 2
    err = capsys.readouterr().err
    assert "trainer.max_epochs: expected at least 1" in err and len(err.strip().splitlines()) == 1
    assert not list((tmp_path / "zero").rglob("results.json")) and not list((tmp_path / "zero").rglob("*.pt"))


@pytest.mark.long
def test_hidden_labels_are_the_seeds_positions_unobserved_in_the_chain_loss(tmp_path):
    """hide_fraction 0.5: round(n / 2) of the fit split's tokens get label -1, the positions a function of
    hide_seed alone (the same for every loss and run seed), and the batch loss is the chain layer's partial
    loss over them (a hidden position constrains nothing); a tiny hinge run records the counts."""
    from ssvm_torch.data.partial import hidden_positions
    from ssvm_torch.deep import ConllChunker
    built = {}
    for loss, seed in (("hinge", 0), ("crf", 3)):
        m = ConllChunker(loss=loss, train_size=60, hidden=8, word_dim=8, char_filters=4, seed=seed, hide_fraction=0.5,
                         hide_seed=7)
        m.build()
        built[loss] = m
    full = ConllChunker(loss="hinge", train_size=60, hidden=8, word_dim=8, char_filters=4)
    full.build()
    n = len(full.corpus.fit.tag)
    hidden = hidden_positions(n, 0.5, 7)
    assert int(hidden.sum()) == round(n / 2) and built["hinge"].hidden_labels == round(n / 2)
    for m in built.values():
        assert torch.equal(m.corpus.fit.tag, torch.where(hidden, -1, full.corpus.fit.tag))
    m = built["hinge"]
    idx = torch.arange(8)
    batch = m.corpus.fit.batch(idx)
    assert bool((batch["tag"][batch["mask"]] == -1).any())

    def seeded():
        m.gen.manual_seed(0)
        torch.manual_seed(0)
    seeded()
    got = m.batch_loss(idx)
    seeded()
    em = m.tagger.emissions(batch, word_dropout(batch["word"], m.word_counts, m.hparams.word_dropout, m.gen))
    want = m.tagger.chain(em, torch.where(batch["mask"], batch["tag"], 0), batch["mask"], reduction="mean")
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    every = m.tagger.chain(em, torch.where(batch["mask"], full.corpus.fit.batch(idx)["tag"], 0), batch["mask"],
                           reduction="mean")
    assert float((every - want).abs()) > 1e-6          # the hidden labels changed the loss
    out = run(tmp_path, "--model.hide_fraction", "0.5", "--model.hide_seed", "7", epochs=1)
    results = json.loads((out / "results.json").read_text())
    assert results["hidden_positions"] == round(results["fit_positions"] / 2) and results["test_f1"] > 0
    assert json.loads((out / "config.json").read_text())["hide_fraction"] == 0.5


@pytest.mark.parametrize("flag, value, message", [
    ("hide_fraction", "1.0", "hide_fraction: expected a fraction in [0, 1)"),
    ("hide_seed", "-1", "hide_seed: expected an int >= 0")])
def test_bad_hiding_settings_are_refused_by_name(tmp_path, capsys, flag, value, message):
    assert deep_main(["fit", "--config", str(ROOT / "recipes" / "conll_deep_hinge.yaml"), f"--model.{flag}", value,
                      "--trainer.default_root_dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


# slow tier (~15 s: three starts of the shell script, one training a chunker in a fresh interpreter); the runs it
# starts are each recipe's, trained and resumed in-process by the tests above
@pytest.mark.slow
def test_the_run_list_script_trains_archives_and_then_skips_a_run(tmp_path):
    """recipes/train_runs.sh (what ud_deep_all.sh and partial50_all.sh run): a tiny partial-annotation chunker
    run is trained into RUNS, its four files archived under <PREFIX><head>_s<seed>, and a second start skips it."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "FAMILY": "conll_deep_hybrid_", "HEADS": "hinge", "SEEDS": "0", "PREFIX": "partial50_",
           "ARCHIVE": "x", "ARCHIVE_DIR": str(tmp_path / "archive"), "RUNS": str(tmp_path / "runs"), "THREADS": "1",
           "EXTRA": "--model.hide_fraction 0.5 --model.train_size 60 --model.hidden 8 --model.word_dim 8 "
                    "--model.char_filters 4 --model.features w[0]", "TRAINER_ARGS": "--trainer.max_epochs 1",
           "PY": sys.executable}        # PY: this interpreter (the device machine's way: no venv there)
    script = str(ROOT / "recipes" / "train_runs.sh")
    first = subprocess.run(["bash", script], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    done = tmp_path / "archive" / "partial50_hinge_s0"
    assert sorted(p.name for p in done.iterdir()) == ["config.json", "history.json", "results.json",
                                                     "test_predictions.pt"]
    config = json.loads((done / "config.json").read_text())
    assert config["hide_fraction"] == 0.5 and config["seed"] == 0 and config["loss"] == "hinge"
    assert len(json.loads((done / "history.json").read_text())) == 1           # TRAINER_ARGS reached the trainer
    again = subprocess.run(["bash", script], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "partial50_hinge_s0: done" in again.stdout
    missing = subprocess.run(["bash", script], env={**env, "HEADS": "svm"}, capture_output=True, text=True)
    assert missing.returncode == 2 and "conll_deep_hybrid_svm.yaml: no such recipe" in missing.stderr


@pytest.mark.parametrize("structure", ["chain", "semimarkov"])
def test_mbr_decode_is_the_layers_mbr_and_an_unknown_decode_is_refused(structure):
    """decode="mbr" predicts what the head's decode(..., mbr=True) gives on the same scores (written back as BIO tags
    of well-formed chunks), and differs from decode="max" on some dev sentence of an untrained tiny model (so the
    option reaches the layer); decode="argmax" is refused by name."""
    from ssvm_torch.deep import ConllChunker
    from ssvm_torch.segments import tags_from_segments
    kw = dict(train_size=64, hidden=8, word_dim=8, char_filters=4, structure=structure,
              constraints=structure == "chain", tags="bio")
    with pytest.raises(SSVMInputError, match="decode"):
        ConllChunker(decode="argmax", **kw)
    m = ConllChunker(decode="mbr", **kw)
    m.build()
    dev = m.corpus.dev
    mbr = m.predict(dev)
    m.hparams.decode = "max"
    assert mbr != m.predict(dev)
    assert all(valid_iob2(s) for s in mbr)
    m.tagger.eval()
    idx = torch.argsort(dev.lengths, stable=True)         # predict()'s one batch (dev.n < 256)
    with torch.no_grad():
        batch = dev.batch(idx)
        if structure == "chain":
            tags = m.tagger.chain.decode(m.tagger.emissions(batch), batch["mask"], mbr=True)
            names = tags_to_bio(m.corpus.vocab.tags, m.corpus.scheme)
            want = [[names[k] for k in row[:int(n)].tolist()] for row, n in zip(tags, dev.lengths[idx])]
        else:
            lengths = batch["mask"].sum(1)
            segments = m.tagger.chain.decode(m.tagger.segment_scores(batch), lengths=lengths, mbr=True)
            want = tags_from_segments(segments, lengths, m.segment_labels)
    assert [mbr[i] for i in idx.tolist()] == want
