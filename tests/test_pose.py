"""Distance transforms = the O(P^2) definition; tree max-sum = enumeration; the pose model, its
loss augmentation and training (box-constrained quadratic weights); the seeded generator."""
import itertools

import numpy as np
import pytest
import torch

from ssvm_torch.data import PoseData
from ssvm_torch.errors import SSVMInputError
from ssvm_torch.models.pose import TreePoseModel
from ssvm_torch.oracles.distance_transform import BRUTE_MAX_P, torch_dt1d, dt1d, dt1d_brute, dt2d, tree_max_sum
from ssvm_torch.data.pose_synth import PARENTS, make_pose_synth
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.stores import make_store


@pytest.mark.parametrize("kernel", [dt1d, torch_dt1d], ids=["numba", "torch"])
def test_dt1d_equals_brute_force(kernel):
    """Both numba algorithms too: every candidate up to BRUTE_MAX_P positions, the lower envelope above."""
    rng = np.random.default_rng(0)
    for trial in range(400):
        P = int(rng.integers(1, 14)) if trial % 7 else int(rng.integers(BRUTE_MAX_P - 3, BRUTE_MAX_P + 25))
        f = torch.tensor(rng.normal(size=(5, P)) if trial % 3 else rng.integers(-2, 3, size=(5, P)).astype(float))
        a = float(rng.normal())
        c = 0.0 if trial % 5 == 0 else float(rng.exponential())
        shift = float(rng.normal() * 4)                          # rest offsets may leave the grid
        D, arg = kernel(f, a, c, shift)
        D0, _ = dt1d_brute(f, a, c, shift)
        assert torch.allclose(D, D0, atol=1e-10), trial
        t = torch.arange(P, dtype=f.dtype) + shift               # the argmax attains the max
        d = arg.to(f.dtype) - t
        assert torch.allclose(f.gather(1, arg) + a * d - c * d * d, D0, atol=1e-10)


def brute_message(b, w, shift, scale):
    B, H, W = b.shape
    r, c = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    q = torch.stack([r.reshape(-1), c.reshape(-1)], 1).double()          # (HW, 2)
    dx = (q[None, :, 1] - q[:, None, 1] - shift[0]) / scale                # [p, q]
    dy = (q[None, :, 0] - q[:, None, 0] - shift[1]) / scale
    pair = w[0] * dx - w[1] * dx ** 2 + w[2] * dy - w[3] * dy ** 2
    return (b.reshape(B, 1, H * W) + pair[None]).max(2).values.reshape(B, H, W)


@pytest.mark.parametrize("kernel", [dt1d, torch_dt1d], ids=["numba", "torch"])
def test_dt2d_message_equals_the_quadratic_time_message(kernel):
    rng = np.random.default_rng(1)
    for trial in range(30):
        H, W = int(rng.integers(1, 7)), int(rng.integers(1, 7))
        b = torch.tensor(rng.normal(size=(3, H, W)))
        w = (rng.normal(), 0.0 if trial % 4 == 0 else rng.exponential(), rng.normal(), rng.exponential())
        shift = (rng.normal() * 2, rng.normal() * 2)
        m, ar, ac = dt2d(b, w, shift, 2.0, kernel)
        assert torch.allclose(m, brute_message(b, w, shift, 2.0), atol=1e-10)
        # the returned argmax attains the message
        pr, pc = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
        dx = (ac - pc - shift[0]) / 2.0
        dy = (ar - pr - shift[1]) / 2.0
        val = b[torch.arange(3)[:, None, None], ar, ac] + w[0] * dx - w[1] * dx ** 2 + w[2] * dy - w[3] * dy ** 2
        assert torch.allclose(val, m, atol=1e-10)


def tree_score(unary, parents, w_pair, rest, scale, loc):
    s = sum(float(unary[j, loc[j][0], loc[j][1]]) for j in range(len(parents)))
    for j in range(1, len(parents)):
        p = parents[j]
        dx = (loc[j][1] - loc[p][1] - float(rest[j, 0])) / scale
        dy = (loc[j][0] - loc[p][0] - float(rest[j, 1])) / scale
        w = w_pair[j]
        s += float(w[0] * dx - w[1] * dx ** 2 + w[2] * dy - w[3] * dy ** 2)
    return s


def test_tree_max_sum_equals_enumeration():
    rng = np.random.default_rng(2)
    for trial in range(12):
        J = int(rng.integers(1, 5))
        H, W = int(rng.integers(1, 4)), int(rng.integers(2, 4))
        parents = [-1] + [int(rng.integers(0, j)) for j in range(1, J)]
        unary = torch.tensor(rng.normal(size=(2, J, H, W)))
        w_pair = torch.tensor(np.c_[rng.normal(size=J), rng.exponential(size=J), rng.normal(size=J),
                                    rng.exponential(size=J)])
        rest = torch.tensor(rng.normal(size=(J, 2)))
        loc, best = tree_max_sum(unary, parents, w_pair, rest, 1.5)
        cells = list(itertools.product(range(H), range(W)))
        for b in range(2):
            brute = max(tree_score(unary[b], parents, w_pair, rest, 1.5, y) for y in itertools.product(cells, repeat=J))
            assert best[b] == pytest.approx(brute, abs=1e-10)
            assert tree_score(unary[b], parents, w_pair, rest, 1.5, loc[b].tolist()) == pytest.approx(brute, abs=1e-10)


def tiny_model(rng, n=3, J=3, H=3, W=3, pairwise=True):
    parents = [-1] + [int(rng.integers(0, j)) for j in range(1, J)]
    scores = torch.tensor(rng.normal(size=(n, J, H, W)))
    joints = torch.stack([torch.tensor(rng.integers(0, [H, W], size=(J, 2))) for _ in range(n)])
    data = PoseData(scores, joints)
    return TreePoseModel.for_data(data, parents, scale=2.0, radius=0, pairwise=pairwise), data


def test_loss_augmented_oracle_equals_enumeration():
    rng = np.random.default_rng(3)
    for _ in range(5):
        model, data = tiny_model(rng)
        w = torch.tensor(rng.normal(size=model.d))
        w[model.pairwise_index] = torch.tensor(rng.exponential(size=len(model.pairwise_index)))
        every = torch.arange(data.n)
        labels, H = model.oracle(w, data, every)
        cells = list(itertools.product(range(data.H), range(data.W)))
        for i in range(data.n):
            ys = torch.tensor(list(itertools.product(cells, repeat=model.J)))            # (K, J, 2)
            idx = torch.full((len(ys),), i)
            vals = model.loss(data, idx, ys) - model.psi(data, idx, ys) @ w
            assert float(H[i]) == pytest.approx(float(vals.max()), abs=1e-10)
        assert torch.allclose(H, model.loss(data, every, labels) - model.psi(data, every, labels) @ w)


def test_refuses_convex_deformations_and_bad_trees():
    rng = np.random.default_rng(4)
    model, data = tiny_model(rng)
    w = torch.zeros(model.d)
    w[model.pairwise_index[0]] = -0.1
    with pytest.raises(SSVMInputError, match="quadratic deformation weights must be >= 0"):
        model.predict(w, data, [0])
    with pytest.raises(SSVMInputError, match="parents"):
        TreePoseModel.for_data(data, [-1, 2, 0])
    with pytest.raises(SSVMInputError, match="joints"):
        PoseData(data.S, data.Y + 10)


def test_generator_is_seeded_and_prefix_stable():
    a, _ = make_pose_synth(6, 2, seed=3)
    b, _ = make_pose_synth(9, 2, seed=3)
    c, _ = make_pose_synth(6, 2, seed=4)
    assert torch.equal(a.joints, b.joints[:6]) and torch.equal(a.images, b.images[:6])
    assert not torch.equal(a.joints, c.joints)
    assert a.scores.shape == (6, 11, 32, 32) and len(PARENTS) == 11
    assert bool((a.joints >= 0).all() and (a.joints < 32).all())


def test_learned_deformations_beat_unaries_alone():
    train, test = make_pose_synth(60, 60)
    errors = {}
    for pairwise in (False, True):
        data = PoseData(train.scores, train.joints)
        model = TreePoseModel.for_data(data, PARENTS, pairwise=pairwise)
        dual = make_store(model, data, 1e-2, nonnegative=model.pairwise_index if pairwise else None)
        Solver(dual, SolverConfig(passes=6, gap_check=3)).run()
        if pairwise:
            assert bool((dual.w[model.pairwise_index] >= 0).all())
        errors[pairwise] = model.metrics(dual.w, PoseData(test.scores, test.joints))
    assert errors[True]["error"] < 0.6 * errors[False]["error"]
    assert errors[True]["pck"] > errors[False]["pck"] + 0.15


def test_cli_pose_synth(tmp_path):
    import json

    from ssvm_torch.cli.train import main
    assert main(["--dataset", "pose-synth", "--train-size", "30", "--passes", "6", "--gap-check", "2", "--quiet",
                 "--out", str(tmp_path)]) == 0
    hist = json.loads((tmp_path / "history.json").read_text())
    # (after 2 passes the iterate's primal is still above P(0) = 1 and the run would return w = 0)
    assert {"test_error", "test_pck", "gap"} <= set(hist[-1]) and hist[-1]["test_error"] < hist[0]["test_error"]
    model = torch.load(tmp_path / "model.pt")
    assert model["feature_layout"]["kind"] == "TreePoseModel" and model["w"].shape == (11 + 40,)
    quadratic = [11 + 4 * e + k for e in range(10) for k in (1, 3)]      # weights of -dx^2, -dy^2
    assert bool((model["w"][quadratic] >= 0).all())
