"""CoNLL-2000: attribute template, sparse feature map vs dense reference, sparse oracle vs brute
force, compact blocks vs a dense block store, unknown test tags, chunk F1."""
import itertools
import json

import numpy as np
import pytest
import torch

from conftest import brute_force_chain, chain_score, explicit
from ssvm_torch import ChainData, ChainModel, SSVMInputError, make_store
from ssvm_torch.data.conll import build_chain_data, chunk_f1, load_conll2000, token_attributes
from ssvm_torch.cli.train import main

SENT = [("He", "PRP", "B-NP"), ("reckons", "VBZ", "B-VP"), ("the", "DT", "B-NP")]


@pytest.fixture(scope="module")
def conll_small():
    return load_conll2000(train_size=150)


def test_template_on_a_hand_checked_sentence():
    attrs = token_attributes(SENT)
    assert attrs[0] == ["w[0]=He", "w[1]=reckons", "w[2]=the", "w[0]|w[1]=He|reckons", "p[0]=PRP", "p[1]=VBZ",
                        "p[2]=DT", "p[0]|p[1]=PRP|VBZ", "p[1]|p[2]=VBZ|DT", "p[0]|p[1]|p[2]=PRP|VBZ|DT"]
    assert len(attrs[1]) == 11 and "w[-1]|w[0]=He|reckons" in attrs[1] and "p[-1]|p[0]|p[1]=PRP|VBZ|DT" in attrs[1]
    assert "p[-2]|p[-1]|p[0]=PRP|VBZ|DT" in attrs[2] and not any(a.startswith("w[1]") for a in attrs[2])


def test_sparse_feature_map_equals_dense_reference():
    from ssvm_torch.data.conll import read_conll
    from ssvm_torch.data import data_dir
    raw = read_conll(data_dir() / "conll2000_train.txt.gz")[:3]
    index = {}
    for s in raw:
        for a in itertools.chain.from_iterable(token_attributes(s)):
            index.setdefault(a, len(index))
    tags = sorted({t for s in raw for _, _, t in s})
    data = build_chain_data(raw, index, tags, "x", False)
    dense = torch.zeros(data.X.shape, dtype=torch.float64)         # reference: set each attribute by hand
    row = 0
    for s in raw:
        for attrs in token_attributes(s):
            for a in attrs:
                dense[row, index[a]] = 1.0
            row += 1
    assert torch.equal(data.X.to_dense(), dense)
    m = ChainModel.for_data(data)
    dense_data = ChainData(dense, data.Y, data.offsets, data.n_states)
    for a, b in zip(m.features_csr(data), m.features_csr(dense_data)):
        assert torch.equal(a, b)
    # joint feature map through the sparse dual equals the dense one
    d = make_store(m, data, 0.1)
    Xc = m.features(dense_data)
    for i in range(data.n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        corner = d.fw_corner(i)
        y = torch.as_tensor(corner.labels)
        d.add_psi(i, corner, 1.0)                            # w += psi_i(y) through the sparse kernels
        psi_dense = m.joint_feature(Xc[s:e], data.Y[s:e]) - m.joint_feature(Xc[s:e], y)
        assert torch.allclose(d.w, psi_dense, atol=1e-12)
        d.w.zero_()


def random_sparse_chain(rng, n, K, F, density=0.3, tmax=4):
    xs, ys = [], []
    for _ in range(n):
        T = int(rng.integers(1, tmax + 1))
        x = rng.normal(size=(T, F)) * (rng.random((T, F)) < density)
        xs.append(x)
        ys.append(rng.integers(0, K, size=T))
    dense = ChainData.from_sequences(xs, ys, K)
    return ChainData(dense.X.to_sparse_csr(), dense.Y, dense.offsets, K), dense


def test_sparse_oracle_equals_brute_force():
    rng = np.random.default_rng(0)
    for K in (2, 3):
        sparse, dense = random_sparse_chain(rng, 15, K, 6)
        m = ChainModel.for_data(sparse)
        d = make_store(m, sparse, 0.2)
        d.w.copy_(torch.tensor(rng.normal(size=m.d)))
        W, first, last, trans = m.split(d.w)
        Xc = m.features(dense)
        for i in range(sparse.n):
            s, e = int(sparse.offsets[i]), int(sparse.offsets[i + 1])
            U = (Xc[s:e] @ W.T).numpy()
            gt = sparse.Y[s:e].numpy()
            best = brute_force_chain(U, first.numpy(), last.numpy(), trans.numpy(), gt)
            c = d.fw_corner(i)
            got = chain_score(U, first.numpy(), last.numpy(), trans.numpy(), list(c.labels)) + np.mean(c.labels != gt)
            assert got == pytest.approx(best, abs=1e-10)


@pytest.mark.parametrize("emission", ["label-major", "feature-major"])
def test_prediction_on_sparse_data_equals_brute_force(emission):
    """Decoding reads a sparse design in place (bias added after): the plain argmax by enumeration,
    for both layouts of the emission weights and for the torch kernels."""
    rng = np.random.default_rng(5)
    sparse, dense = random_sparse_chain(rng, 12, 3, 5)
    m = ChainModel.for_data(sparse, emission=emission)
    w = torch.tensor(rng.normal(size=m.d))
    W, first, last, trans = m.split(w)
    U_all = (m.features(dense) @ W.T).numpy()
    pred = m.predict_ragged(w, sparse)
    assert torch.equal(pred, m.predict_ragged(w, dense)) and torch.equal(pred, m.with_kernels("torch").predict_ragged(w, sparse))
    for i in range(sparse.n):
        s, e = int(sparse.offsets[i]), int(sparse.offsets[i + 1])
        best = brute_force_chain(U_all[s:e], first.numpy(), last.numpy(), trans.numpy())
        assert chain_score(U_all[s:e], first.numpy(), last.numpy(), trans.numpy(), pred[s:e].tolist()) == \
            pytest.approx(best, abs=1e-10)


def test_compact_blocks_equal_dense_block_store():
    """The same BCFW trajectory (same blocks, exact line search) on the compact chain store and on
    a dense store over all K^T labelings: block gaps, step sizes and w agree to 1e-9."""
    rng = np.random.default_rng(1)
    sparse, dense = random_sparse_chain(rng, 6, 2, 4, density=0.6, tmax=3)
    lam = 0.05
    m = ChainModel.for_data(sparse)
    chain = make_store(m, sparse, lam)
    Xc = m.features(dense)
    psi, losses, gts, index = [], [], [], []
    for i in range(sparse.n):
        s, e = int(sparse.offsets[i]), int(sparse.offsets[i + 1])
        labs = list(itertools.product(range(2), repeat=e - s))
        gt = tuple(sparse.Y[s:e].tolist())
        phi_gt = m.joint_feature(Xc[s:e], sparse.Y[s:e])
        psi.append(torch.stack([phi_gt - m.joint_feature(Xc[s:e], torch.tensor(y)) for y in labs]).numpy())
        losses.append(np.array([np.mean(np.array(y) != np.array(gt)) for y in labs]))
        gts.append(labs.index(gt))
        index.append({y: j for j, y in enumerate(labs)})
    dense_dual = make_store(*explicit(psi, losses, gt=gts), lam)
    order = rng.integers(0, sparse.n, size=60)
    for i in order:
        a, b = chain.fw_corner(int(i)), dense_dual.fw_corner(int(i))
        assert index[i][tuple(int(v) for v in a.labels)] == b.labels
        assert a.gap == pytest.approx(b.gap, rel=1e-9, abs=1e-12)
        assert a.sqnorm == pytest.approx(b.sqnorm, rel=1e-9)
        ga = min(max(a.gap / (lam * a.sqnorm), 0), 1) if a.sqnorm > 0 else 0
        gb = min(max(b.gap / (lam * b.sqnorm), 0), 1) if b.sqnorm > 0 else 0
        assert ga == pytest.approx(gb, rel=1e-9, abs=1e-12)
        chain.fw_move(int(i), a, ga)
        dense_dual.fw_move(int(i), b, gb)
        assert torch.allclose(chain.w, dense_dual.w, rtol=0, atol=1e-9)
    assert torch.allclose(chain.gap_pass().block_gaps, dense_dual.gap_pass().block_gaps, atol=1e-9)


def test_unknown_test_tag_counts_as_error(conll_small):
    train, test = conll_small
    K = train.n_states
    assert K == len(train.meta["tag_names"]) and "I-LST" not in train.meta["tag_names"]
    unknown = test.Y == K
    assert int(unknown.sum()) >= 2                       # I-LST (and tags unseen in 150 sentences)
    m = ChainModel.for_data(train)
    labels = m.predict_ragged(torch.zeros(m.d, dtype=torch.float64), test)
    assert bool((labels[unknown] != test.Y[unknown]).all())
    # the gold labels wherever the model knows the tag, O elsewhere: the unknown chunks are missed
    best = torch.where(unknown, train.meta["tag_names"].index("O"), test.Y)
    r = chunk_f1(test, best)
    assert 90 < r["f1"] < 100 and r["recall"] < 100
    with pytest.raises(SSVMInputError, match="training labels"):
        make_store(m, test, 0.1)


def test_chunk_f1_hand_checked():
    """Gold chunks NP[0-1] VP[3] PP[4] NP[5-6]; the prediction cuts the last NP short and
    predicts an I-LST chunk unknown to it as O: P = 3/4, R = 3/5."""
    tags = ["B-NP", "B-PP", "B-VP", "I-NP", "O"]
    gold = [["B-NP", "I-NP", "O", "B-VP", "B-PP", "B-NP", "I-NP", "I-LST"]]
    pred = torch.tensor([0, 3, 4, 2, 1, 0, 4, 4])
    data = ChainData(torch.zeros(8, 1), torch.tensor([0, 3, 4, 2, 1, 0, 3, 5]), torch.tensor([0, 8]), 5,
                     allow_unknown=True, meta={"tag_names": tags, "tags": gold})
    r = chunk_f1(data, pred)
    assert r["precision"] == pytest.approx(75.0) and r["recall"] == pytest.approx(60.0)
    assert r["f1"] == pytest.approx(100 * 2 * 0.75 * 0.6 / 1.35)


def test_cli_conll(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["--dataset", "conll2000", "--train-size", "120", "--lam", "0.01", "--passes", "2",
                 "--gap-check", "0.5", "--out", str(out)]) == 0
    assert "test chunk F1" in capsys.readouterr().out
    hist = json.loads((out / "history.json").read_text())
    # half a pass of steps + one counted gap pass per check
    assert [r["passes"] for r in hist] == [0.0, 1.5, 3.0] and all("test_f1" in r for r in hist)
    assert hist[-1]["test_f1"] > 50 and hist[-1]["gap"] < hist[0]["gap"]
    # the defaults: the configuration chosen on the dev split (docs/conll.md), recorded in config.json
    config = json.loads((out / "config.json").read_text())
    assert {k: config[k] for k in ("features", "min_count", "tags", "constraints", "loss")} == {
        "features": "rich-edges", "min_count": 1, "tags": "bioes", "constraints": "bioes", "loss": "hamming"}
    assert torch.load(out / "model.pt", weights_only=True)["feature_layout"]["constraints"] == "BIOES"
    # the old defaults, by name
    old = tmp_path / "old"
    assert main(["--dataset", "conll2000", "--features", "sha-pereira", "--min-count", "1", "--tags", "bio",
                 "--constraints", "none", "--loss", "normalized", "--train-size", "120", "--lam", "0.01",
                 "--passes", "1", "--out", str(old)]) == 0
    layout = torch.load(old / "model.pt", weights_only=True)["feature_layout"]
    assert layout["featurization"]["template"] == "sha-pereira" and layout.get("constraints") in (None, "NONE")
    assert json.loads((old / "config.json").read_text())["loss"] == "normalized"
    assert main(["--dataset", "ocr-small", "--train-size", "10", "--out", str(out)]) == 2
