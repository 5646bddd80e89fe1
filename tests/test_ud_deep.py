"""The neural UD parser (ssvm_torch.deep.UDParser, recipes/ud_deep_*.yaml): batches with the root at
position 0, tiny runs of every head whose loss falls, the predictions file (every test sentence in file
order, one head and one relation per word, well-formed trees, UAS / LAS recomputed from it), the carried
tree-layer gradient, an exact resume, clear errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssvm_torch.data.ud import load_ud_ewt, universal
from ssvm_torch.deep.__main__ import main as deep_main
from ssvm_torch.deep.ud_decode import attachment_scores
from ssvm_torch.deep.ud_text import PAD, ROOT, UNK, load_ud_parsing
from ssvm_torch.trees.checks import tree_faults

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
TINY = ["--model.train_size", "120", "--model.hidden", "24", "--model.word_dim", "16", "--model.char_filters", "8",
        "--model.upos_dim", "8", "--model.arc_dim", "24", "--model.rel_dim", "8", "--model.layers", "1",
        "--model.lr", "0.005", "--model.threads", "1", "--model.dev_size", "200"]   # dev: decoded every epoch


def run(tmp_path, loss="crf", *extra, epochs=3):
    args = ["fit", "--config", str(RECIPES / f"ud_deep_{loss}.yaml"), *TINY, "--trainer.max_epochs", str(epochs),
            "--trainer.default_root_dir", str(tmp_path), *extra]
    assert deep_main(args) == 0
    return sorted(tmp_path.glob("lightning_logs/version_*"))[-1]


def test_batches_put_the_root_at_position_0_and_keep_the_gold_trees():
    corpus = load_ud_parsing(train_size=50)
    split = corpus.train
    b = split.batch([3, 0, 7])
    lengths = split.lengths[torch.tensor([3, 0, 7])]
    N = int(lengths.max()) + 1
    assert b["mask"].shape == (3, N) and not bool(b["mask"][:, 0].any())
    assert b["mask"].sum(1).tolist() == lengths.tolist()
    assert bool((b["word"][:, 0] == ROOT).all()) and bool((b["upos"][:, 0] == ROOT).all())
    assert bool((b["word"][~b["mask"]][b["heads"][~b["mask"]] >= 0] == PAD).all())
    bank = load_ud_ewt("train")
    for row, i in enumerate([3, 0, 7]):
        n = int(lengths[row])
        sent = bank.sentence(i)
        assert b["heads"][row, 1:n + 1].tolist() == [w[4] for w in sent]
        assert [corpus.vocab.rels[k] for k in b["rels"][row, 1:n + 1].tolist()] == [universal(w[5]) for w in sent]
        assert bool((b["heads"][row, n + 1:] == -1).all()) and int(b["heads"][row, 0]) == -1
    assert bool((tree_faults(b["heads"], lengths, False, False) == 0).all())
    assert int(corpus.train.projective.sum()) <= corpus.train.n


@pytest.mark.long
def test_a_batchs_characters_are_whole_forms_and_grow_with_their_characters_not_the_longest():
    """Every form of a batch is on consecutive rows of char_rows' layout (no character cut, none invented), and
    the character CNN gives it, values and gradients, what it gives the form padded to the longest; a form of
    20,000 characters (a blob in raw text) adds its own 313 rows rather than widening every form's row to
    20,000 columns."""
    from ssvm_torch.data.ud import Treebank
    from ssvm_torch.deep.conll_tagger import CharCNN
    from ssvm_torch.deep.ud_text import CHAR_CONTEXT, CHAR_ROW, make_split
    import numpy as np
    corpus = load_ud_parsing(train_size=50)
    blob = "ab" * 10_000
    bank = load_ud_ewt("dev").subset(range(40))
    forms = list(bank.forms)
    forms[5] = blob
    bank = Treebank(bank.name, forms, bank.lemmas, bank.upos, bank.xpos, bank.deprels, bank.heads, bank.offsets,
                    np.arange(len(forms), dtype=np.int64))
    split = make_split("dev", bank, corpus.vocab)
    b = split.batch(list(range(40)))
    chars, rows = b["chars"], b["char_rows"]
    distinct = sorted(set(forms))
    assert rows.shape == (len(distinct) + 1,) and int(rows.sum()) == chars.shape[0]
    assert chars.shape[1] == CHAR_ROW + 2 * CHAR_CONTEXT and chars.shape[0] == len(distinct) + 1 + 20_000 // CHAR_ROW
    index = {c: i for i, c in enumerate(corpus.vocab.chars)}
    owner = torch.repeat_interleave(torch.arange(len(rows)), rows)
    for u, form in [(0, None)] + list(enumerate(distinct, 1)):
        middle = chars[owner == u][:, CHAR_CONTEXT:-CHAR_CONTEXT].reshape(-1)
        want = [ROOT] if form is None else [index.get(c, 1) for c in form]
        assert middle[middle != PAD].tolist() == want
    net = CharCNN(len(corpus.vocab.chars), 6, 7)
    padded = torch.full((len(rows), max(len(f) for f in distinct)), PAD)
    padded[0, 0] = ROOT
    for u, form in enumerate(distinct, 1):
        padded[u, :len(form)] = torch.tensor([index.get(c, 1) for c in form])
    got, want = net(chars, rows), net(padded)
    assert torch.equal(got, want)
    g1 = torch.autograd.grad(got.sum(), list(net.parameters()))
    g2 = torch.autograd.grad(net(padded).sum(), list(net.parameters()))
    # the same sums in another order (and a tie between rows split evenly rather than given to one): float noise
    assert all(float((a - c).abs().max()) <= 1e-5 * float(c.abs().max()) for a, c in zip(g1, g2))


@pytest.mark.parametrize("loss", ["crf", "local"])
def test_tiny_run_loss_falls_and_the_predictions_file_is_whole(tmp_path, loss):
    out = run(tmp_path, loss)
    history = json.loads((out / "history.json").read_text())
    losses = [r["loss"] for r in history]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert all(0.0 <= r["tree_layer_share"] < 1.0 for r in history)
    pred = torch.load(out / "test_predictions.pt", weights_only=True)
    test = load_ud_ewt("test")
    assert len(pred["heads"]) == len(pred["labels"]) == test.n == 2077
    assert [len(h) for h in pred["heads"]] == test.lengths.tolist() == [len(r) for r in pred["labels"]]
    assert all(isinstance(r, str) for row in pred["labels"] for r in row)
    lengths = torch.tensor(test.lengths.tolist())
    padded = torch.full((test.n, int(lengths.max()) + 1), -1, dtype=torch.int64)
    for i, h in enumerate(pred["heads"]):
        padded[i, 1:len(h) + 1] = torch.tensor(h)
    assert bool((tree_faults(padded, lengths, False, True) == 0).all())      # projective single-root trees
    gold_heads = [[w[4] for w in test.sentence(i)] for i in range(test.n)]
    gold_rels = [[universal(w[5]) for w in test.sentence(i)] for i in range(test.n)]
    uas, las = attachment_scores(gold_heads, gold_rels, pred["heads"], pred["labels"])
    results = json.loads((out / "results.json").read_text())
    assert results["test_uas"] == pytest.approx(uas, abs=1e-12) and results["test_las"] == pytest.approx(las, abs=1e-12)
    assert las <= uas and uas > 10.0
    config = json.loads((out / "config.json").read_text())
    assert config["loss"] == loss and config["projective"] is True and config["upos_input"] is True
    assert config["device"] == {"type": "cpu", "torch": torch.__version__}     # a GPU run says so (issue 74)
    assert config["trainer_max_epochs"] == 3                 # the cap, which bench_ud_deep.py tells variants by
    if loss == "local":
        assert "dev_uas_argmax" in history[-1] and 0.0 <= results["test_argmax_not_tree_pct"] <= 100.0


def test_the_carried_tree_gradient_is_the_layer_gradient():
    """head_loss times the tree layer on a detached copy and carries its gradient into the network: value
    and gradient must be the layer's own."""
    from ssvm_torch.deep import UDParser
    from ssvm_torch.nn import DependencyTree
    for loss in ("hinge", "crf", "softmax_margin"):
        module = UDParser(loss=loss, train_size=30)
        module.corpus = load_ud_parsing(train_size=30)
        batch = module.corpus.train.batch(torch.arange(8))
        batch["tree_ok"] = module.corpus.train.projective[:8]
        g = torch.Generator().manual_seed(0)
        arcs = torch.randn(batch["mask"].shape + (batch["mask"].shape[1],), generator=g, dtype=torch.float64,
                           requires_grad=True)
        per = module.head_loss(arcs, batch)
        (got,) = torch.autograd.grad(per.sum(), arcs)
        ok = batch["tree_ok"]
        arcs2 = arcs.detach().clone().requires_grad_(True)
        want = DependencyTree(projective=True, loss=loss)(arcs2[ok], batch["heads"][ok], batch["mask"][ok],
                                                          reduction="none")
        (want_g,) = torch.autograd.grad(want.sum(), arcs2)
        torch.testing.assert_close(per[ok], want, rtol=1e-12, atol=1e-12)
        assert bool((per[~ok] == 0).all())
        torch.testing.assert_close(got, want_g, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("first_child", [False, True], ids=["adjacent", "first-child"])
def test_the_second_order_head_carries_the_layers_gradients(first_child):
    """order 2: head_loss carries the second-order layer's value and its gradients for both the arc and the
    sibling scores (with first_child, the layer's first-child parts)."""
    from ssvm_torch.deep import UDParser
    from ssvm_torch.nn import DependencyTree
    for loss in ("hinge", "crf", "softmax_margin"):
        module = UDParser(loss=loss, train_size=30, order=2, sib_dim=8, first_child=first_child)
        assert module.tree.first_child is first_child
        module.corpus = load_ud_parsing(train_size=30)
        batch = module.corpus.train.batch(torch.arange(8))
        batch["tree_ok"] = module.corpus.train.projective[:8]
        B, N = batch["mask"].shape
        g = torch.Generator().manual_seed(1)
        arcs = torch.randn(B, N, N, generator=g, dtype=torch.float64, requires_grad=True)
        sibs = torch.randn(B, N, N, N, generator=g, dtype=torch.float64, requires_grad=True)
        per = module.head_loss(arcs, batch, sibs)
        got_a, got_s = torch.autograd.grad(per.sum(), (arcs, sibs))
        ok = batch["tree_ok"]
        a2, s2 = arcs.detach().clone().requires_grad_(True), sibs.detach().clone().requires_grad_(True)
        want = DependencyTree(projective=True, loss=loss, first_child=first_child)(
            a2[ok], batch["heads"][ok], batch["mask"][ok], reduction="none", sib_scores=s2[ok])
        want_a, want_s = torch.autograd.grad(want.sum(), (a2, s2))
        torch.testing.assert_close(per[ok], want, rtol=1e-12, atol=1e-12)
        assert bool((per[~ok] == 0).all())
        torch.testing.assert_close(got_a, want_a, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got_s, want_s, rtol=1e-12, atol=1e-12)


def test_scorer_states_reads_the_tags_it_is_given_and_decodes_the_same_ones_itself():
    """With tag_feed, BiaffineParser.scorer_states decodes the tagger's Viterbi tags unless the caller passes
    them (decode_split, which outputs them too): the same states either way, and other tags give other states
    (ROOT at the root and PAD past the words whatever is passed there)."""
    from ssvm_torch.deep.biaffine import BiaffineParser
    from ssvm_torch.deep.ud_tagging import TagHead
    from ssvm_torch.deep.ud_text import SPECIALS
    torch.manual_seed(4)
    tagger = TagHead(12, 10 - len(SPECIALS), 5, 0.0, "softmax_margin").double()
    net = BiaffineParser(50, 20, 10, 5, word_dim=8, char_dim=4, char_filters=4, upos_dim=4, hidden=6, layers=1,
                         arc_dim=6, rel_dim=4, upos_input=False, tag_head=tagger, tag_feed_dim=4).double().eval()
    lengths = torch.tensor([3, 7, 1])
    N = int(lengths.max()) + 1
    mask = (torch.arange(N)[None, :] <= lengths[:, None]) & (torch.arange(N)[None, :] > 0)
    states = torch.randn(len(lengths), N, 12, dtype=torch.float64)
    tags = tagger.decode(states, mask)
    own = net.scorer_states(states, mask)
    torch.testing.assert_close(net.scorer_states(states, mask, tags), own, rtol=0, atol=0)
    other = torch.where(mask, (tags - len(SPECIALS) + 1) % (10 - len(SPECIALS)) + len(SPECIALS), tags)
    moved = net.scorer_states(states, mask, other)
    assert not torch.equal(moved[mask], own[mask])
    torch.testing.assert_close(moved[~mask], own[~mask], rtol=0, atol=0)
    torch.testing.assert_close(moved[..., :12], states, rtol=0, atol=0)


def test_an_xpos_head_is_a_second_tagger_that_leaves_the_other_initial_weights_alone():
    """build_network with xpos: an XPOS TagHead over the training sentences' XPOS tags, made after the rest, so that
    every other initial weight of a seed is the one it has without the head; a batch carries each word's XPOS id
    (ROOT at the root, PAD past the words)."""
    from ssvm_torch.deep.ud_parser import UDParser, build_network
    m = UDParser(train_size=40, tags="predicted", upos_input=False, tag_feed=True, xpos=True, threads=1)
    m.build()
    vocab, hp = m.corpus.vocab, dict(m.hparams)
    n_xpos = len(set(m.corpus.train.xpos_names))
    assert vocab.xpos[3:] == sorted(set(m.corpus.train.xpos_names)) and m.parser.xpos_tagger.out.out_features == n_xpos
    torch.manual_seed(0)
    with_head = build_network(hp, vocab).state_dict()
    torch.manual_seed(0)
    without = build_network({**hp, "xpos": False}, vocab).state_dict()
    assert set(with_head) - set(without) == {k for k in with_head if k.startswith("xpos_tagger.")} != set()
    assert all(torch.equal(v, with_head[k]) for k, v in without.items())
    batch = m.corpus.train.batch([0, 1])
    n0 = int(m.corpus.train.lengths[0])
    names = [vocab.xpos[i] for i in batch["xpos"][0, 1:n0 + 1].tolist()]
    assert names == m.corpus.train.xpos_names[:n0] and bool((batch["xpos"][:, 0] == ROOT).all())
    past = torch.arange(batch["xpos"].shape[1])[None, :] > batch["lengths"][:, None]
    assert bool((batch["xpos"][past] == PAD).all()) and bool((batch["xpos"][batch["mask"]] != UNK).all())


def test_relation_scores_are_each_labels_bilinear_form_at_the_given_head():
    """rel_scores[b, m, l] = [d'_m; 1]^T W_l [h'_{heads[b, m]}; 1] (module docstring of biaffine.py), checked label by
    label against the plain formula in float64; a head -1 (root, padding) reads head 0."""
    from ssvm_torch.deep.biaffine import BiaffineParser
    torch.manual_seed(5)
    net = BiaffineParser(30, 10, 8, 6, word_dim=4, char_dim=3, char_filters=3, upos_dim=3, hidden=5, layers=1,
                         arc_dim=4, rel_dim=3).double().eval()
    torch.nn.init.normal_(net.rel_W)
    states = torch.randn(2, 5, 10, dtype=torch.float64)
    heads = torch.tensor([[-1, 0, 3, 1, 3], [-1, 2, 0, -1, -1]])
    got = net.rel_scores(states, heads)
    dep = torch.cat([net.rel_dep(states), torch.ones(2, 5, 1, dtype=torch.float64)], -1)
    head = torch.cat([net.rel_head(states), torch.ones(2, 5, 1, dtype=torch.float64)], -1)
    for b in range(2):
        for m in range(5):
            for rel in range(6):
                want = dep[b, m] @ net.rel_W[rel] @ head[b, max(int(heads[b, m]), 0)]
                torch.testing.assert_close(got[b, m, rel], want, rtol=1e-12, atol=1e-12)
    every = net.rel_scores_all(states)                  # [b, m, h, l]: the same form at every candidate head
    for h in range(5):
        torch.testing.assert_close(every[:, :, h], net.rel_scores(states, torch.full((2, 5), h)), rtol=1e-12,
                                   atol=1e-12)


def test_tag_noise_replaces_that_share_of_the_words_tags_by_the_taggers_other_likely_tags():
    """confusable_tags (training's tag noise, issue 72): rate 0 returns the tags and draws nothing; otherwise a
    word's tag is replaced with probability rate (never the root's or the padding's), always by another tag, drawn
    from softmax(emissions) renormalized without the replaced tag."""
    from ssvm_torch.deep.ud_tagging import confusable_tags
    from ssvm_torch.deep.ud_text import SPECIALS
    B, N, K = 400, 30, 4
    lengths = torch.randint(1, N, (B,), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(N)[None, :] <= lengths[:, None]) & (torch.arange(N)[None, :] > 0)
    tags = torch.where(mask, torch.full((B, N), len(SPECIALS)), torch.full((B, N), -1))      # chain tag 0 everywhere
    emissions = torch.tensor([5.0, 2.0, 1.0, 0.0]).log().expand(B, N, K).clone()
    emissions[..., 3] = -1e9                                                              # tag 3: (almost) never
    state = torch.random.get_rng_state()
    assert confusable_tags(tags, emissions, mask, 0.0) is tags
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(1)
    every = confusable_tags(tags, emissions, mask, 0.999999)
    assert torch.equal(every[~mask], tags[~mask]) and bool((every[mask] != tags[mask]).all())
    share = torch.bincount(every[mask] - len(SPECIALS), minlength=K).double() / int(mask.sum())
    torch.testing.assert_close(share, torch.tensor([0.0, 2 / 3, 1 / 3, 0.0], dtype=torch.float64), rtol=0, atol=0.02)
    some = confusable_tags(tags, emissions, mask, 0.1)
    changed = float((some[mask] != tags[mask]).double().mean())
    assert abs(changed - 0.1) < 0.01 and torch.equal(some[~mask], tags[~mask])


def test_the_triaffine_per_sentence_equals_supars_padded_formula_and_padding_is_never_read():
    """BiaffineParser.sib_scores computes each sentence on its own root + words: equal there to SuPar's
    Triaffine over the padded batch (einsum('bzk,ikj->bzij'), then einsum('bxi,bzij,byj->bzxy') read as
    [b, m, h, s]), 0 past it, and the tree layer's losses and gradients are the same whatever the padding
    holds."""
    from ssvm_torch.deep.biaffine import BiaffineParser
    from ssvm_torch.nn import DependencyTree
    torch.manual_seed(3)
    net = BiaffineParser(50, 20, 10, 5, word_dim=8, char_dim=4, char_filters=4, upos_dim=4, hidden=6, layers=1,
                         arc_dim=6, rel_dim=4, sib_dim=5).double().eval()
    with torch.no_grad():
        net.sib_W.normal_()
    lengths = torch.tensor([3, 7, 1, 5])
    B, N = len(lengths), int(lengths.max()) + 1
    states = torch.randn(B, N, 12, dtype=torch.float64)
    got = net.sib_scores(states, lengths)
    sib, dep, head = net.sib_s(states), net.sib_d(states), net.sib_h(states)
    ones = sib.new_ones(B, N, 1)
    sib, dep = torch.cat([sib, ones], -1), torch.cat([dep, ones], -1)
    want = torch.einsum("bsi,bhij,bmj->bmhs", sib, torch.einsum("bhk,ikj->bhij", head, net.sib_W), dep)
    inside = torch.arange(N)[None, :] <= lengths[:, None]
    cube = inside[:, :, None, None] & inside[:, None, :, None] & inside[:, None, None, :]
    torch.testing.assert_close(got[cube], want[cube], rtol=1e-12, atol=1e-12)
    assert bool((got[~cube] == 0).all())
    torch.testing.assert_close(net.sib_scores(states), want, rtol=1e-12, atol=1e-12)     # no lengths: all N
    mask = inside.clone()
    mask[:, 0] = False
    heads = torch.zeros(B, N, dtype=torch.long).masked_fill(~mask, -1)      # every word on the root: projective
    arcs = torch.randn(B, N, N, dtype=torch.float64)
    for loss in ("hinge", "crf", "softmax_margin"):
        values = []
        for sibs in (got, torch.where(cube, got, torch.randn_like(got) * 100)):
            a, s = arcs.clone().requires_grad_(True), sibs.clone().requires_grad_(True)
            v = DependencyTree(projective=True, multiroot=True, loss=loss)(a, heads, mask, reduction="none",
                                                                           sib_scores=s)
            ga, gs = torch.autograd.grad(v.sum(), (a, s))
            values.append((v, ga, gs[cube]))
        for x, y in zip(*values):
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


@pytest.mark.long
@pytest.mark.parametrize("recipe", ["2o_softmax_margin", "2o_fc_softmax_margin"])
def test_a_tiny_second_order_run_writes_trees_and_parses_back(tmp_path, capsys, recipe):
    """recipes/ud_deep_2o_softmax_margin.yaml (and its first-child twin), tiny: the sibling scorer trains (its
    weights move from their zero start), config.json says order 2 (and first_child), the test predictions are
    projective single-root trees scored as results.json says, and ud_parse on its parser.pt (its tree layer with
    the same parts) gives the same heads on the test file."""
    from ssvm_torch.deep.ud_parse import load_parser, main as parse_main
    out = run(tmp_path, recipe, "--model.sib_dim", "8", epochs=2)
    config = json.loads((out / "config.json").read_text())
    assert config["order"] == 2 and config["sib_dim"] == 8 and config["loss"] == "softmax_margin"
    assert config["first_child"] is (recipe == "2o_fc_softmax_margin")
    parser = load_parser(out / "parser.pt")
    assert parser.network.sib_dim == 8 and float(parser.network.sib_W.detach().abs().max()) > 0
    assert parser.tree.first_child is config["first_child"]
    pred = torch.load(out / "test_predictions.pt", weights_only=True)
    test = load_ud_ewt("test")
    lengths = torch.tensor(test.lengths.tolist())
    padded = torch.full((test.n, int(lengths.max()) + 1), -1, dtype=torch.int64)
    for i, h in enumerate(pred["heads"]):
        padded[i, 1:len(h) + 1] = torch.tensor(h)
    assert bool((tree_faults(padded, lengths, False, True) == 0).all())
    gold_heads = [[w[4] for w in test.sentence(i)] for i in range(test.n)]
    gold_rels = [[universal(w[5]) for w in test.sentence(i)] for i in range(test.n)]
    uas, las = attachment_scores(gold_heads, gold_rels, pred["heads"], pred["labels"])
    results = json.loads((out / "results.json").read_text())
    assert results["test_uas"] == pytest.approx(uas, abs=1e-12) and results["test_las"] == pytest.approx(las, abs=1e-12)
    from ssvm_torch.data.types import data_file
    from ssvm_torch.data.ud import UD_EWT
    assert parse_main(["--model", str(out / "parser.pt"), "--input", str(data_file(UD_EWT["test"])),
                       "--output", str(tmp_path / "test.conllu")]) == 0
    assert f"UAS {uas:.2f}, LAS {las:.2f}" in capsys.readouterr().out


@pytest.mark.long
@pytest.mark.parametrize("batching", [(), ("--model.length_pool", "2"), ("--model.lr_decay", "0.5")],
                         ids=["random", "length_pool", "lr_decay"])
def test_resumed_run_ends_where_the_uninterrupted_run_ends(tmp_path, batching):
    """Random batches and batches of similar-length sentences (length_pool) alike: the epoch's draw depends on the
    seed and the epoch alone; a decaying learning rate's schedule is in the checkpoint."""
    full = run(tmp_path / "full", "hinge", *batching, epochs=3)
    first = run(tmp_path / "cut", "hinge", *batching, epochs=2)
    ckpt = next(first.glob("checkpoints/last.ckpt"))
    resumed = run(tmp_path / "cut", "hinge", *batching, "--ckpt_path", str(ckpt), epochs=3)
    h_full = json.loads((full / "history.json").read_text())
    h_res = json.loads((resumed / "history.json").read_text())
    assert [(r["loss"], r["dev_uas"], r["dev_las"]) for r in h_full] == [(r["loss"], r["dev_uas"], r["dev_las"])
                                                                         for r in h_res]
    a = torch.load(full / "test_predictions.pt", weights_only=True)
    b = torch.load(resumed / "test_predictions.pt", weights_only=True)
    assert a == b
    if "--model.lr_decay" in batching:          # 120 sentences, 32 a step: 12 steps in 3 epochs
        ckpt = torch.load(next(full.glob("checkpoints/last.ckpt")), weights_only=True, map_location="cpu")
        assert ckpt["lr_schedulers"][0]["last_epoch"] == 12
        assert ckpt["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.005 * 0.5 ** (12 / 5000))


@pytest.mark.long
def test_weight_averaging_selects_the_average_and_resumes_exactly(tmp_path, capsys):
    """ema_decay > 0: the moving average is updated after every step and carried by the checkpoint, dev selects it
    and parser.pt holds it (not the trained weights), each epoch also records the trained weights' dev figures, a
    resumed run ends where the uninterrupted one ends, and a checkpoint without an average is refused by name."""
    from ssvm_torch.deep.ud_parser import UDParser
    from ssvm_torch.errors import SSVMInputError
    ema = ("--model.ema_decay", "0.9")
    one = run(tmp_path / "one", "hinge", *ema, epochs=1)           # one epoch: its weights are the selected ones
    state = torch.load(next(one.glob("checkpoints/last.ckpt")), weights_only=True, map_location="cpu")["state_dict"]
    assert int(state["averaged.n_averaged"]) == 4                  # 120 sentences, 32 a step
    saved = torch.load(one / "parser.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(v, state[f"averaged.module.{k}"]) for k, v in saved.items())
    assert not torch.equal(saved["lstm.weight_ih_l0"], state["parser.lstm.weight_ih_l0"])
    full = run(tmp_path / "full", "hinge", *ema, epochs=3)
    first = run(tmp_path / "cut", "hinge", *ema, epochs=2)
    resumed = run(tmp_path / "cut", "hinge", *ema, "--ckpt_path", str(next(first.glob("checkpoints/last.ckpt"))),
                  epochs=3)
    keys = ("loss", "dev_uas", "dev_las", "dev_uas_trained", "dev_las_trained")
    h_full, h_res = (json.loads((d / "history.json").read_text()) for d in (full, resumed))
    assert [[r[k] for k in keys] for r in h_full] == [[r[k] for k in keys] for r in h_res]
    assert torch.load(full / "test_predictions.pt", weights_only=True) == torch.load(resumed / "test_predictions.pt",
                                                                                      weights_only=True)
    plain = run(tmp_path / "plain", "hinge", epochs=1)
    capsys.readouterr()
    assert deep_main(["fit", "--config", str(RECIPES / "ud_deep_hinge.yaml"), *TINY, "--trainer.max_epochs", "2",
                      "--trainer.default_root_dir", str(tmp_path / "plain"), *ema, "--ckpt_path",
                      str(next(plain.glob("checkpoints/last.ckpt")))]) == 2
    assert "ema_decay" in capsys.readouterr().err
    m = UDParser(train_size=30, ema_decay=0.9, threads=1)
    m.build()
    with pytest.raises(SSVMInputError, match="ema_decay: expected the checkpoint's: it holds no averaged weights"):
        m.on_load_checkpoint({"state_dict": {"parser.arc_U": torch.zeros(1)}})


@pytest.mark.long
def test_restarts_start_from_the_best_weights_at_the_lower_rate_and_a_stopped_run_resumes_into_them(tmp_path):
    """lr_restarts: the epoch after patience runs out starts from the best dev weights at lr x factor^k (the k-th
    restart) until the restarts are spent; a run that stopped by patience without restarts, resumed with them, ends
    where the run that had them from the start ends (the decisions are read back from the history)."""
    setting = ("--model.ema_decay", "0.9", "--model.patience", "1", "--model.lr", "0.05")
    restarts = ("--model.lr_restarts", "2", "--model.restart_factor", "0.5")
    full = run(tmp_path / "full", "hinge", *setting, *restarts, epochs=12)
    history = json.loads((full / "history.json").read_text())
    began = [r["epoch"] for r in history if r.get("restart")]
    assert began, "the setting is chosen so that dev stops improving before the cap"
    for k, e in enumerate(began, 1):
        assert history[e - 1]["best_epoch"] < e - 1                      # the epoch before spent the patience
        assert history[e]["lr"] == pytest.approx(0.05 * 0.5 ** k)
    assert all(r["lr"] == 0.05 for r in history[:began[0]])
    if len(history) < 12:                                                 # stopped: restarts spent, patience too
        assert len(began) == 2 and history[-1]["best_epoch"] < history[-1]["epoch"]
    stopped = run(tmp_path / "cut", "hinge", *setting, epochs=12)
    assert len(json.loads((stopped / "history.json").read_text())) == began[0]
    resumed = run(tmp_path / "cut", "hinge", *setting, *restarts, "--ckpt_path",
                  str(next(stopped.glob("checkpoints/last.ckpt"))), epochs=12)
    keys = ("loss", "dev_las", "dev_las_trained", "best_epoch", "lr")
    assert [[r.get(k) for k in keys] for r in history] == [[r.get(k) for k in keys] for r in
                                                          json.loads((resumed / "history.json").read_text())]
    assert torch.load(full / "test_predictions.pt", weights_only=True) == torch.load(resumed / "test_predictions.pt",
                                                                                      weights_only=True)


def test_a_run_decoding_by_expected_las_selects_and_tests_with_it(tmp_path):
    """decode mbr in training: dev and test are decoded by expected LAS (the figures equal a re-decode of the
    selected weights by ud_decode with it), the run's parser.pt says so, and the test trees are well formed."""
    from ssvm_torch.deep.ud_decode import decode_split, split_scores
    from ssvm_torch.deep.ud_parse import load_parser
    out = run(tmp_path, "hinge", "--model.decode", "mbr", epochs=1)
    results = json.loads((out / "results.json").read_text())
    parser = load_parser(out / "parser.pt")
    assert parser.decode == "mbr" and json.loads((out / "config.json").read_text())["decode"] == "mbr"
    corpus = load_ud_parsing(train_size=120, dev_size=200)
    for name in ("dev", "test"):
        pred = decode_split(parser.network, parser.tree, getattr(corpus, name), parser.vocab.rels, "cpu",
                            decode="mbr")
        assert split_scores(getattr(corpus, name), pred)["las"] == pytest.approx(results[f"{name}_las"], abs=1e-12)
    pred = torch.load(out / "test_predictions.pt", weights_only=True)
    lengths = torch.tensor([len(h) for h in pred["heads"]])
    padded = torch.full((len(lengths), int(lengths.max()) + 1), -1, dtype=torch.int64)
    for i, h in enumerate(pred["heads"]):
        padded[i, 1:len(h) + 1] = torch.tensor(h)
    assert bool((tree_faults(padded, lengths, False, True) == 0).all())


def test_a_restart_loads_the_best_weights_clears_adam_and_sets_the_rate():
    from ssvm_torch.deep.plateau import restart_due, restart_from
    net, avg = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    adam = torch.optim.Adam(net.parameters(), lr=1.0)
    net(torch.ones(1, 3)).sum().backward()
    adam.step()
    best = {k: torch.full_like(v, 7.0) for k, v in net.state_dict().items()}
    restart_from(best, [net, avg], adam, 0.125)
    assert all(torch.equal(m.state_dict()[k], best[k]) for m in (net, avg) for k in best)
    assert len(adam.state) == 0 and adam.param_groups[0]["lr"] == 0.125
    hist = [{"epoch": e} for e in range(6)]                                # best epoch 2, patience 3
    assert [restart_due(e, 2, hist[:e], 3, 1) for e in range(7)] == [False] * 6 + [True]
    hist.append({"epoch": 6, "restart": True})                            # its window: epochs 6, 7, 8
    assert [restart_due(e, 2, hist, 3, 2) for e in (7, 8, 9)] == [False, False, True]
    assert not restart_due(9, 2, hist, 3, 1)                              # restarts spent


def test_dev_size_keeps_the_first_dev_sentences_and_the_whole_test_split():
    whole, cut = load_ud_parsing(train_size=30), load_ud_parsing(train_size=30, dev_size=5)
    assert cut.dev.n == 5 and cut.test.n == whole.test.n == 2077
    assert torch.equal(cut.dev.lengths, whole.dev.lengths[:5])
    assert torch.equal(cut.dev.batch([0, 4])["heads"], whole.dev.batch([0, 4])["heads"])


@pytest.mark.long
def test_bad_parser_settings_are_refused_by_name(tmp_path, capsys):
    base = ["fit", "--config", str(RECIPES / "ud_deep_crf.yaml"), *TINY, "--trainer.default_root_dir", str(tmp_path)]
    for extra, text in ((["--model.loss", "svm"], "loss: expected one of"),
                        (["--model.train_size", "1"], "train_size: expected an int in [2,"),
                        (["--model.dev_size", "0"], "dev_size: expected an int in [1, 2001]"),
                        (["--trainer.max_epochs", "0"], "trainer.max_epochs: expected at least 1"),
                        (["--trainer.max_steps", "0"], "trainer.max_steps: expected at least 1"),
                        (["--model.order", "3"], "order: expected 1 (arc-factored) or 2"),
                        (["--model.length_pool", "-1"], "length_pool: expected an int >= 0"),
                        (["--model.lr_decay", "0"], "lr_decay: expected a number in (0, 1]"),
                        (["--model.lr_restarts", "-1"], "lr_restarts: expected an int >= 0"),
                        (["--model.restart_factor", "1"], "restart_factor: expected a number in (0, 1)"),
                        (["--model.lr_restarts", "1", "--model.lr_decay", "0.5"],
                         "lr_restarts: expected 0 with lr_decay"),
                        (["--model.order", "2", "--model.loss", "local"], "loss: expected a tree loss"),
                        (["--model.order", "2", "--model.projective", "false"], "projective: expected true with order 2"),
                        (["--model.order", "2", "--model.sib_dim", "0"], "sib_dim: expected an int >= 1"),
                        (["--model.first_child", "true"], "first_child: expected true or false, and false unless "
                                                          "order is 2"),
                        (["--model.tag_feed", "true"], "tag_feed: expected false unless tags is predicted"),
                        (["--model.xpos", "true"], "xpos: expected true or false, and false unless tags is predicted"),
                        (["--model.ema_decay", "1"], "ema_decay: expected a number in [0, 1)"),
                        (["--model.tag_noise", "0.1"], "tag_noise: expected a probability in [0, 1) with tag_feed, 0 "
                                                       "without")):
        assert deep_main(base + extra) == 2
        err = capsys.readouterr().err
        assert text in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.long
def test_the_results_script_recomputes_the_archive_and_bootstraps_pairs(tmp_path):
    """benchmarks/bench_ud_deep.py on an archive of one tiny run filed under two heads: the recomputed
    UAS / LAS equal results.json, a system against itself differs by 0 in every draw (over the seeds both
    heads have), a training option (weight averaging, tag noise) files a head of its own paired with the plain
    one, and a results.json that disagrees with its predictions, or a run whose configuration differs from its
    head's other seeds, is refused."""
    import importlib.util
    import shutil
    spec = importlib.util.spec_from_file_location("bench_ud_deep", RECIPES.parent / "benchmarks" / "bench_ud_deep.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = run(tmp_path / "run", "crf", epochs=1)
    archive = tmp_path / "archive"
    for name, head, hide, seed in (("crf_s0", "crf", 0.0, 0), ("hinge_s0", "hinge", 0.0, 0),
                                   ("hinge_s1", "hinge", 0.0, 1), ("partial50_crf_s0", "crf", 0.5, 0),
                                   ("partial50_hinge_s0", "hinge", 0.5, 0)):
        d = archive / name
        d.mkdir(parents=True)
        for name in ("results.json", "history.json", "test_predictions.pt"):
            shutil.copy(out / name, d / name)
        config = json.loads((out / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**config, "loss": head, "hide_fraction": hide, "seed": seed}))
    report = bench.report(archive, draws=50)
    results = json.loads((out / "results.json").read_text())
    # a run with hidden heads is its own row, never averaged into the full runs of its loss
    assert [h["head"] for h in report["heads"]] == ["crf", "hinge", "partial50_crf", "partial50_hinge"]
    assert report["heads"][0]["test_uas"]["mean"] == pytest.approx(results["test_uas"], abs=1e-12)
    pair, partial_pair, *partial = report["bootstrap"]
    assert (pair["a"], pair["b"], pair["seeds"]) == ("hinge", "crf", [0])      # hinge's seed 1 has no crf twin
    assert pair["uas"]["observed_diff"] == 0.0 and pair["uas"]["ci95"] == [0.0, 0.0]
    # a margin loss against the CRF with the same positions hidden (issue 73's "margin at least as good")
    assert (partial_pair["a"], partial_pair["b"], partial_pair["seeds"]) == ("partial50_hinge", "partial50_crf", [0])
    # each partial run against the full-annotation run of the same loss and seed
    assert [(b["a"], b["b"]) for b in partial] == [("partial50_crf_s0", "crf_s0"), ("partial50_hinge_s0", "hinge_s0")]
    assert "| crf | 1 | words + gold UPOS |" in bench.markdown(report)
    # the per-word argmax decode of the same scores is carried from results.json into the table
    assert report["heads"][0]["test_uas_argmax"]["mean"] == pytest.approx(results["test_uas_argmax"], abs=1e-12)
    assert f"{results['test_uas_argmax']:.2f} ({results['test_argmax_not_tree_pct']:.1f}%) |" in bench.markdown(report)
    assert "seeds 0, 50 draws)" in bench.markdown(report)
    # a variant archived beside a head's seeds (a wider relation MLP) would be averaged into them: refused by name
    variant = archive / "rel100_hinge_s2"
    shutil.copytree(archive / "hinge_s1", variant)
    config = json.loads((variant / "config.json").read_text())
    (variant / "config.json").write_text(json.dumps({**config, "seed": 2, "rel_dim": config["rel_dim"] + 1}))
    with pytest.raises(SystemExit, match=r"rel100_hinge_s2: filed under hinge beside hinge_s0, but its rel_dim is"):
        bench.report(archive, draws=10)
    shutil.rmtree(variant)
    # a training option is a head of its own ("ema_noise3_hinge"), paired with the head trained without it
    option = archive / "ema_noise3_hinge_s0"
    shutil.copytree(archive / "hinge_s0", option)
    config = json.loads((option / "config.json").read_text())
    (option / "config.json").write_text(json.dumps({**config, "ema_decay": 0.999, "tag_noise": 0.03}))
    report = bench.report(archive, draws=10)
    assert "ema_noise3_hinge" in [h["head"] for h in report["heads"]]
    (last,) = [b for b in report["bootstrap"] if b["a"] == "ema_noise3_hinge"]
    assert (last["b"], last["seeds"], last["las"]["observed_diff"]) == ("hinge", [0], 0.0)
    # pooled batches and a decaying learning rate too (an archive before them has neither key: no clash to catch it)
    schedule = archive / "pool20_lrdecay75_hinge_s0"
    shutil.copytree(archive / "hinge_s0", schedule)
    (schedule / "config.json").write_text(json.dumps({**config, "length_pool": 20, "lr_decay": 0.75}))
    (last,) = [b for b in bench.report(archive, draws=10)["bootstrap"] if b["a"] == "pool20_lrdecay75_hinge"]
    assert (last["b"], last["seeds"]) == ("hinge", [0])
    shutil.rmtree(schedule)
    # a schedule on top of model options: against the plain head and against the same options on the recipe's
    # schedule (the comparison that says what the schedule itself did)
    both = archive / "ema_noise3_pool20_lrdecay75_hinge_s0"
    shutil.copytree(archive / "hinge_s0", both)
    (both / "config.json").write_text(json.dumps({**config, "ema_decay": 0.999, "tag_noise": 0.03, "length_pool": 20,
                                                  "lr_decay": 0.75}))
    report = bench.report(archive, draws=10)
    assert [b["b"] for b in report["bootstrap"] if b["a"] == "ema_noise3_pool20_lrdecay75_hinge"] == \
        ["hinge", "ema_noise3_hinge"]
    shutil.rmtree(both)
    # restarts at a lower rate on top of pools: also against the same pools without them
    pooled = {**config, "ema_decay": 0.999, "tag_noise": 0.03, "length_pool": 20}
    for name, extra in (("ema_noise3_pool20_hinge", {}), ("ema_noise3_pool20_restart10_hinge",
                                                          {"lr_restarts": 1, "restart_factor": 0.1})):
        shutil.copytree(archive / "hinge_s0", archive / f"{name}_s0")
        (archive / f"{name}_s0" / "config.json").write_text(json.dumps({**pooled, **extra}))
    report = bench.report(archive, draws=10)
    assert [b["b"] for b in report["bootstrap"] if b["a"] == "ema_noise3_pool20_restart10_hinge"] == \
        ["hinge", "ema_noise3_hinge", "ema_noise3_pool20_hinge"]
    # a re-decoded run (benchmarks/redecode_ud_run.py) is paired with the same run decoded as trained, only
    shutil.copytree(archive / "ema_noise3_pool20_restart10_hinge_s0", archive / "mbr_restart_s0")
    (archive / "mbr_restart_s0" / "config.json").write_text(json.dumps(
        {**pooled, "lr_restarts": 1, "restart_factor": 0.1, "decode": "mbr", "decoded_from": "x"}))
    report = bench.report(archive, draws=10)
    assert [b["b"] for b in report["bootstrap"] if b["a"] == "mbr_ema_noise3_pool20_restart10_hinge"] == \
        ["ema_noise3_pool20_restart10_hinge"]
    for name in ("ema_noise3_pool20_hinge", "ema_noise3_pool20_restart10_hinge", "mbr_restart"):
        shutil.rmtree(archive / f"{name}_s0")
    shutil.rmtree(option)
    (archive / "hinge_s0" / "results.json").write_text(json.dumps({**results, "test_uas": results["test_uas"] + 1}))
    with pytest.raises(SystemExit, match="UAS / LAS recomputed"):
        bench.report(archive, draws=10)


def test_hidden_heads_are_the_seeds_words_unobserved_in_the_tree_and_relation_losses(tmp_path):
    """hide_fraction 0.5: round(n / 2) training words lose head and relation (-1), the same words for every
    loss; head_loss is the tree layer's partial loss (a hidden head constrains nothing), the relation
    cross-entropy skips the hidden words, the projective set stays the complete trees'; a tiny run records
    the counts."""
    from ssvm_torch.data.partial import hidden_positions
    from ssvm_torch.deep import UDParser
    from ssvm_torch.nn import DependencyTree
    full = UDParser(loss="hinge", train_size=30)
    full.build()
    n = len(full.corpus.train.head)
    hidden = hidden_positions(n, 0.5, 5)
    for loss in ("hinge", "crf"):
        m = UDParser(loss=loss, train_size=30, hide_fraction=0.5, hide_seed=5)
        m.build()
        assert m.hidden_heads == round(n / 2)
        assert torch.equal(m.corpus.train.head, torch.where(hidden, -1, full.corpus.train.head))
        assert torch.equal(m.corpus.train.rel, torch.where(hidden, -1, full.corpus.train.rel))
        assert torch.equal(m.corpus.train.projective, full.corpus.train.projective)
    batch = m.corpus.train.batch(torch.arange(8))
    batch["tree_ok"] = m.corpus.train.projective[:8]
    assert bool((batch["heads"][batch["mask"]] == -1).any())
    g = torch.Generator().manual_seed(2)
    arcs = torch.randn(*batch["mask"].shape, batch["mask"].shape[1], generator=g, dtype=torch.float64)
    ok = batch["tree_ok"]
    want = DependencyTree(projective=True, loss="crf")(arcs[ok], batch["heads"][ok], batch["mask"][ok],
                                                        reduction="none")
    torch.testing.assert_close(m.head_loss(arcs, batch)[ok], want, rtol=1e-12, atol=1e-12)
    every = full.corpus.train.batch(torch.arange(8))["heads"]
    assert float((DependencyTree(projective=True, loss="crf")(arcs[ok], every[ok], batch["mask"][ok],
                                                               reduction="none") - want).abs().max()) > 1e-6
    out = run(tmp_path, "hinge", "--model.hide_fraction", "0.5", "--model.hide_seed", "5", epochs=1)
    results = json.loads((out / "results.json").read_text())
    assert results["hidden_heads"] == round(results["train_words"] / 2) and results["test_uas"] > 0


@pytest.mark.parametrize("module", ["UDParser", "ConllChunker"])
def test_a_modules_threads_caps_torch_and_numba_alike(module):
    """``threads`` is the cores a neural run may use: torch's pool and numba's parallel kernels (the chain
    layer's rows) both take it, so two recipes run with ``--model.threads 1`` share 2 cores without
    oversubscribing them (numba's own default is every core)."""
    import numba

    import ssvm_torch.deep as deep
    m = getattr(deep, module)(loss="hinge", train_size=30, threads=1)
    m.build()
    assert torch.get_num_threads() == 1 and numba.get_num_threads() == 1
