"""Tag constraints in the linear chain models (ChainModel, EdgeChainModel): every oracle (numba and
torch kernels, the block corner, the gap pass, mini-batches, prediction, the marginal oracle of EG
and DEG) against brute force over the *allowed* labelings, the duality gap against an independent
primal - dual, and the CLI's --constraints refusals."""
import itertools
import warnings

import numpy as np
import pytest
import torch

from ssvm_torch import ChainData, Solver, SolverConfig, SSVMInputError, make_store
from ssvm_torch.cli.train import main as train_main
from ssvm_torch.constraints import allowed_transitions
from ssvm_torch.models import ChainModel
from ssvm_torch.models.chain_edges import EdgeChainModel

TAGS = ["O", "B-X", "I-X", "B-Y", "I-Y"]
LAM = 0.05


def bio_chains(seed, n=7, F=3, A=2, tmax=4, edges=False):
    """Random sequences whose gold tags obey BIO (an I-x after anything but B-x / I-x becomes B-x)."""
    rng = np.random.default_rng(seed)
    xs, ys, es = [], [], []
    for i in range(n):
        T = 1 if i == 0 else int(rng.integers(2, tmax + 1))
        y = rng.integers(0, len(TAGS), size=T)
        for t in range(T):
            if TAGS[y[t]].startswith("I-") and (t == 0 or TAGS[y[t - 1]][2:] != TAGS[y[t]][2:]):
                y[t] -= 1
        xs.append(rng.normal(size=(T, F)))
        ys.append(y)
        e = (rng.random((T, A)) < 0.6) * 1.0
        e[0] = 0.0
        es.append(e)
    base = ChainData.from_sequences(xs, ys, len(TAGS))
    E = None
    if edges:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            E = torch.tensor(np.concatenate(es)).to_sparse_csr()
    return ChainData(base.X, base.Y, base.offsets, len(TAGS), meta={"tag_names": TAGS}, E=E)


def allowed(y, masks):
    return bool(masks["start"][y[0]]) and bool(masks["end"][y[-1]]) and all(
        bool(masks["transitions"][a, b]) for a, b in zip(y, y[1:]))


def parts(data, i):
    s, e = int(data.offsets[i]), int(data.offsets[i + 1])
    X = torch.cat([data.X[s:e], torch.ones(e - s, 1, dtype=torch.float64)], 1)
    return X, (None if data.E is None else data.E.to_dense()[s:e]), data.Y[s:e]


def brute(model, data, i, w, augmented, masks):
    """max over the allowed labelings of <w, phi(x_i, y)> (+ L_i(y))."""
    X, Ec, gt = parts(data, i)
    c = float(model.token_loss(torch.tensor([X.shape[0]]))[0])
    best = -np.inf
    for y in itertools.product(range(model.K), repeat=X.shape[0]):
        if not allowed(y, masks):
            continue
        y = torch.tensor(y)
        phi = model.joint_feature(X, y, Ec) if Ec is not None else model.joint_feature(X, y)
        best = max(best, float(w @ phi) + (c * float((y != gt).sum()) if augmented else 0.0))
    return best


def value(model, data, i, w, y, augmented):
    X, Ec, gt = parts(data, i)
    y = torch.as_tensor(y)
    c = float(model.token_loss(torch.tensor([X.shape[0]]))[0])
    phi = model.joint_feature(X, y, Ec) if Ec is not None else model.joint_feature(X, y)
    return float(w @ phi) + (c * float((y != gt).sum()) if augmented else 0.0)


def constrained_model(data, loss="hamming"):
    model = (EdgeChainModel if data.E is not None else ChainModel).for_data(data, loss)
    masks = allowed_transitions("BIO", TAGS)
    model.set_constraints(masks, "BIO")
    model.check_labels_allowed(data)
    return model, masks


@pytest.mark.parametrize("edges", [False, True])
@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_every_max_oracle_attains_the_constrained_brute_force_max(edges, kernels):
    if edges and kernels == "torch":
        pytest.skip("the edge model runs on the numba kernels only")
    data = bio_chains(3, edges=edges)
    model, masks = constrained_model(data)
    store = make_store(model, data, LAM, kernels=kernels)
    Solver(store, SolverConfig(passes=3, gap_check=1, seed=0)).run()       # a dual point away from the start
    w = store.w.clone()
    gp = store.gap_pass()
    batch = None if edges else store.batch_corners(torch.arange(data.n))
    pred = model.predict_ragged(w, data)
    for i in range(data.n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        aug = brute(model, data, i, w, True, masks)
        for y in (store.fw_corner(i).labels, gp.labels[s:e]):
            y = torch.as_tensor(y).tolist()
            assert allowed(y, masks)
            assert value(model, data, i, w, y, True) == pytest.approx(aug, abs=1e-10)
        y = pred[s:e].tolist()
        assert allowed(y, masks)
        assert value(model, data, i, w, y, False) == pytest.approx(brute(model, data, i, w, False, masks), abs=1e-10)
    if not edges:                               # the padded model interface and the mini-batch corners
        idx = torch.arange(data.n)
        labels = model.decode(model.augment(model.scores(w, data, idx), data, idx), data, idx)
        for i in range(data.n):
            y = labels[i][labels[i] >= 0].tolist()
            assert allowed(y, masks)
            assert value(model, data, i, w, y, True) == pytest.approx(brute(model, data, i, w, True, masks),
                                                                      abs=1e-10)
        assert float(batch.gaps.sum()) == pytest.approx(float(gp.block_gaps.sum()), abs=1e-10)


@pytest.mark.parametrize("edges", [False, True])
def test_gap_equals_an_independent_constrained_primal_minus_dual(edges):
    data = bio_chains(5, edges=edges)
    model, masks = constrained_model(data, "normalized")
    store = make_store(model, data, LAM)
    Solver(store, SolverConfig(passes=4, gap_check=2, sampling="uniform")).run()
    gp = store.gap_pass()
    w = store.w
    H = [brute(model, data, i, w, True, masks) - value(model, data, i, w, parts(data, i)[2], False)
         for i in range(data.n)]
    primal = 0.5 * LAM * float(w @ w) + sum(H) / data.n
    dual = -0.5 * LAM * float(w @ w) + store.ell
    assert float(gp.block_gaps.sum()) == pytest.approx(primal - dual, abs=1e-10)
    assert float(gp.block_gaps.min()) >= -1e-12


@pytest.mark.parametrize("solver", ["eg", "deg"])
def test_marginal_solvers_put_no_mass_on_forbidden_transitions(solver):
    data = bio_chains(2)
    model, masks = constrained_model(data)
    store = make_store(model, data, LAM)
    from ssvm_torch.solvers import make_solver
    make_solver(store, SolverConfig(solver=solver, passes=3, gap_check=1)).run()
    forbidden_next_prev = ~masks["transitions"].t()
    assert float(store.Mt[:, forbidden_next_prev].abs().max()) < 1e-12
    first = store.Mu[data.offsets[:-1]]
    assert float(first[:, ~masks["start"]].abs().max()) < 1e-12


def test_cli_refuses_constraints_by_name(tmp_path, capsys):
    code = train_main(["--dataset", "ocr-small", "--constraints", "bio", "--passes", "1", "--out", str(tmp_path / "a")])
    assert code == 2 and "constraints: only for the tasks with chunk tags" in capsys.readouterr().err
    code = train_main(["--dataset", "conll2000", "--train-size", "50", "--tags", "bio", "--constraints", "bioes",
                       "--passes", "1", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 2 and "scheme 'bioes' does not fit the tag set" in err and "use scheme 'BIO'" in err


def test_conll_trains_under_bio_constraints_and_predicts_only_allowed_tags(tmp_path):
    out = tmp_path / "run"
    assert train_main(["--dataset", "conll2000", "--train-size", "200", "--features", "sha-pereira", "--min-count", "1",
                       "--tags", "bio", "--constraints", "bio", "--passes", "2", "--loss", "hamming", "--out", str(out)]) == 0
    saved = torch.load(out / "model.pt", weights_only=True)
    assert saved["feature_layout"]["constraints"] == "BIO"
    from ssvm_torch.tasks import load_task
    task = load_task("conll2000", train_size=200, loss="hamming", constraints="bio")
    pred = task.model.predict_ragged(saved["w"], task.test)
    names = task.train.meta["tag_names"]
    masks = allowed_transitions("BIO", names)
    off = task.test.offsets.tolist()
    assert all(allowed(pred[a:b].tolist(), masks) for a, b in zip(off, off[1:]))
    with pytest.raises(SSVMInputError, match="constraints"):
        load_task("conll2000", train_size=50, constraints="iob1")


def test_bio_bioes_conversion_round_trips_and_reads_stray_i_as_a_chunk_start():
    from ssvm_torch.constraints import bio_to_bioes, bioes_to_bio
    bio = ["B-NP", "I-NP", "I-NP", "O", "B-VP", "B-NP", "I-NP", "O", "I-PP", "I-NP"]
    bioes = bio_to_bioes(bio)
    assert bioes == ["B-NP", "I-NP", "E-NP", "O", "S-VP", "B-NP", "E-NP", "O", "S-PP", "S-NP"]
    assert bioes_to_bio(bioes)[:8] == bio[:8]
    assert bioes_to_bio(bioes)[8:] == ["B-PP", "B-NP"]                  # the same chunks, in IOB2
    masks = allowed_transitions("BIOES", sorted(set(bioes)))
    names = sorted(set(bioes))
    assert allowed([names.index(t) for t in bioes], masks)
    with pytest.raises(SSVMInputError, match="tags: expected BIO tags"):
        bio_to_bioes(["B-NP", "E-NP"])


@pytest.mark.long
def test_conll_on_bioes_tags_scores_the_official_bio_chunks(tmp_path):
    from ssvm_torch.data.conll import chunk_f1
    from ssvm_torch.tasks import load_task
    task = load_task("conll2000", train_size=300, tags="bioes", constraints="bioes")
    names = task.train.meta["tag_names"]
    assert any(n.startswith("E-") for n in names) and any(n.startswith("S-") for n in names)
    assert task.train.meta["tags"][0][0][:2] in ("B-", "I-", "O")   # the BIO strings stay the gold of F1
    # the gold BIOES labels, decoded back, score F1 = 100 against the BIO gold
    assert chunk_f1(task.train, task.train.Y)["f1"] == pytest.approx(100.0)
    with pytest.raises(SSVMInputError, match="does not fit the tag set"):
        load_task("conll2000", train_size=50, tags="bioes", constraints="bio")
    with pytest.raises(SSVMInputError, match="tags: only for the tasks with chunk tags"):
        load_task("ocr-small", tags="bioes")
    assert train_main(["--dataset", "conll2000", "--train-size", "200", "--tags", "bioes", "--constraints", "bioes",
                       "--passes", "1", "--out", str(tmp_path / "r")]) == 0


@pytest.mark.parametrize("batch_size", [1, 4])
def test_constrained_torch_store_never_leaves_the_device(batch_size):
    """The CUDA path of a constrained chain, checked on CPU: no numpy, no default-device factory, and
    no host copy beyond those the unconstrained run makes (the penalties are built on the device)."""
    from ssvm_torch.devices import host_guard
    data = bio_chains(4)
    copies = []
    for constrained in (False, True):
        model = ChainModel.for_data(data, "hamming")
        if constrained:
            model, masks = constrained_model(data)
        store = make_store(model, data, LAM, kernels="torch")
        with host_guard() as guard:
            hist = Solver(store, SolverConfig(passes=2, gap_check=1, seed=0, batch_size=batch_size)).run()
        copies.append(guard.host_copies)
        assert hist[-1]["gap"] >= -1e-9
    assert copies[1] == copies[0]
    labels = model.predict_ragged(store.w, data)
    off = data.offsets.tolist()
    assert all(allowed(labels[a:b].tolist(), masks) for a, b in zip(off, off[1:]))
