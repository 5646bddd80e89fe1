"""Trees with distance transforms and matchings: tree-oracle throughput, pose and alignment results.

1. Batched tree oracle (loss-augmented max-sum, 11 parts, P = 32 x 32 positions, synthetic figures):
   examples/s by batch size for the numba 1-D transform (CPU float64 default) and the vectorized
   torch one (the CUDA path), median of --repeats; plus one O(P^2) message (P = 1024 positions,
   i.e. (32x32)^2 pairs) against one distance-transform message.
2. Pose: test mean joint error (grid cells) and PCK (share of joints within 1 cell) of unaries alone
   vs learned deformations (BCFW + gap sampling).
3. Hansards alignment: test AER / precision / recall of the SSVM matching vs independent per-edge
   logistic regression thresholded at the train-AER-optimal threshold (many-to-many allowed) and the
   best-Dice heuristic.

Usage: python benchmarks/bench_pose_align.py [--passes 30] [--repeats 5]
Writes benchmarks/results/pose_align.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from ssvm_torch.data import PairData, PoseData
from ssvm_torch.data.hansards import aer, load_hansards
from ssvm_torch.data.pose_synth import PARENTS, make_pose_synth
from ssvm_torch.models.matching import MatchingModel
from ssvm_torch.models.pose import TreePoseModel
from ssvm_torch.oracles.distance_transform import torch_dt1d, dt1d, dt2d, tree_max_sum
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.stores import make_store


def timed(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(train, repeats):
    data = PoseData(train.scores, train.joints)
    model = TreePoseModel.for_data(data, PARENTS)
    w = torch.ones(model.d, dtype=torch.float64) * 0.1
    out = {}
    for B in (1, 16, 64, 200):
        idx = torch.arange(B)
        unary, w_pair = model.augment(model.scores(w, data, idx), data, idx)     # the loss-augmented scores
        for name, kernel in (("numba", dt1d), ("torch", torch_dt1d)):
            t = timed(lambda: tree_max_sum(unary, PARENTS, w_pair, model.rest, model.scale, kernel), repeats)
            out[f"{name}_B{B}"] = {"batch": B, "kernel": name, "s_per_batch": t, "examples_per_s": B / t}
            print(f"tree oracle {name:5s} batch {B:3d}: {B / t:9.1f} examples/s  ({t * 1e3:7.2f} ms per batch)",
                  flush=True)
    # one message: distance transform vs the O(P^2) definition over P = 1024 positions
    b = data.S[:1, 4]
    t_dt = timed(lambda: dt2d(b, (0.1, 0.2, 0.1, 0.2), (0.5, 0.5), 4.0), repeats)
    q = torch.stack(torch.meshgrid(torch.arange(32), torch.arange(32), indexing="ij"), -1).reshape(-1, 2).double()

    def brute():
        dx = (q[None, :, 1] - q[:, None, 1] - 0.5) / 4.0
        dy = (q[None, :, 0] - q[:, None, 0] - 0.5) / 4.0
        return (b.reshape(1, 1, -1) + 0.1 * dx - 0.2 * dx ** 2 + 0.1 * dy - 0.2 * dy ** 2).max(2)
    t_brute = timed(brute, repeats)
    out["message"] = {"distance_transform_s": t_dt, "quadratic_s": t_brute, "speedup": t_brute / t_dt}
    print(f"one 32x32 message: distance transform {t_dt * 1e3:.3f} ms, O(P^2) {t_brute * 1e3:.1f} ms "
          f"({t_brute / t_dt:.0f}x)", flush=True)
    return out


def pose_results(train, test, passes):
    res = {}
    for lam in (1e-2, 1.0 / train.n):
        for pairwise in (False, True):
            data = PoseData(train.scores, train.joints)
            model = TreePoseModel.for_data(data, PARENTS, pairwise=pairwise)
            dual = make_store(model, data, lam, nonnegative=model.pairwise_index if pairwise else None)
            t0 = time.perf_counter()
            hist = Solver(dual, SolverConfig(passes=passes, gap_check=10)).run()
            wall = time.perf_counter() - t0
            e = model.metrics(dual.w, PoseData(test.scores, test.joints))
            key = f"lam{lam:.4g}_{'pairwise' if pairwise else 'unary'}"
            res[key] = {"lam": lam, "pairwise": pairwise, "test_mean_joint_error": e["error"], "test_pck": e["pck"],
                        "test_loss": e["loss"], "gap": hist[-1]["gap"], "passes": hist[-1]["passes"],
                        "ms_per_step": hist[-1]["time_s"] / max(hist[-1]["steps"], 1) * 1e3, "wall_s": wall}
            print(f"pose {key:22s}: mean joint error {e['error']:.3f} cells, PCK {e['pck']:.3f}, gap "
                  f"{hist[-1]['gap']:.3g}, {res[key]['ms_per_step']:.2f} ms/step", flush=True)
    return res


def alignment_results(passes):
    from sklearn.linear_model import LogisticRegression
    train, test = load_hansards()
    data, test_data = PairData.from_pairs(train), PairData.from_pairs(test)
    model = MatchingModel.for_data(data)
    res = {}
    for lam in (1e-2, 1e-3, 1e-4):
        dual = make_store(model, data, lam)
        hist = Solver(dual, SolverConfig(passes=passes, gap_check=10)).run()
        r = aer(test, model.links(dual.w, test_data))
        res[f"ssvm_lam{lam:g}"] = {**r, "gap": hist[-1]["gap"], "train_aer": aer(train, model.links(dual.w, data))["aer"]}
        print(f"alignment SSVM lam {lam:g}: AER {r['aer']:.4f}  P {r['precision']:.3f}  R {r['recall']:.3f}", flush=True)

    def flat(pairs):
        X = torch.cat([p.edge.reshape(-1, p.edge.shape[2]) for p in pairs]).numpy()
        y = np.concatenate([[(i, j) in p.probable for i in range(len(p.e)) for j in range(len(p.f))] for p in pairs])
        return X, y
    Xtr, ytr = flat(train)
    clf = LogisticRegression(C=1.0, max_iter=2000).fit(Xtr, ytr)

    def links(pairs, thr):
        return [{(i, j) for i in range(len(p.e)) for j in range(len(p.f)) if prob[k][i, j] > thr}
                for k, p in enumerate(pairs)]
    prob = [clf.predict_proba(p.edge.reshape(-1, p.edge.shape[2]).numpy())[:, 1].reshape(len(p.e), len(p.f))
            for p in train]
    grid = np.linspace(0.05, 0.95, 91)
    best = min(grid, key=lambda t: aer(train, links(train, t))["aer"])
    prob = [clf.predict_proba(p.edge.reshape(-1, p.edge.shape[2]).numpy())[:, 1].reshape(len(p.e), len(p.f))
            for p in test]
    r = aer(test, links(test, best))
    res["per_edge_logreg"] = {**r, "threshold": float(best)}
    print(f"alignment per-edge logistic regression (threshold {best:.2f}): AER {r['aer']:.4f}  "
          f"P {r['precision']:.3f}  R {r['recall']:.3f}", flush=True)
    dice = [{(i, int(p.edge[i, :, 1].argmax())) for i in range(len(p.e)) if float(p.edge[i, :, 1].max()) > 0.3}
            for p in test]
    r = aer(test, dice)
    res["best_dice"] = r
    print(f"alignment best-Dice heuristic: AER {r['aer']:.4f}  P {r['precision']:.3f}  R {r['recall']:.3f}")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=float, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "pose_align.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    train, test = make_pose_synth()
    res = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
           "parts": len(PARENTS), "grid": [32, 32], "passes": args.passes}
    res["tree_oracle"] = throughput(train, args.repeats)
    res["pose"] = pose_results(train, test, args.passes)
    res["alignment"] = alignment_results(args.passes)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
