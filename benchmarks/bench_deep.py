"""CNN + SSVM pipelines (issue 16): pose-synth heat maps and the OCR-large runs' table.

``--parts pose``: pose-synth (200 / 200 figures), mean joint error (grid cells) and PCK@1 of
  * the template detector + learned deformations (the model of docs/structures.md),
  * CNN heat maps alone (per-joint argmax of the network's maps),
  * CNN heat maps + learned deformations (two-stage: the FCN trained on the training figures,
    frozen, its log-softmax maps as the tree SSVM's unaries),
  both SSVMs with BCFW + gap sampling at lambda = 1/n for ``--passes`` effective passes, the
  quadratic deformation weights kept >= 0 (box constraints).
``--parts ocr RUN_DIR ...``: reads the run directories of ``python -m ssvm_torch.deep fit`` (one per
  method), recomputes each test error from ``test_predictions.pt`` and the test labels, and checks it
  against the last history record.

Usage: python benchmarks/bench_deep.py --parts pose [--passes 60] [--epochs 60]
       python benchmarks/bench_deep.py --parts ocr --runs runs/ocr_deep_*/lightning_logs/version_0
Writes benchmarks/results/deep_pose.json / deep_ocr.json.
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from ssvm_torch.data import PoseData
from ssvm_torch.data.ocr import load_ocr
from ssvm_torch.data.pose_synth import PARENTS, make_pose_synth
from ssvm_torch.deep.pose import heatmap_maps, heatmap_pose_data, train_heatmaps
from ssvm_torch.models.chain import ChainModel
from ssvm_torch.models.pose import TreePoseModel
from ssvm_torch.nn import TreeSSVMHead
from ssvm_torch.outputs import load_torch
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.stores import make_store

RESULTS = Path(__file__).resolve().parent / "results"


def tree_ssvm(train: PoseData, test: PoseData, passes: float) -> dict:
    model = TreePoseModel.for_data(train, PARENTS)
    dual = make_store(model, train, 1.0 / train.n, nonnegative=model.pairwise_index)
    t0 = time.perf_counter()
    hist = Solver(dual, SolverConfig(passes=passes, gap_check=10)).run()
    m = model.metrics(dual.w, test)
    return {"test_mean_joint_error": m["error"], "test_pck": m["pck"], "gap": hist[-1]["gap"],
            "primal": hist[-1]["primal"], "passes": hist[-1]["passes"], "seconds": time.perf_counter() - t0}


def end_to_end_pose(net, tr, te, epochs: int) -> dict:
    """Stage-1 network and a TreeSSVMHead trained together on mean H_i + lam/2 ||w||^2 through
    tree_hinge (the distance-transform oracle), lam = 1/n, Adam; joint error of the final model."""
    net = copy.deepcopy(net).train()
    rest = TreePoseModel.for_data(PoseData(tr.scores, tr.joints), PARENTS).rest
    head = TreeSSVMHead(PARENTS, rest, scale=4.0)
    opt = torch.optim.Adam([{"params": net.parameters(), "lr": 2e-4}, {"params": head.parameters(), "lr": 1e-2}])
    gen = torch.Generator().manual_seed(0)
    lam = 1.0 / tr.n
    t0 = time.perf_counter()
    for epoch in range(epochs):
        total = 0.0
        for b in torch.randperm(tr.n, generator=gen).split(16):
            maps = torch.log_softmax(net(tr.images[b].float()).flatten(2), -1).view(len(b), len(PARENTS), 32, 32)
            loss = head(maps.double(), tr.joints[b]).mean() + lam / 2 * head.sq_norm()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(b)
        print(f"  end-to-end pose epoch {epoch}: loss {total / tr.n:.4f}", flush=True)
    net.eval()
    with torch.no_grad():
        pred = head.decode(heatmap_maps(net, te.images))
    dist = (pred - te.joints).to(torch.float64).norm(dim=-1)
    return {"test_mean_joint_error": float(dist.mean()),
            "test_pck": float(((pred - te.joints).abs().max(-1).values <= 1).double().mean()),
            "epochs": epochs, "seconds": time.perf_counter() - t0}


def pose(passes: float, epochs: int, finetune: int) -> dict:
    tr, te = make_pose_synth()
    res = {"template + deformations": tree_ssvm(PoseData(tr.scores, tr.joints), PoseData(te.scores, te.joints), passes)}
    t0 = time.perf_counter()
    net = train_heatmaps(tr.images, tr.joints, epochs=epochs,
                         log=lambda e, l: print(f"  heat-map epoch {e}: loss {l:.4f}", flush=True) if e % 10 == 9 else None)
    train_s = time.perf_counter() - t0
    maps = heatmap_maps(net, te.images)
    n, J, H, W = maps.shape
    flat = maps.reshape(n, J, H * W).argmax(-1)
    pred = torch.stack([flat // W, flat % W], -1)
    dist = (pred - te.joints).to(torch.float64).norm(dim=-1)
    res["CNN heat maps alone"] = {"test_mean_joint_error": float(dist.mean()),
                                  "test_pck": float(((pred - te.joints).abs().max(-1).values <= 1).double().mean()),
                                  "train_seconds": train_s, "epochs": epochs}
    res["CNN heat maps + deformations"] = tree_ssvm(heatmap_pose_data(net, tr.images, tr.joints),
                                                    heatmap_pose_data(net, te.images, te.joints), passes)
    res["CNN heat maps + deformations, end to end"] = end_to_end_pose(net, tr, te, finetune)
    for k, v in res.items():
        print(f"pose {k:30s}: mean joint error {v['test_mean_joint_error']:.3f} cells, PCK {v['test_pck']:.3f}"
              + (f", gap {v['gap']:.3g}" if "gap" in v else ""), flush=True)
    return res


def linear_chain(passes: float) -> dict:
    """The linear chain SSVM on the pixels (the papers' OCR model), BCFW + gap sampling."""
    from ssvm_torch.tasks import load_task
    task = load_task("ocr-large")
    out = {}
    for lam in (1.0 / task.n_train, 1e-3):
        t0 = time.perf_counter()
        store = task.store(lam)
        hist = Solver(store, SolverConfig(passes=passes, gap_check=10)).run()
        m = task.model.metrics(store.w, task.test)
        out[f"lam{lam:.3g}"] = {"lam": lam, "test_error": m["error"], "test_letter_error": m["position_error"],
                                "gap": hist[-1]["gap"], "passes": hist[-1]["passes"], "seconds": time.perf_counter() - t0}
        print(f"ocr linear chain lam {lam:.3g}: test error {m['error']:.4f} per word, {m['position_error']:.4f} "
              f"per letter, gap {hist[-1]['gap']:.3g}", flush=True)
    return out


def ocr(runs: list[str], passes: float) -> dict:
    _, test = load_ocr("large")
    out = {"linear chain (pixels)": linear_chain(passes)}
    for run in runs:
        run = Path(run)
        cfg = json.loads((run / "config.json").read_text())
        hist = json.loads((run / "history.json").read_text())
        preds = load_torch(run / "test_predictions.pt", "predictions")["predictions"]
        pred = torch.cat(preds)
        wrong = (pred != test.Y).to(torch.float64)
        per_word = ChainModel.for_data(test).ragged_loss(test, pred)
        last = hist[-1]
        assert abs(float(per_word.mean()) - last["test_error"]) < 1e-12, run
        stages = {}
        for r in hist:
            stages.setdefault(r["stage"], []).append(r.get("seconds", float("nan")))
        out.setdefault(cfg["method"], {})[f"seed{cfg['seed']}"] = {"run": str(run), "seed": cfg["seed"], "test_error": float(per_word.mean()),
                              "test_letter_error": float(wrong.mean()), "train_error": last["train_error"],
                              "epochs": len([r for r in hist if r["stage"] != "two-stage"]),
                              "s_per_epoch": {k: statistics.median(v) for k, v in stages.items()},
                              "gap": last.get("gap"), "history": hist}
        print(f"ocr {cfg['method']:12s} seed {cfg['seed']}: test error {per_word.mean():.4f} per word, {wrong.mean():.4f} per letter",
              flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["pose"], choices=["pose", "ocr"])
    ap.add_argument("--passes", type=float, default=60)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--finetune", type=int, default=10, help="end-to-end pose epochs through tree_hinge")
    ap.add_argument("--runs", nargs="*", default=[])
    args = ap.parse_args()
    torch.set_num_threads(2)
    meta = {"machine": platform.platform(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    RESULTS.mkdir(exist_ok=True)
    if "pose" in args.parts:
        res = {"meta": {**meta, "passes": args.passes, "epochs": args.epochs, "finetune": args.finetune},
               "results": pose(args.passes, args.epochs, args.finetune)}
        (RESULTS / "deep_pose.json").write_text(json.dumps(res, indent=1))
    if "ocr" in args.parts:
        (RESULTS / "deep_ocr.json").write_text(json.dumps({"meta": {**meta, "linear_passes": args.passes},
                                                          "results": ocr(args.runs, args.passes)}, indent=1))


if __name__ == "__main__":
    main()
