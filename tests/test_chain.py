"""Chain model: feature layout, loss-augmented oracle, compact blocks vs dense, torch vs numba paths."""
import numpy as np
import pytest
import torch

from conftest import brute_force_chain, chain_score, random_chain_data
from ssvm_torch import ChainModel, make_store


def test_ocr_feature_layout_matches_reference():
    """d = 4082; pixel p of state y at y*129+p, constant at y*129+128, first/last biases, then
    transitions at 26*129 + 52 + y_t + 26*y_{t+1} (the MATLAB reference layout)."""
    m = ChainModel(128, 26)
    assert m.d == 4082
    x = torch.zeros(3, 129, dtype=torch.float64)
    x[:, 128] = 1.0
    x[0, 5] = 1.0
    x[2, 127] = 1.0
    y = torch.tensor([2, 0, 25])
    phi = m.joint_feature(x, y)
    assert phi[2 * 129 + 5] == 1 and phi[2 * 129 + 128] == 1
    assert phi[25 * 129 + 127] == 1 and phi[25 * 129 + 128] == 1 and phi[0 * 129 + 128] == 1
    assert phi[26 * 129 + 2] == 1                           # first letter 'c'
    assert phi[26 * 129 + 26 + 25] == 1                     # last letter 'z'
    base = 26 * 129 + 52
    assert phi[base + 2 + 26 * 0] == 1 and phi[base + 0 + 26 * 25] == 1
    assert phi.sum() == 3 + 2 + 1 + 1 + 2


def test_score_is_inner_product_with_joint_feature():
    rng = np.random.default_rng(0)
    data = random_chain_data(rng, 5, 4, 3)
    m = ChainModel.for_data(data)
    w = torch.tensor(rng.normal(size=m.d))
    W, first, last, trans = m.split(w)
    Xc = m.features(data)
    for i in range(data.n):
        s, e = int(data.offsets[i]), int(data.offsets[i + 1])
        U = (Xc[s:e] @ W.T).numpy()
        y = data.Y[s:e]
        ref = chain_score(U, first.numpy(), last.numpy(), trans.numpy(), y.tolist())
        assert float(w @ m.joint_feature(Xc[s:e], y)) == pytest.approx(ref, rel=1e-12)


def _dual_with_random_state(rng, data, lam, steps=40, loss="normalized", emission="label-major"):
    m = ChainModel.for_data(data, loss, emission)
    d = make_store(m, data, lam)
    for k in range(steps):                       # arbitrary feasible moves with random step sizes
        i = int(rng.integers(data.n))
        c = d.fw_corner(i)
        d.fw_move(i, c, float(rng.uniform(0.1, 0.9)))
    return m, d


@pytest.mark.parametrize("loss,emission", [("normalized", "label-major"), ("hamming", "label-major"),
                                           ("hamming", "feature-major")])
def test_oracle_equals_brute_force_and_dense_blocks(loss, emission):
    """Loss-augmented oracle = enumeration (normalized Hamming or the Hamming count); <w_i - w_s, w>,
    ||w_i - w_s||^2 and the block gap from the compact store equal their dense computation (w_i
    rebuilt densely, psi by the joint feature map)."""
    rng = np.random.default_rng(1)
    for K, F in [(2, 3), (3, 2), (4, 4)]:
        data = random_chain_data(rng, 12, K, F, tmin=1, tmax=4)
        lam = 0.3
        m, d = _dual_with_random_state(rng, data, lam, loss=loss, emission=emission)
        Xc = m.features(data)
        W, first, last, trans = m.split(d.w)
        for i in range(data.n):
            s, e = int(data.offsets[i]), int(data.offsets[i + 1])
            U = (Xc[s:e] @ W.T).numpy()
            gt = data.Y[s:e].numpy()
            best = brute_force_chain(U, first.numpy(), last.numpy(), trans.numpy(), gt,
                                     token_loss=None if loss == "normalized" else 1.0)
            c = d.fw_corner(i)
            ys = torch.as_tensor(c.labels)
            H = best - chain_score(U, first.numpy(), last.numpy(), trans.numpy(), gt.tolist())
            psi = m.joint_feature(Xc[s:e], data.Y[s:e]) - m.joint_feature(Xc[s:e], ys)
            assert c.loss * data.n - float(psi @ d.w) == pytest.approx(H, abs=1e-10)
            w_s = psi / (lam * data.n)
            w_i = d.block_w(i)
            assert c.dot == pytest.approx(float((w_i - w_s) @ d.w), rel=1e-9, abs=1e-12)
            assert c.sqnorm == pytest.approx(float((w_i - w_s) @ (w_i - w_s)), rel=1e-9, abs=1e-12)
            gap_dense = lam * float((w_i - w_s) @ d.w) - float(d.ell_i[i]) + c.loss
            assert c.gap == pytest.approx(gap_dense, rel=1e-9, abs=1e-12)


def test_w_is_sum_of_blocks_after_many_steps(ocr_small):
    train, _ = ocr_small
    sub = train.subset(range(40))
    rng = np.random.default_rng(2)
    m = ChainModel.for_data(sub)
    d = make_store(m, sub, 0.05)
    for _ in range(4000):
        i = int(rng.integers(sub.n))
        c = d.fw_corner(i)
        if c.sqnorm > 0 and c.gap > 0:
            d.fw_move(i, c, min(c.gap / (d.lam * c.sqnorm), 1.0))
    dense_sum = sum(d.block_w(i) for i in range(sub.n))
    assert torch.allclose(d.w, dense_sum, rtol=0, atol=1e-9 * float(dense_sum.abs().max()))
    assert d.ell == pytest.approx(float(d.ell_i.sum()), rel=1e-12)
    w_inc = d.w.clone()
    d.recompute()
    assert torch.allclose(d.w, w_inc, rtol=0, atol=1e-12)


@pytest.mark.parametrize("loss,emission", [("normalized", "label-major"), ("hamming", "feature-major")])
def test_torch_path_equals_numba_path(loss, emission):
    """The pure-torch path (what CUDA runs) gives the same corners, moves and gap pass."""
    rng = np.random.default_rng(3)
    data = random_chain_data(rng, 15, 4, 6, tmin=1, tmax=6)
    _, a = _dual_with_random_state(rng, data, 0.2, loss=loss, emission=emission)
    m = ChainModel.for_data(data, loss, emission)
    b = make_store(m, data, 0.2, kernels="torch")
    b.load_state_dict(a.state_dict())
    assert (a.kernels, b.kernels) == ("numba", "torch")
    for k in range(30):
        i = int(rng.integers(data.n))
        ca, cb = a.fw_corner(i), b.fw_corner(i)
        assert list(map(int, ca.labels)) == cb.labels.tolist()
        for f in ("loss", "dot", "sqnorm", "gap"):
            assert getattr(ca, f) == pytest.approx(getattr(cb, f), rel=1e-9, abs=1e-12)
        a.fw_move(i, ca, 0.37)
        b.fw_move(i, cb, 0.37)
        assert torch.allclose(a.w, b.w, atol=1e-12)
    ga, gb = a.gap_pass(), b.gap_pass()
    assert torch.equal(ga.labels, gb.labels)
    for f in ("loss", "H", "block_gaps"):
        assert torch.allclose(getattr(ga, f), getattr(gb, f), rtol=1e-9, atol=1e-12)
    ssg_a, ssg_b = a.fw_corner(0), b.fw_corner(0)
    a.add_psi(0, ssg_a, 0.5)
    b.add_psi(0, ssg_b, 0.5)
    assert torch.allclose(a.w, b.w, atol=1e-12)


def test_decode_and_errors(ocr_small):
    train, test = ocr_small
    m = ChainModel.for_data(train)
    w = torch.zeros(m.d, dtype=torch.float64)
    W, first, last, trans = m.split(w)
    W[3, 128] = 1.0                       # every letter scores 'd' best
    labels = m.predict_ragged(w, test)
    assert (labels == 3).all()
    err = m.metrics(w, test)
    assert err["position_error"] == pytest.approx(float((test.Y != 3).double().mean()))
    per_word = m.ragged_loss(test, labels)
    assert err["error"] == pytest.approx(float(per_word.mean()))
    assert 0 < err["error"] < 1
