"""``ssvm-path``: eps-approximate (or heuristic) regularization path of an SSVM for all lambda
(Osokin et al. 2016, Section 4, Alg. 6-7; App. K), optionally with the grid-search baselines.

Outputs in ``--out DIR``:
  path.pt    {"lambdas": (J,) breakpoints, descending; "W": (J, d) float64; "ells": (J,); "eps"; "lam_end";
              "kappa"; "heuristic"}. For lam_{j+1} <= lam <= lam_j the path's w is W[j] and ell = ells[j] lam / lam_j
              (Prop. 1); for lam >= lam_1, w = lam_1 / lam W[0] and ell = ells[0]; valid down to lam_end. W is
              stored as a checkpoint's mostly-zero tensors are (its non-zero entries) where that halves it:
              ``RegPath.load`` / ``ssvm_torch.outputs.load_torch`` give the matrix.
  path.json  per breakpoint: lam, gap (exact duality gap at the breakpoint), passes and time_s (cumulative
             effective passes and solver seconds), train/test error (+ rho, Delta of Prop. 1).
  checkpoint.pt  (with --checkpoint) the path's state after every breakpoint: --resume continues it exactly (the
             breakpoints, W and the records but their times equal the uninterrupted path's).
  grid_warm.json / grid_cold.json  with --grid: lam = 2^15 ... 2^-15 (down to --lam-min), each solved
             to gap <= eps, warm (keep-primal) or cold; same fields.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from ..atomic import atomic_write_bytes
from ..devices import parse_device
from ..errors import RunInterrupted, SSVMInputError, check
from ..outputs import RunDir, load_checkpoint
from ..path import RegPath, check_path_options, cold_starts, grid_lambdas, grid_search, regularization_path
from ..solvers import SAMPLERS, STEPS, SolverConfig
from ..tasks import Problem, load_task
from .entry import command_parser, run_command
from .checkpoints import CheckpointWrites, check_every, check_resume_file
from .interrupts import stop_on_signal


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("ssvm-path", "Compute the eps-approximate (or heuristic) regularization path of a structured SVM for all "
                       "lambda (Osokin et al. 2016, Alg. 6-7), optionally with the grid-search baselines. Writes "
                       "path.pt, path.json and config.json to --out.")
    p.add_argument("--train-size", type=int, default=None, help="keep the first N training examples (where supported); None = all")
    p.add_argument("--eps", type=float, default=0.1, help="duality gap guaranteed along the path")
    p.add_argument("--kappa", type=float, default=None,
                   help="solve each breakpoint to kappa * eps; None = 0.9, or 0.7 with --heuristic")
    p.add_argument("--heuristic", action="store_true", help="App. K: stop on stale gap estimates (not certified)")
    p.add_argument("--lam-min", type=float, default=1e-5, help="stop the path below this lambda")
    p.add_argument("--sampling", choices=sorted(SAMPLERS), default="gap", help="BCFW block sampling")
    p.add_argument("--step", choices=STEPS, default="fw", help="BCFW step: fw, pairwise, away or best")
    p.add_argument("--cache", action="store_true", help="gap-based caching of corners (Alg. 5)")
    p.add_argument("--gap-check", type=float, default=1, help="passes of block steps between exact gap checks")
    p.add_argument("--gated", action="store_true",
                   help="pay each exact gap pass only once the gap estimate is <= the target, checking the estimate "
                        "every --gap-check passes (e.g. --gap-check 0.1 --gated; docs/solvers.md)")
    p.add_argument("--max-passes", type=float, default=1000, help="cap on each breakpoint's solve")
    p.add_argument("--eval-every", type=int, default=1, metavar="K",
                   help="the task's train / test errors in every K-th breakpoint's record (the first included) and "
                        "in the last; 0 = the last only (each costs a decoding of both splits, never solver time)")
    p.add_argument("--grid", action="store_true", help="also run grid search 2^15 ... 2^-15, warm and cold")
    p.add_argument("--seed", type=int, default=0, help="seed of the block sampling")
    p.add_argument("--device", default="cpu", help="where the solver state lives: cpu or cuda[:N]")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--checkpoint", action="store_true",
                   help="write checkpoint.pt (the path's state) after every breakpoint, for --resume")
    p.add_argument("--checkpoint-every", type=float, default=None, metavar="SECONDS",
                   help="with --checkpoint: write at a breakpoint only once SECONDS have passed since the last write "
                        "(the last one is always written); None = after every breakpoint")
    p.add_argument("--resume", default=None, help="checkpoint.pt of a path to continue exactly (same options); None = a new path")
    p.add_argument("--out", default="runs/path", help="output directory (refused if it holds another run)")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    return p


def path_task(dataset: str, train_size=None, device="cpu") -> Problem:
    """The training task of ``ssvm-train --dataset`` for a path (its store is built at lam = 1)."""
    return load_task(dataset, train_size=train_size, device=device)


def run(args) -> dict:
    check(args.threads >= 1, "threads", "an int >= 1", args.threads)
    torch.set_num_threads(args.threads)
    kappa = args.kappa if args.kappa is not None else (0.7 if args.heuristic else 0.9)
    cfg = SolverConfig(solver="bcfw", sampling=args.sampling, step=args.step, cache=args.cache,
                       gap_check=args.gap_check, seed=args.seed).validate()
    check_path_options(args.eps, kappa, args.lam_min, args.max_passes)   # all of it before --out is created
    check(isinstance(args.eval_every, int) and args.eval_every >= 0, "eval_every", "an int >= 0 (0: the last "
          "breakpoint only)", args.eval_every)
    check_every(args.checkpoint_every, args.checkpoint)
    parse_device(args.device)
    task = path_task(args.dataset, args.train_size, args.device)
    dual = task.store(1.0, device=args.device)
    if not dual.supports_path:
        raise SSVMInputError(f"dataset: {args.dataset!r} trains a box-constrained store, which does not support the "
                             "regularization path")
    # the path a checkpoint belongs to: another dataset, size, eps, kappa or solver is refused by name
    identity = {"command": "ssvm-path", "dataset": args.dataset, "train_size": args.train_size, "n": task.n_train,
                "d": task.d, "eps": args.eps, "kappa": kappa, "heuristic": args.heuristic, "gated": args.gated,
                "max_passes": args.max_passes, "solver": asdict(cfg)}
    check_resume_file(args.resume)
    resume = load_checkpoint(args.resume, identity) if args.resume else None
    with RunDir(args.out, overwrite=args.overwrite, resume=args.resume) as run_dir:   # checked before the path
        run_dir.write_config({"command": "ssvm-path", "dataset": args.dataset, "train_size": args.train_size,
                              "eps": args.eps, "kappa": kappa, "heuristic": args.heuristic, "lam_min": args.lam_min,
                              "grid": args.grid, "max_passes": args.max_passes, "device": args.device,
                              "solver": asdict(cfg), "resume": args.resume,
                              "checkpoint_every": args.checkpoint_every})
        return _path(args, cfg, kappa, task, dual, run_dir.path, identity, resume)


def _path(args, cfg, kappa, task: Problem, dual, out: Path, identity: dict, resume: dict | None) -> dict:

    def show(rec):
        if not args.quiet:
            print(f"lam {rec['lam']:11.5g}  gap {rec['gap']:.4f}  passes {rec['passes']:8.1f}  "
                  f"time {rec['time_s']:7.2f} s  test {rec.get('test_error', float('nan')):.4f}", flush=True)
    if not args.quiet:
        print(f"{args.dataset}: n = {task.n_train}, d = {task.d}, eps = {args.eps}, kappa = {kappa}, "
              f"{'heuristic' if args.heuristic else 'eps-approximate'} path down to {args.lam_min:g}", flush=True)
    writes = CheckpointWrites(out / "checkpoint.pt", identity, args.checkpoint_every)

    def checkpoint(state):
        writes.offer(lambda: state, f"at breakpoint {len(state['lambdas'])}")
    # --eval-every: the errors of every k-th record, counted from the path's first (a resumed path's included)
    made = [len(resume.get("lambdas") or []) if resume is not None and resume.get("format") != GRID_PHASE else 0]

    def evaluate(w):
        made[0] += 1
        return task.evaluate(w) if args.eval_every and (made[0] - 1) % args.eval_every == 0 else {}
    grid_state = resume if resume is not None and resume.get("format") == GRID_PHASE else None
    if grid_state is not None:                   # the path was done: its grids were under way
        if not (out / "path.pt").is_file():
            raise SSVMInputError(f"resume: {args.resume} is a checkpoint of this run's grid search; it needs the "
                                 f"run's path.pt in {out}, which is missing")
        path, interrupted, resume = RegPath.load(out), False, None
        if not args.quiet:
            print(f"resumed the {'warm' if grid_state.get('warm') else 'cold'} grid from {args.resume}", flush=True)
    else:
        if resume is not None and not args.quiet:
            print(f"resumed from {args.resume} after {len(resume.get('lambdas') or [])} breakpoints", flush=True)
        with stop_on_signal("ssvm-path") as requested:   # Ctrl-C: finish the breakpoint, keep the path so far
            path = regularization_path(dual, args.eps, kappa=kappa, heuristic=args.heuristic, lam_min=args.lam_min,
                                       config=cfg, evaluate=evaluate, max_passes=args.max_passes, progress=show,
                                       gated=args.gated, interrupt=lambda: requested() or writes.failed,
                                       checkpoint=checkpoint if args.checkpoint else None, resume=resume)
            writes.flush()                           # the last breakpoint, if --checkpoint-every skipped it
            interrupted = requested()
        if "test_error" not in path.records[-1]:     # the last breakpoint's errors, whatever --eval-every
            path.records[-1].update(task.evaluate(path.rows.row(-1).to(dual.w)))
        path.save(out)
        if args.checkpoint and not args.quiet and not writes.failed:
            print(writes.summary(), flush=True)
    if writes.failed:
        raise writes.error(f"the path stopped there and wrote {out / 'path.pt'} and {out / 'path.json'}")
    if interrupted:
        how = (f"resume with --resume {out / 'checkpoint.pt'}" if args.checkpoint else
               f"a path with --checkpoint can be resumed; --lam-min {path.lam_end:.4g} stops a rerun there")
        raise RunInterrupted(f"interrupted after {len(path.lambdas)} breakpoints; wrote {out / 'path.pt'} and "
                             f"{out / 'path.json'}, the path certified from lambda = {float(path.lambdas[0]):.4g} down "
                             f"to {path.lam_end:.4g}; {how}", requested.signal)
    # the lowest test error along the path is the papers' analysis figure (test error against lambda),
    # an oracle no model selection may use: lambda is chosen on held-out data (ssvm-train --select-lam)
    low = min((r for r in path.records if "test_error" in r), key=lambda r: r["test_error"])
    summary = {"breakpoints": len(path.lambdas), "lam_end": path.lam_end, "passes": path.records[-1]["passes"],
               "time_s": path.records[-1]["time_s"], "oracle_lam": low["lam"], "oracle_test_error": low["test_error"]}
    if not args.quiet:
        end = "certified to lambda = 0" if path.lam_end == 0 else f"down to lambda = {path.lam_end:.4g}"
        print(f"path: {summary['breakpoints']} breakpoints, {end}; {summary['passes']:.0f} effective passes, "
              f"{summary['time_s']:.2f} s; lowest test error along the path {low['test_error']:.4f} at lambda = "
              f"{low['lam']:.4g} (an oracle figure, not a model selection: choose lambda on held-out data with "
              "ssvm-train --select-lam)")
    if args.grid:
        _grids(args, cfg, task, dual, out, identity, grid_state, summary, show)
    if not args.quiet:
        print(f"wrote {out / 'path.pt'} and {out / 'path.json'}")
    return summary


#: checkpoint.pt's format in the grid phase (``--grid --checkpoint``): which grid and its state
GRID_PHASE = "ssvm_torch.path-grid/1"


def _grids(args, cfg, task: Problem, dual, out: Path, identity: dict, resume: dict | None, summary: dict,
           show) -> None:
    """--grid: the warm grid, then the cold one (grid_warm.json / grid_cold.json); with --checkpoint the state of
    the grid under way after every lambda, from which ``resume`` (a :data:`GRID_PHASE` state) continues exactly
    (a state of the cold grid: the warm one's file is read back)."""
    lams = [v for v in grid_lambdas() if v >= args.lam_min]
    writes = CheckpointWrites(out / "checkpoint.pt", identity, args.checkpoint_every)

    def checkpoint(warm):
        def write(state):
            writes.offer(lambda: {"format": GRID_PHASE, "warm": warm, "grid": state},
                         f"after {len(json.loads(state['records']))} lambdas of the {'warm' if warm else 'cold'} grid")
        return write if args.checkpoint else None
    for warm in (True, False):
        name = "warm" if warm else "cold"
        state = None
        if resume is not None:
            check(isinstance(resume.get("warm"), bool), "resume.warm", "True or False (which grid)", resume.get("warm"))
            if resume["warm"] != warm:               # the warm grid was done before the cold one's state
                recs = json.loads((out / "grid_warm.json").read_text())
                summary["grid_warm"] = {"passes": recs[-1]["passes"], "time_s": recs[-1]["time_s"]}
                continue
            state, resume = resume.get("grid"), None
        with stop_on_signal("ssvm-path") as requested:
            recs = grid_search(cold_starts(dual), args.eps, lams, warm=warm, config=cfg, evaluate=task.evaluate,
                               max_passes=args.max_passes, progress=show, gated=args.gated,
                               interrupt=lambda: requested() or writes.failed, checkpoint=checkpoint(warm),
                               resume=state)
            writes.flush()                           # this grid's last state, if --checkpoint-every skipped it
            stopped = requested()
        atomic_write_bytes(out / f"grid_{name}.json", json.dumps(recs, indent=1).encode())
        where = f"in the {name} grid after {len(recs)} of {len(lams)} lambdas; wrote {out / f'grid_{name}.json'} with them"
        if writes.failed:
            raise writes.error(f"stopped {where}")
        if stopped:
            how = (f"resume with --resume {out / 'checkpoint.pt'}" if args.checkpoint
                   else "with --checkpoint the grids can be resumed")
            raise RunInterrupted(f"interrupted {where}; {how}", requested.signal)
        summary[f"grid_{name}"] = {"passes": recs[-1]["passes"], "time_s": recs[-1]["time_s"]}
        if not args.quiet:
            print(f"grid search ({name}): {len(recs)} lambdas, {recs[-1]['passes']:.0f} effective passes, "
                  f"{recs[-1]['time_s']:.2f} s")


def main(argv=None) -> int:
    return run_command("ssvm-path", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
