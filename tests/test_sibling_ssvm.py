"""The second-order (adjacent-sibling) SSVM beyond the conformance suite (which holds its oracle, gap, blocks,
checkpoints and every solver to brute force): gold trees outside the projective space, the compiled scores
against the torch ones, the compiled feature keys against the readable feature strings on UD English-EWT, the
part pool's moves, refusals by name, ssvm-train's ``--trees second-order``, and the latent SSVM from partial heads
against enumeration; the first-child parts' decoders against brute force."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from conftest import random_sibling_data
from ssvm_torch import SolverConfig, make_store
from ssvm_torch.cli.train import main as train_main
from ssvm_torch.data.sibling_features import SiblingTemplate
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.models import SiblingDependencyModel
from ssvm_torch.solvers.make import make_solver
from tree_reference import all_trees, check_gold_outside_the_space, sibling_tree_scores


@pytest.mark.parametrize("multiroot", [False, True], ids=["single-root", "multi-root"])
def test_first_child_decoders_and_fold_equal_brute_force(multiroot):
    """McDonald & Pereira 2006's first-child parts (SB[m, h, h] scores a head's nearest dependent on each side):
    the compiled decoder reading them (first_child=True) and the torch decoder on the folded scores
    (fold_first_child) return a best projective tree and its score by enumeration (n <= 6, -inf arcs and
    sibling pairs among the scores, rounded scores with ties), and sibling_score of the folded scores is every tree's
    score with its first-child parts."""
    from ssvm_torch.models.sibling_dependency import fold_first_child
    from ssvm_torch.trees import sibling_ops
    from ssvm_torch.trees.numba_sibling_best import sibling_best
    from ssvm_torch.trees.sibling import sibling_score
    rng = np.random.default_rng(11)
    for trial in range(60):
        n = int(rng.integers(1, 7))
        S = rng.normal(size=(n + 1, n + 1))
        SB = rng.normal(size=(n + 1, n + 1, n + 1))
        if trial % 3 == 0:                                  # some forbidden arcs and sibling pairs
            S[rng.random(S.shape) < 0.15] = -np.inf
            SB[rng.random(SB.shape) < 0.15] = -np.inf
            SB[:, np.arange(n + 1), np.arange(n + 1)] = rng.normal(size=(n + 1, n + 1))
        if trial % 5 == 0:                                  # ties
            S, SB = np.round(S), np.round(SB)
        trees = all_trees(n, True, multiroot)
        scores = sibling_tree_scores(S, SB, trees, first_child=True)
        heads = np.empty(n + 1, dtype=np.int64)
        best = sibling_best(S, SB, n, multiroot, heads, True)
        if not np.isfinite(scores.max()):
            assert best == -np.inf
            continue
        assert best == pytest.approx(scores.max(), abs=1e-9)
        assert sibling_tree_scores(S, SB, heads[None], first_child=True)[0] == pytest.approx(scores.max(), abs=1e-9)
        St, SBt = fold_first_child(torch.tensor(S)[None], torch.tensor(SB)[None])
        lengths = torch.tensor([n])
        T = len(trees)
        got = sibling_score(St.expand(T, -1, -1), SBt.expand(T, -1, -1, -1), torch.tensor(trees), lengths.expand(T))
        finite = np.isfinite(scores)
        assert np.array_equal(np.isfinite(got.numpy()), finite)
        assert np.allclose(got.numpy()[finite], scores[finite], atol=1e-9)
        th, ts = sibling_ops.best(St, SBt, lengths, multiroot, "torch")
        assert float(ts[0]) == pytest.approx(scores.max(), abs=1e-9)
        assert sibling_tree_scores(S, SB, th[:, :n + 1].numpy(), first_child=True)[0] == pytest.approx(scores.max(),
                                                                                                      abs=1e-9)


def test_gold_outside_the_space_keeps_the_hinge_nonnegative_and_the_gap_exact():
    """Some gold trees non-projective: a block's labelings are the projective trees plus its gold tree, so H_i >= 0
    and the store's gap equals primal - dual computed by brute force over that set (phi dense, the model's)."""
    rng = np.random.default_rng(0)
    data = random_sibling_data(rng, 10, 15, lmin=3, lmax=5, projective_only=False)
    model = SiblingDependencyModel.for_data(data)
    assert bool((~model.gold_in_space(data)).any()), "the random golds must include non-projective trees"
    check_gold_outside_the_space(model, data)


@pytest.mark.parametrize("table_max", [None, 0])
def test_compiled_scores_equal_the_torch_scores(table_max):
    """The compiled sibling scores (dense tables, or hashes with table_max 0; the long sentences through
    the head items' cubes, the short ones through the dictionary) are the torch path's on every sibling part,
    and the two decoders return the same trees."""
    rng = np.random.default_rng(3)
    data = random_sibling_data(rng, 12, 20, lmin=1, lmax=11, projective_only=False, table_max=table_max)
    model = SiblingDependencyModel.for_data(data)
    w = torch.tensor(rng.normal(size=model.d))
    idx = torch.arange(data.n)
    S, SB = model.scores(w, data, idx)
    St, SBt = model.with_kernels("torch").scores(w, data, idx)
    read = torch.isfinite(SBt)
    assert torch.allclose(S, St, atol=1e-12) and int(read.sum()) > 100
    assert torch.allclose(SB[read], SBt[read], atol=1e-12)
    assert torch.equal(model.predict_flat(w, data), model.with_kernels("torch").predict_flat(w, data))


def gold_sibling_strings(template, tb):
    """(offsets, lengths, sentences, gold) of a treebank: its sentences as (form, upos, xpos, lemma) tuples and the
    item strings (SiblingTemplate.part_strings) of its gold sibling parts, the first-child parts (s = h) where the
    template has them: what the dictionary is built from."""
    from ssvm_torch.trees.sibling import adjacent_siblings
    offsets = torch.from_numpy(tb.offsets.copy())
    lengths = offsets[1:] - offsets[:-1]
    sentences = [[(tb.forms[k], tb.upos[k], tb.xpos[k], tb.lemmas[k]) for k in range(int(offsets[i]),
                                                                                    int(offsets[i + 1]))]
                 for i in range(tb.n)]
    heads = torch.full((tb.n, int(lengths.max()) + 1), -1, dtype=torch.int64)
    for i in range(tb.n):
        heads[i, 1:int(lengths[i]) + 1] = torch.from_numpy(tb.heads[int(offsets[i]):int(offsets[i + 1])].copy())
    sibs = adjacent_siblings(heads, lengths)
    gold = set()
    for i in range(tb.n):
        for m in range(1, int(lengths[i]) + 1):
            if int(sibs[i, m]) > 0 or template.first_child:                  # 0: a first-child part
                s = int(sibs[i, m]) if int(sibs[i, m]) > 0 else int(heads[i, m])
                gold.update(template.part_strings(sentences[i], int(heads[i, m]), s, m))
    return offsets, lengths, sentences, gold


@pytest.mark.long
def test_ewt_keys_agree_with_the_feature_strings():
    """On UD English-EWT's first 40 training sentences (the parts of ten of them): an item of a sibling part has a
    feature (compiled lookup; the torch helper agrees on a seventh of the parts) exactly when its readable feature
    string (SiblingTemplate.part_strings) is an item string of some gold sibling part of those sentences (the
    dictionary's definition), and one string is always one id, one id one string."""
    from ssvm_torch.data.arc_features import code_columns
    from ssvm_torch.data.sibling_features import MCDONALD_PEREIRA, build_designs, sibling_part_ids
    from ssvm_torch.data.sibling_keys import sibling_part_ids as compiled_ids
    from ssvm_torch.data.types import data_file
    from ssvm_torch.data.ud import UD_EWT, read_conllu
    tb = read_conllu(data_file(UD_EWT["train"])).subset(range(40))
    codes, radix = code_columns([tb])
    (design,) = build_designs(MCDONALD_PEREIRA, codes, radix, tb.offsets, tb.heads, 7, 1)
    offsets, lengths, sentences, gold = gold_sibling_strings(MCDONALD_PEREIRA, tb)
    key_ptr = design.key_ptr.numpy()
    host, buf = design.host(), np.empty(len(MCDONALD_PEREIRA.items), dtype=np.int64)
    string_of, id_of, hits = {}, {}, 0
    short = [i for i in range(40) if int(lengths[i]) <= 20][:10]     # ten sentences of <= 20 words: n^3 parts each
    for i in short:
        sent, start, n = sentences[i], int(offsets[i]), int(lengths[i])
        for h in range(n + 1):
            for m in range(1, n + 1):
                if h == m:
                    continue
                for s in [h, *range(min(h, m) + 1, max(h, m))]:
                    strings = MCDONALD_PEREIRA.part_strings(sent, h, s, m)
                    k = compiled_ids(*host[:4], *host[5:10], start, h, s, m, buf)
                    ids = buf[:k].tolist()
                    if (h + s + m) % 7 == 0:                    # the torch helper (phi's) agrees
                        assert sibling_part_ids(design, start, h, s, m) == ids
                    items = {int(np.searchsorted(key_ptr, f - design.offset, side="right")) - 1: f for f in ids}
                    for t, text in enumerate(strings):
                        assert (t in items) == (text in gold), text
                        if t in items:
                            hits += 1
                            assert string_of.setdefault(items[t], text) == text
                            assert id_of.setdefault(text, items[t]) == items[t]
    assert hits > 1000 and len(id_of) > 200


_SIB_PARTS = [f"{who}{c}" for who in "hsm" for c in "wfpul"] + ["dir", "sdist"]


@st.composite
def sibling_templates(draw):
    """A template of 1-4 distinct items of 1-3 distinct parts, each with a sibling or a modifier part; first-child
    parts or not."""
    items = set()
    for _ in range(draw(st.integers(1, 4))):
        parts = draw(st.lists(st.sampled_from(_SIB_PARTS), min_size=1, max_size=3, unique=True))
        if not any(p[0] in "sm" and p != "sdist" for p in parts):
            parts.append(draw(st.sampled_from([p for p in _SIB_PARTS if p[0] in "sm" and p != "sdist"])))
        items.add("|".join(parts))
    return SiblingTemplate.parse(sorted(items), name="drawn", first_child=draw(st.booleans()))


@settings(max_examples=10, deadline=None)
@given(template=sibling_templates(), start=st.integers(0, 500), dense=st.booleans(), seed=st.integers(0, 99))
# sentences 89-100 have no two dependents on a side: an item without features (the torch path read w past its end)
@example(template=SiblingTemplate.parse(["hw|sw"], name="drawn", first_child=False), start=89, dense=False, seed=0)
def test_drawn_sibling_templates_score_every_part_as_the_torch_lookup(template, start, dense, seed):
    """Drawn templates on a drawn stretch of EWT: the dictionary holds one feature per distinct item string of the
    gold sibling parts (SiblingTemplate.part_strings), and the compiled scores of every part of a sentence (dense
    tables or, with table_max 0, hashes only; a sentence's small cube of an item's weights where it is used) equal
    the torch path's sorted-key lookup, -inf where a part does not exist; on the shortest sentence of three words
    or more each part's score is the sum of the weights of its strings that the dictionary holds, under one
    string <-> id map."""
    from ssvm_torch.data.arc_features import code_columns
    from ssvm_torch.data.sibling_features import (TABLE_MAX, build_designs, sibling_ids, sibling_part_ids,
                                                  sibling_scores_torch)
    from ssvm_torch.data.sibling_keys import fill_sibling_scores
    from ssvm_torch.data.ud import load_ud_ewt
    tb = load_ud_ewt("train").subset(range(start, start + 12))
    codes, radix = code_columns([tb])
    (design,) = build_designs(template, codes, radix, tb.offsets, tb.heads, 7, 1,
                              table_max=TABLE_MAX if dense else 0)
    offsets, lengths, sentences, gold = gold_sibling_strings(template, tb)
    assert design.n_features == len(gold)
    w = torch.from_numpy(np.random.default_rng(seed).normal(size=7 + design.n_features))
    host = design.host()
    id_of, string_of = {}, {}
    # the strings' check reads n^3 / 3 parts: the shortest sentence of three words or more
    shortest = int(torch.argmin(torch.where(lengths[:6] >= 3, lengths[:6], 10 ** 6)))
    for i in range(6):
        n = int(lengths[i])
        compiled = np.full((n + 1, n + 1, n + 1), -np.inf)
        fill_sibling_scores(*host, int(offsets[i]), n, w.numpy(), compiled)
        reference = sibling_scores_torch(design, w, offsets[i:i + 1], lengths[i:i + 1], n + 1)[0]
        assert torch.equal(torch.isinf(reference), torch.from_numpy(np.isinf(compiled)))
        assert torch.allclose(torch.from_numpy(compiled), reference, rtol=1e-12, atol=1e-12)
        if i != shortest:
            continue
        every_part, their_ids = [], []
        for h in range(n + 1):
            for m in range(1, n + 1):
                between = list(range(min(h, m) + 1, max(h, m)))
                for s in ([h] if template.first_child and h != m else []) + (between if h != m else []):
                    known = [t for t in template.part_strings(sentences[i], h, s, m) if t in gold]
                    ids = sibling_part_ids(design, int(offsets[i]), h, s, m)       # items in order, as the strings
                    every_part.append((h, s, m))
                    their_ids.append(ids)
                    assert len(ids) == len(known)
                    for text, f in zip(known, ids):
                        assert id_of.setdefault(text, f) == f and string_of.setdefault(f, text) == text
                    assert compiled[m, h, s] == pytest.approx(float(w[ids].sum()), rel=1e-12, abs=1e-12)
        if not every_part:                      # no sentence of three words or more in the stretch
            continue
        # every part at once (the model's phi and add_psi): each part's ids, in item order
        H, S, M = (torch.tensor(v) for v in zip(*every_part))
        part, ids = sibling_ids(design, torch.full_like(H, int(offsets[i])), H, S, M)
        assert [ids[part == p].tolist() for p in range(len(every_part))] == their_ids


def test_phi_counts_each_trees_sibling_parts_as_the_part_by_part_lookup():
    """The second-order model's phi (and through it psi, add_psi) on a batch of EWT sentences, gold and other trees:
    its sibling block counts, per row, the ids sibling_part_ids gives each part of the tree one at a time."""
    from ssvm_torch.data.sibling_features import sibling_part_ids
    from ssvm_torch.tasks import load_task
    from ssvm_torch.trees.sibling import adjacent_siblings
    task = load_task("ud-ewt", train_size=40, features="basic", trees="second-order")
    model, data = task.model, task.train
    idx = torch.arange(1, 40, 4)
    gold = model.gt_batch(data, idx)
    w = torch.from_numpy(np.random.default_rng(0).normal(size=model.d))
    for trees in (gold, model.predict(w, data, idx)):
        phi = model.phi(data, idx, trees)
        arcs = super(SiblingDependencyModel, model).phi(data, idx, trees)          # the first-order block
        lengths = data.lengths[idx]
        heads = torch.where(torch.arange(trees.shape[1])[None, :] <= lengths[:, None], trees, -1)
        heads[:, 0] = -1
        sib = adjacent_siblings(heads, lengths)
        expected = torch.zeros_like(phi)
        for b, i in enumerate(idx.tolist()):
            for m in range(1, int(lengths[b]) + 1):
                h, s = int(heads[b, m]), int(sib[b, m])
                if s == 0 and not data.sib.first_child:
                    continue
                for f in sibling_part_ids(data.sib, int(data.offsets[i]), h, s if s > 0 else h, m):
                    expected[b, f] += 1
        assert torch.equal(phi - arcs, expected) and expected.sum() > 0


def test_the_part_pool_grows_and_stays_the_sum_of_its_blocks():
    """Blocks outgrow their first slots over many steps (their points move to the pool's end) and w stays the
    image of the points: recompute changes nothing beyond rounding; a checkpoint's state loads back exactly."""
    rng = np.random.default_rng(5)
    data = random_sibling_data(rng, 6, 12, lmin=4, lmax=6)
    model = SiblingDependencyModel.for_data(data)
    store = make_store(model, data, 0.01)
    first = store.pstart.copy()
    make_solver(store, SolverConfig(solver="bcfw", sampling="uniform", passes=30, gap_check=30, seed=2)).run()
    assert bool((store.pstart != first).any()), "no block outgrew its first slot"
    w = store.w.clone()
    store.recompute()
    assert torch.allclose(store.w, w, atol=1e-12)
    state = store.state_dict()
    other = make_store(model, data, 0.01)
    other.load_state_dict(state)
    assert torch.equal(other.w, store.w)
    assert torch.equal(other.gap_pass().block_gaps, store.gap_pass().block_gaps)


def test_refusals_name_the_field():
    from ssvm_torch.data.sibling_features import get_sibling_template
    for spec, words in ((123, "expected item strings"), ("nosuch", "sibling features: expected one of"),
                        ("hp|xx", "expected parts"), ("hp|dir", "needs a sibling or a modifier part"),
                        ("sp|mp sp|mp", "listed twice")):
        with pytest.raises(SSVMInputError, match=words):
            get_sibling_template(spec)
    from ssvm_torch.data.sibling_features import SiblingTemplate
    with pytest.raises(SSVMInputError, match="first_child: expected True or False"):
        SiblingTemplate.parse("sp|mp", first_child="yes")
    assert get_sibling_template("mcdonald-pereira-adjacent").key() != get_sibling_template("mcdonald-pereira").key()
    rng = np.random.default_rng(1)
    data = random_sibling_data(rng, 3, 6)
    model = SiblingDependencyModel.for_data(data)
    with pytest.raises(SSVMInputError, match="projective"):
        SiblingDependencyModel(model.d, projective=False)
    with pytest.raises(SSVMInputError, match="float64"):
        make_store(model, data, 0.1, dtype=torch.float32)
    with pytest.raises(SSVMInputError, match="kernels 'torch'"):
        make_store(model, data, 0.1, kernels="torch")
    plain = data.subset(torch.arange(3))
    plain.sib = None
    with pytest.raises(SSVMInputError, match="data.sib"):
        make_store(model, plain, 0.1)
    crossing = data.subset(torch.arange(3))             # observed heads no single-root tree keeps: two roots
    crossing.heads = torch.zeros_like(crossing.heads)
    crossing.observed = torch.ones(int(crossing.offsets[-1]), dtype=torch.bool)
    if int(crossing.lengths.max()) > 1:
        with pytest.raises(SSVMInputError, match="data.observed"):
            model.complete(torch.zeros(model.d, dtype=torch.float64), crossing)
    state = make_store(model, data, 0.1).state_dict()
    state["part_keys"] = state["part_keys"].flip(0)
    with pytest.raises(SSVMInputError, match="part_keys"):
        make_store(model, data, 0.1).load_state_dict(state)


@pytest.mark.long
def test_ssvm_train_second_order_on_ud_ewt(tmp_path):
    out = tmp_path / "run"
    # the arc design of test_tree_store's run (150 sentences, basic): the feature cache serves both
    train_main(["--dataset", "ud-ewt", "--trees", "second-order", "--train-size", "150", "--features", "basic",
                "--passes", "2", "--gap-check", "2", "--lam", "0.01", "--out", str(out), "--quiet"])
    hist = json.loads((out / "history.json").read_text())
    records = hist["records"] if isinstance(hist, dict) else hist
    assert records[-1]["gap"] < records[0]["gap"] and records[-1]["test_uas"] > 40.0
    config = json.loads((out / "config.json").read_text())
    assert "second-order" in json.dumps(config)


@pytest.mark.long
def test_cli_sibling_features_choose_the_template_and_are_refused_elsewhere(tmp_path, capsys):
    """--sibling-features mcdonald-pereira-adjacent trains the model without first-child parts (fewer features
    than the default's), recorded in config.json; with first-order trees or another task it is refused by name."""
    from ssvm_torch.tasks import load_task
    common = ["--dataset", "ud-ewt", "--trees", "second-order", "--train-size", "60", "--features", "basic",
              "--passes", "1", "--gap-check", "1", "--lam", "0.01", "--quiet"]
    train_main([*common, "--sibling-features", "mcdonald-pereira-adjacent", "--out", str(tmp_path / "adj")])
    config = json.loads((tmp_path / "adj" / "config.json").read_text())
    assert config["siblings"] == "mcdonald-pereira-adjacent"
    d_adjacent = load_task("ud-ewt", train_size=60, features="basic", trees="second-order",
                           siblings="mcdonald-pereira-adjacent").model.d
    assert d_adjacent < load_task("ud-ewt", train_size=60, features="basic", trees="second-order").model.d
    with pytest.raises(SSVMInputError, match="siblings: expected no sibling template unless trees='second-order'"):
        load_task("ud-ewt", train_size=60, features="basic", siblings="mcdonald-pereira")
    with pytest.raises(SSVMInputError, match="sibling features: expected one of"):
        load_task("ud-ewt", trees="second-order", siblings="nosuch")
    with pytest.raises(SSVMInputError, match="siblings: only for the dependency tasks"):
        load_task("ocr-small", siblings="mcdonald-pereira")


# -- partial heads: the latent SSVM over second-order trees ---------------------------------------------------------
def _partial_sibling(seed, fraction=0.5, n=8):
    from ssvm_torch.latent import hide_heads
    data = random_sibling_data(np.random.default_rng(seed), n, 12, lmin=1, lmax=5)
    return SiblingDependencyModel.for_data(data), hide_heads(data, fraction, seed, True)


def _brute_partial(model, data, w):
    """(H_i over the projective trees and the completed tree, max over the projective trees keeping every observed
    head of s(h) - s(y_i), the trees attaining it): s(y) = <w, phi(x_i, y)> from the dense phi."""
    H, HC, best = [], [], []
    for i in range(data.n):
        n = int(data.lengths[i])
        gold = data.padded_heads([i])[0, :n + 1].numpy()
        Y = torch.tensor(np.concatenate([all_trees(n, True, False), gold[None]]))
        idx = torch.full((len(Y),), i)
        s = model.phi(data, idx, Y) @ w
        lg = data.padded_loss_heads([i])[0, 1:n + 1]
        keeps = ((Y[:, 1:] == lg[None, :]) | (lg[None, :] < 0)).all(1)
        H.append(float((s + model.loss(data, idx, Y)).max() - s[-1]))
        top = float(s[keeps].max())
        HC.append(top - float(s[-1]))
        best.append([Y[k].tolist() for k in range(len(Y)) if keeps[k] and float(s[k]) >= top - 1e-12])
    return torch.tensor(H, dtype=torch.float64), torch.tensor(HC, dtype=torch.float64), best


def test_partial_heads_hinge_completion_and_cccp_against_enumeration():
    """On partial heads: the store's H_i (loss on the observed words only), the completion (it keeps every observed
    head and is a best such tree) and CCCP's objective, each against enumeration of the projective trees; CCCP's
    objective never rises."""
    from conftest import assert_descends
    from ssvm_torch.latent import latent_objective, train_latent
    model, data = _partial_sibling(3)
    assert data.partial
    lam = 0.05
    w = torch.randn(model.d, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    store = make_store(model, data, lam)
    store.set_point(w, 0.0)
    H, HC, best = _brute_partial(model, data, w)
    assert torch.allclose(store.gap_pass().H, H, atol=1e-10)
    heads = model.complete(w, data)
    assert torch.equal(heads[data.observed], data.heads[data.observed])
    completed = data.with_heads(heads)
    for i in range(data.n):
        assert completed.padded_heads([i])[0, :int(data.lengths[i]) + 1].tolist() in best[i]
    J, _ = latent_objective(model, data, lam, w)
    assert J == pytest.approx(lam / 2 * float(w @ w) + float((H - HC).mean()), abs=1e-10)
    w_out, records = train_latent(model, data, lam, SolverConfig(passes=60, gap_check=30), max_outer=3, w0="arcs")
    assert_descends(records)
    H, HC, _ = _brute_partial(model, data, w_out)
    assert records[-1]["objective"] == pytest.approx(lam / 2 * float(w_out @ w_out) + float((H - HC).mean()),
                                                     abs=1e-9)


@pytest.mark.long
def test_ssvm_train_second_order_from_partial_heads(tmp_path):
    out = tmp_path / "latent"
    train_main(["--dataset", "ud-ewt", "--trees", "second-order", "--hide-labels", "0.5", "--train-size", "150",
                "--features", "basic", "--passes", "4", "--gap-check", "2", "--latent-outer", "2", "--lam", "0.01",
                "--out", str(out), "--quiet"])
    records = json.loads((out / "latent.json").read_text())
    records = records["records"] if isinstance(records, dict) else records
    objectives = [r["objective"] for r in records]
    assert all(b <= a + 1e-12 for a, b in zip(objectives, objectives[1:]))
    hidden = json.loads((out / "hidden.json").read_text())
    assert hidden


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_model_on_cuda_matches_the_compiled_cpu_path():
    """On a GPU: the torch sibling scores and the device's second-order decoder give the CPU compiled path's scores
    and trees, and the loss-augmented oracle its hinge (float64)."""
    rng = np.random.default_rng(11)
    data = random_sibling_data(rng, 10, 20, lmin=1, lmax=11, projective_only=False)
    model = SiblingDependencyModel.for_data(data)
    w = torch.tensor(rng.normal(size=model.d))
    idx = torch.arange(data.n)
    S, SB = model.scores(w, data, idx)
    gpu = data.to("cuda")
    Sg, SBg = model.scores(w.cuda(), gpu, idx.cuda())
    read = torch.isfinite(SBg).cpu()
    assert torch.allclose(Sg.cpu(), S) and torch.allclose(SBg.cpu()[read], SB[read])
    assert torch.equal(model.predict_flat(w.cuda(), gpu).cpu(), model.predict_flat(w, data))
    _, H = model.oracle(w, data, idx)
    _, Hg = model.oracle(w.cuda(), gpu, idx.cuda())
    assert torch.allclose(Hg.cpu(), H, atol=1e-9)


def test_the_torch_path_makes_no_hidden_host_copies():
    """The model's device path (kernels="torch": the torch sibling scores, the torch second-order decoder) under
    the device guard (docs/devices.md): the oracle, prediction and metrics make no implicit host copy."""
    from ssvm_torch.devices import host_guard
    rng = np.random.default_rng(0)
    data = random_sibling_data(rng, 6, 10, lmin=1, lmax=6)
    model = SiblingDependencyModel.for_data(data).with_kernels("torch")
    w, idx = torch.tensor(rng.normal(size=model.d)), torch.arange(data.n)
    with host_guard() as guard:
        _, H = model.oracle(w, data, idx)
        heads = model.predict_flat(w, data)
        model.metrics(w, data)
    assert guard.host_copies == 0 and bool((H >= 0).all())
    assert torch.equal(heads, SiblingDependencyModel.for_data(data).predict_flat(w, data))


def test_threads_give_the_serial_results():
    """The gap pass and the compiled decode over numba's threads (torch's thread count >= 2: --threads) give the
    one-thread results bit for bit: every block is computed alone, in its own thread's scratch."""
    rng = np.random.default_rng(8)
    data = random_sibling_data(rng, 24, 20, lmin=1, lmax=9, projective_only=False)
    model = SiblingDependencyModel.for_data(data)
    store = make_store(model, data, 0.05)
    make_solver(store, SolverConfig(solver="bcfw", sampling="uniform", passes=3, gap_check=3, seed=0)).run()
    threads = torch.get_num_threads()
    results = []
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            gp = store.gap_pass()
            results.append((gp.labels, gp.block_gaps, gp.H, model.predict_flat(store.w, data)))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*results):
        assert torch.equal(a, b)
