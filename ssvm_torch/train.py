"""``ssvm-train``: train an SSVM with FW / BCFW (uniform, perm or gap sampling) / SSG and report the
exact duality gap and test error.

Outputs in ``--out DIR``:
  history.json  one record per exact gap check: passes, oracle_calls, steps, time_s, primal, dual, gap,
                gap_estimate, train_error, test_error (+ test_position_error, and avg_* with --averaging)
  model.pt      {"w": float64 tensor (d,), "ell": float, "lam": float, "dataset": str, "feature_layout": dict}
  checkpoint.pt the full solver state at the last gap check (with --checkpoint), for --resume
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from .datasets import DATASETS, load_dataset
from .errors import SSVMInputError, check, check_positive, run_cli
from .models import ChainModel
from .solvers import Solver, SolverConfig
from .solvers.engine import SOLVERS, STEPS
from .solvers.samplers import SAMPLERS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ssvm-train", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="ocr-small", help=f"one of {sorted(DATASETS) + list(FLAT_DATASETS) + list(GRAPH_DATASETS) + list(MATCHING_DATASETS)}")
    p.add_argument("--train-size", type=int, default=None,
                   help="conll2000 / segmentation-synth / pose-synth / hansards: keep the first N training examples")
    p.add_argument("--unary-only", action="store_true",
                   help="segmentation-synth / pose-synth: drop the pairwise features (the unaries-only baseline)")
    p.add_argument("--lam", type=float, default=None, help="regularization lambda of objective (1); default 1/n")
    p.add_argument("--solver", choices=SOLVERS, default="bcfw")
    p.add_argument("--sampling", choices=sorted(SAMPLERS), default="gap")
    p.add_argument("--step", choices=STEPS, default="fw",
                   help="BCFW step: fw (Alg. 1), pairwise (BCPFW, Alg. 3), away (BCAFW, Alg. 4), best of the three")
    p.add_argument("--cache", action="store_true", help="gap-based caching of corners (Alg. 5)")
    p.add_argument("--cache-F", type=float, default=0.25, help="cache hit if g_hat >= max(F g_i, nu g / n)")
    p.add_argument("--cache-nu", type=float, default=0.01)
    p.add_argument("--max-cache", type=int, default=50, help="cache entries per block")
    p.add_argument("--gap-check", type=float, default=10,
                   help="passes of block steps between exact gap checks (fractional: e.g. 0.1 = every n/10 steps)")
    p.add_argument("--gap-refresh", type=int, default=1,
                   help="every k-th gap check refreshes the sampler's block gaps (0: never; others only monitor)")
    p.add_argument("--passes", type=float, default=50, help="maximum effective passes (gap passes included)")
    p.add_argument("--gap-threshold", type=float, default=0.0, help="stop when the exact duality gap <= this")
    p.add_argument("--time-budget", type=float, default=math.inf, help="stop after this many solver seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--averaging", action="store_true", help="also report the weighted average (rho = 2/(k+2))")
    p.add_argument("--recompute-every", type=int, default=10, help="passes between exact recomputations of w")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 keeps batch-1 steps steady)")
    p.add_argument("--out", default="runs/latest", help="output directory")
    p.add_argument("--checkpoint", action="store_true", help="save the solver state at every gap check")
    p.add_argument("--resume", default=None, help="checkpoint.pt to resume from (same options)")
    p.add_argument("--quiet", action="store_true")
    return p


def _fmt(v, spec=".4g"):
    return "-" if v is None else format(v, spec)


FLAT_DATASETS = ("scene", "ocr-letters")
GRAPH_DATASETS = ("segmentation-synth", "pose-synth")
MATCHING_DATASETS = ("hansards",)


def _boxed_dual(model, args, dtype, pairwise: bool):
    """(lam, dense dual) with the model's pairwise weights kept >= 0 (App. H) when ``pairwise``."""
    from .solvers.box import BoxedDual
    lam = check_positive(args.lam if args.lam is not None else 1.0 / model.n, "lam")
    dual = model.dual(lam, device=args.device, dtype=dtype)
    return lam, (BoxedDual(dual, model.pairwise_index, lower=0.0) if pairwise else dual)


def _segmentation_task(args, dtype) -> dict:
    """Graph-cut segmentation (App. I.3) on the seeded synthetic superpixel graphs; the Potts
    weights are kept >= 0 by box constraints (App. H) so every oracle call is an exact min cut."""
    from .models.graphcut import GraphCutModel
    from .segmentation import make_segmentation_synth
    train, test = make_segmentation_synth()
    train = _keep(train, args, len(train))
    pairwise = not args.unary_only
    model = GraphCutModel(train, pairwise=pairwise, dtype=dtype, device=args.device)
    test_model = GraphCutModel(test, pairwise=pairwise, dtype=dtype, device=args.device)
    lam, dual = _boxed_dual(model, args, dtype, pairwise)

    def evaluate(w):
        te = test_model.errors(w)
        return {"train_error": model.errors(w)["error"], "test_error": te["error"],
                "test_position_error": te["node_error"]}
    layout = {"kind": "GraphCutModel", "d": model.d, "unary": [0, model.d_unary],
              "pairwise": [model.d_unary, model.d] if pairwise else None}
    return {"lam": lam, "dual": dual, "evaluate": evaluate, "n_train": model.n, "n_test": test_model.n,
            "d": model.d, "feature_layout": layout,
            "error_name": "class-balanced Hamming loss per image", "position_name": "per-node error"}


def _keep(data, args, n):
    if args.train_size is None:
        return data
    check(isinstance(args.train_size, int) and 1 <= args.train_size <= n, "train_size", f"an int in [1, {n}]",
          args.train_size)
    return data[:args.train_size] if isinstance(data, list) else data.subset(args.train_size)


def _pose_task(args, dtype) -> dict:
    """Tree-structured pose (App. I.4 model) on seeded synthetic stick figures: max-sum with
    generalized distance transforms; the quadratic deformation weights are kept >= 0 (App. H)."""
    from .models.pose import TreePoseModel
    from .pose import PARENTS, make_pose_synth
    train, test = make_pose_synth()
    train = _keep(train, args, train.n)
    pairwise = not args.unary_only
    model = TreePoseModel(train.scores, train.joints, PARENTS, pairwise=pairwise, dtype=dtype, device=args.device)
    test_model = TreePoseModel(test.scores, test.joints, PARENTS, rest=model.rest, pairwise=pairwise, dtype=dtype,
                               device=args.device)
    lam, dual = _boxed_dual(model, args, dtype, pairwise)

    def evaluate(w):
        te = test_model.errors(w)
        return {"train_error": model.errors(w)["error"], "test_error": te["error"], "test_pck": te["pck"],
                "test_position_error": te["loss"]}
    layout = {"kind": "TreePoseModel", "d": model.d, "unary": [0, model.J],
              "pairwise": [model.J, model.d] if pairwise else None, "parents": list(PARENTS),
              "rest": model.rest.tolist(), "scale": model.scale, "radius": model.radius}
    return {"lam": lam, "dual": dual, "evaluate": evaluate, "n_train": model.n, "n_test": test_model.n, "d": model.d,
            "feature_layout": layout, "error_name": "mean joint error in grid cells",
            "position_name": f"share of joints off by > {model.radius} cell (the loss)"}


def _hansards_task(args, dtype) -> dict:
    """Word alignment by bipartite matching with NULL on the Hansards gold standard; test error = AER."""
    from .alignment import EDGE_FEATURES, NULL_FEATURES, aer, load_hansards
    from .models.matching import MatchingModel
    train, test = load_hansards()
    train = _keep(train, args, len(train))
    model = MatchingModel.from_pairs(train, dtype=dtype, device=args.device)
    test_model = MatchingModel.from_pairs(test, dtype=dtype, device=args.device)
    lam = check_positive(args.lam if args.lam is not None else 1.0 / model.n, "lam")

    def evaluate(w):
        te = aer(test, test_model.links(w))
        return {"train_error": aer(train, model.links(w))["aer"], "test_error": te["aer"],
                "test_precision": te["precision"], "test_recall": te["recall"],
                "test_position_error": 1.0 - te["recall"]}
    layout = {"kind": "MatchingModel", "d": model.d, "edge": list(EDGE_FEATURES), "null_e": list(NULL_FEATURES),
              "null_f": list(NULL_FEATURES)}
    return {"lam": lam, "dual": model.dual(lam, device=args.device, dtype=dtype), "evaluate": evaluate,
            "n_train": model.n, "n_test": test_model.n, "d": model.d, "feature_layout": layout,
            "error_name": "alignment error rate (AER)", "position_name": "1 - recall of sure links"}


def build_task(args, dtype) -> dict:
    """Model, dual, evaluation function and descriptions for ``args.dataset``."""
    if args.unary_only and args.dataset not in GRAPH_DATASETS:
        raise SSVMInputError(f"unary_only: only supported for {GRAPH_DATASETS}, not {args.dataset!r}")
    if args.dataset == "pose-synth":
        return _pose_task(args, dtype)
    if args.dataset in MATCHING_DATASETS:
        return _hansards_task(args, dtype)
    if args.dataset in GRAPH_DATASETS:
        return _segmentation_task(args, dtype)
    if args.dataset in FLAT_DATASETS:
        if args.train_size is not None:
            raise SSVMInputError(f"train_size: not supported for {args.dataset!r}")
        from .datasets import load_ocr_letters, load_scene
        from .models import MulticlassModel, MultiLabelModel
        if args.dataset == "scene":
            Xtr, Ytr, Xte, Yte = load_scene(dtype)
            model = MultiLabelModel(Xtr, Ytr, dtype=dtype)
            names = ("Hamming loss, fraction of wrong labels", "per-image 0/1 error")
        else:
            Xtr, Ytr, Xte, Yte = load_ocr_letters("small", dtype)   # dense blocks: n x d = 4,617 x 3,354
            model = MulticlassModel(Xtr, Ytr, 26, dtype=dtype)
            names = ("0/1 error per letter", "0/1 error per letter")
        lam = check_positive(args.lam if args.lam is not None else 1.0 / model.n, "lam")

        def evaluate(w):
            w64 = w.detach().to("cpu", torch.float64)
            pred_tr, pred_te = model.predict(w64, Xtr), model.predict(w64, Xte)
            wrong = (pred_te != Yte).double()
            per_example = wrong.reshape(len(Yte), -1)
            return {"train_error": float((pred_tr != Ytr).double().mean()), "test_error": float(wrong.mean()),
                    "test_position_error": float((per_example.max(1).values if wrong.dim() > 1 else wrong).mean())}
        layout = {"kind": type(model).__name__, "d": model.d}
        return {"lam": lam, "dual": model.dual(lam, device=args.device, dtype=dtype), "evaluate": evaluate,
                "n_train": model.n, "n_test": len(Yte), "d": model.d, "feature_layout": layout,
                "error_name": names[0], "position_name": names[1]}
    train, test = load_dataset(args.dataset, args.train_size)
    lam = check_positive(args.lam if args.lam is not None else 1.0 / train.n, "lam")
    model = ChainModel.for_data(train)

    def evaluate(w):
        w64 = w.detach().to("cpu", torch.float64)
        tr = model.errors(w64, train)
        labels = model.decode(w64, test)
        per_seq = model.loss(test, labels)
        rec = {"train_error": tr["error"], "test_error": float(per_seq.mean()),
               "test_position_error": float((labels != test.Y).double().mean())}
        if "tag_names" in test.meta:
            from .conll import chunk_f1
            rec["test_f1"] = chunk_f1(test, labels)["f1"]
        return rec
    unit = "sentence" if args.dataset == "conll2000" else "word"
    return {"lam": lam, "dual": model.dual(train, lam, device=args.device, dtype=dtype), "evaluate": evaluate,
            "n_train": train.n, "n_test": test.n, "d": model.d, "feature_layout": model.feature_layout,
            "error_name": f"per {unit}, normalized Hamming",
            "position_name": f"per-{'token' if unit == 'sentence' else 'letter'} error"}


def run(args) -> dict:
    if args.threads < 1:
        raise SSVMInputError(f"threads: expected an int >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        raise SSVMInputError(f"device: expected a torch device such as 'cpu' or 'cuda:0', got {args.device!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SSVMInputError(f"device: {args.device!r} requested but no CUDA device is available")
    dtype = getattr(torch, args.dtype)
    task = build_task(args, dtype)
    lam, dual, evaluate = task["lam"], task["dual"], task["evaluate"]
    cfg = SolverConfig.from_options(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    solver = None

    def progress(rec):
        if not args.quiet:
            print(f"pass {rec['passes']:7.1f}  gap {_fmt(rec['gap'], '.3e')}  primal {rec['primal']:.6f}  "
                  f"dual {_fmt(rec['dual'], '.6f')}  train {rec['train_error']:.4f}  test {rec['test_error']:.4f}  "
                  + (f"F1 {rec['test_f1']:.2f}  " if "test_f1" in rec else "") +
                  f"[{rec['time_s']:.2f} s]", flush=True)
        if args.checkpoint and solver is not None:
            tmp = out / "checkpoint.pt.tmp"
            torch.save(solver.state_dict(), tmp)
            os.replace(tmp, out / "checkpoint.pt")      # atomic: never a half-written checkpoint

    solver = Solver(dual, cfg, evaluate=evaluate, progress=progress)
    if args.resume:
        path = Path(args.resume)
        if not path.is_file():
            raise SSVMInputError(f"resume: expected a checkpoint file, {path} does not exist")
        solver.load_state_dict(torch.load(path, weights_only=False))
    if not args.quiet:
        print(f"{args.dataset}: n = {task['n_train']} train / {task['n_test']} test examples, d = {task['d']}, lam = {lam:g}, "
              f"solver = {args.solver}" + (f" ({args.sampling} sampling)" if args.solver != "fw" else "")
              + (f", {args.step} steps" if args.solver == "bcfw" else "") + (", cache" if args.cache else ""),
              flush=True)
    t0 = time.perf_counter()
    history = solver.run()
    wall = time.perf_counter() - t0
    last = history[-1]
    (out / "history.json").write_text(json.dumps(history, indent=1))
    torch.save({"w": dual.w.detach().to("cpu", torch.float64), "ell": dual.ell, "lam": lam,
                "dataset": args.dataset, "feature_layout": task["feature_layout"]}, out / "model.pt")
    if not args.quiet:
        gap = "n/a (SSG keeps no dual)" if last["gap"] is None else f"{last['gap']:.6e}"
        print(f"stopped: {solver.state.stop_reason} after {last['passes']:.1f} effective passes, "
              f"{last['time_s']:.2f} s solver time ({wall:.2f} s wall incl. evaluation)")
        print(f"exact duality gap: {gap}")
        if "cache_hit_rate" in last:
            print(f"steps: {last['fw_steps']} FW, {last['pairwise_steps']} pairwise, {last['away_steps']} away, "
                  f"{last['drop_steps']} drop; cache hit rate {last['cache_hit_rate']:.3f}")
        print(f"test error: {last['test_error']:.4f} ({task['error_name']}); "
              f"{task['position_name']}: {last['test_position_error']:.4f}")
        if "test_f1" in last:
            print(f"test chunk F1: {last['test_f1']:.2f}")
        print(f"wrote {out / 'history.json'} and {out / 'model.pt'}")
    return last


def main(argv=None) -> int:
    return run_cli("ssvm-train", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
