"""``ssvm-train --select-lam``: lambda (and the feature cut-off) chosen on a development split by the warm grid
of :func:`ssvm_torch.selection.select_lambda`, before the refit on all the training data that
:mod:`ssvm_torch.cli.train` runs."""
from __future__ import annotations

import gc
import json
from dataclasses import asdict

from ..errors import RunInterrupted, SSVMInputError, check
from ..outputs import RunDir, load_checkpoint, save_selection
from ..selection import select_lambda
from ..solvers import SolverConfig
from ..tasks import load_task
from .checkpoints import CheckpointWrites


#: the format tag of the grid's checkpoint.pt (``--select-lam --checkpoint``)
SELECTION_STATE = "ssvm_torch.selection/1"


def select_on_dev(args, cfg: SolverConfig, device, dtype, run_dir: RunDir, featurization: dict,
                  requested) -> tuple[dict, bool]:
    """--select-lam: the warm grid on the fit / dev split for each cut-off of --min-counts; the best
    (lambda, cut-off) by the dev score. selection.json is written before the refit. ``requested``: the
    signal flag; once set the grid ends after the lambda being solved, selection.json gets the finished
    rows (``"complete": false``) and the run stops (RunInterrupted). With ``--checkpoint`` checkpoint.pt holds the
    grid's state after every lambda (the cut-offs done, the warm grid's dual); ``--resume`` continues the grid
    exactly, or, given the refit's checkpoint (the grid done: selection.json complete), skips to the refit.
    Returns (the selection, whether the refit resumes from ``--resume``)."""
    speak, rows, best = not args.quiet, [], None
    counts = list(args.min_counts or [featurization["min_count"]])
    identity = {"command": "ssvm-train --select-lam", "dataset": args.dataset, "train_size": args.train_size,
                **{k: v for k, v in featurization.items() if k != "min_count"}, "heldout": args.heldout,
                "lams": sorted(float(v) for v in args.lams), "min_counts": counts, "passes": args.passes,
                "solver": asdict(cfg)}
    resume = load_checkpoint(args.resume, identity) if args.resume else None
    if resume is not None and resume.get("format") != SELECTION_STATE:       # the refit's: the grid is done
        return _finished_selection(run_dir, args.resume), True
    grid = None
    if resume is not None:
        check(resume.get("min_count") in counts, "resume.min_count", f"one of {counts}", resume.get("min_count"))
        try:
            rows = json.loads(resume.get("rows"))
        except (TypeError, ValueError):
            rows = None
        check(isinstance(rows, list), "resume.rows", "the JSON rows of the cut-offs done", str(resume.get("rows"))[:80])
        best = resume.get("best")
        best = tuple(best) if isinstance(best, (list, tuple)) else None
        counts = counts[counts.index(resume["min_count"]):]
        grid = resume.get("grid")
        if speak:
            print(f"resumed the lambda grid from {args.resume} at min count {resume['min_count']}", flush=True)
    writes = CheckpointWrites(run_dir.path / "checkpoint.pt", identity, args.checkpoint_every)

    def checkpoint(min_count):
        def write(state):
            def full():              # the rows and best of the cut-offs before this one (called before they grow)
                run_dir.begin()                          # the run's first file
                return {"format": SELECTION_STATE, "min_count": min_count, "rows": json.dumps(rows), "best": best,
                        "grid": state}
            writes.offer(full, f"after {len(json.loads(state['records']))} lambdas at min count {min_count}")
        return write if args.checkpoint else None

    def progress(rec):
        if speak:
            score = (f"dev F1 {rec['test_f1']:.2f}" if "test_f1" in rec else f"dev UAS {rec['test_uas']:.2f}"
                     if "test_uas" in rec else f"dev error {rec['test_error']:.4f}")
            print(f"  lam {rec['lam']:<8g} {score}  gap {rec['gap']:.3e}  [{rec['passes']:.0f} passes, "
                  f"{rec['time_s']:.1f} s]", flush=True)
    for min_count in counts:
        fit = None                                            # the previous cut-off's problem goes before the next loads
        fit = load_task(args.dataset, train_size=args.train_size, device=device, dtype=dtype, heldout=args.heldout,
                        **{**featurization, "min_count": min_count})
        if speak:
            print(f"selecting lambda on a dev split: {fit.n_train} fit / {fit.n_test} dev examples, min count "
                  f"{min_count} (d = {fit.d:,}), lams {', '.join(f'{v:g}' for v in sorted(args.lams, reverse=True))}, "
                  f"at most {args.passes:g} passes each", flush=True)
        lam, table = select_lambda(fit, args.lams, cfg, passes=args.passes, device=device, dtype=dtype,
                                   kernels=args.kernels, progress=progress,
                                   interrupt=lambda: requested() or writes.failed,
                                   checkpoint=checkpoint(min_count), resume=grid)
        writes.flush()                                      # this cut-off's last state, if --checkpoint-every skipped it
        grid = None
        rows += [{"min_count": min_count, "d": fit.d, **r} for r in table]
        key = next(k for k in ("dev_f1", "dev_uas", "dev_error") if k in table[0])
        score = next(r[key] for r in table if r["lam"] == lam) * (-1 if key == "dev_error" else 1)
        if best is None or score > best[0]:                 # ties keep the smaller cut-off (the larger model)
            best = (score, lam, min_count)
        if requested() or writes.failed:
            break
    if writes.failed:
        raise writes.error("the grid stopped there")
    selection = {"lam": best[1], "min_count": best[2], "heldout": args.heldout, "n_fit": fit.n_train,
                 "n_dev": fit.n_test, "passes_per_lam": args.passes, "table": rows}
    grid = len(args.lams) * len(args.min_counts or [None])
    if requested():                                           # the rows so far, marked: not a selection
        selection.update(complete=False, rows_of_grid=f"{len(rows)} of {grid}")
        run_dir.begin()
        save_selection(run_dir.path, selection)
        cut = rows[-1]["stop_reason"] == "interrupted"
        raise RunInterrupted(f"interrupted in the lambda grid after {len(rows)} of {grid} rows"
                             + (" (the last stopped early, at its interrupted gap check)" if cut else "")
                             + f"; wrote {run_dir.path / 'selection.json'} with them (\"complete\": false; the best so "
                             f"far lam = {best[1]:g}, min count {best[2]}); "
                             + (f"resume the grid with --resume {run_dir.path / 'checkpoint.pt'}" if args.checkpoint
                                else "run --select-lam again for the whole grid (with --checkpoint: resumable)")
                             + f", or train with --lam {best[1]:g} --min-count {best[2]}", requested.signal)
    del fit
    gc.collect()                                              # the fit split's store goes before the refit's is built
    run_dir.begin()                                           # the run's first file
    save_selection(run_dir.path, selection)
    if speak:
        n_refit = selection["n_fit"] if args.heldout == "dev" else selection["n_fit"] + selection["n_dev"]
        print(f"selected lam = {best[1]:g}, min count {best[2]}; refitting on all {n_refit} training examples",
              flush=True)
    return selection, False


def _finished_selection(run_dir: RunDir, resume) -> dict:
    """selection.json of the run whose refit ``resume`` continues (the grid's result, complete)."""
    path = run_dir.path / "selection.json"
    try:
        selection = json.loads(path.read_text())
    except (OSError, ValueError):
        selection = None
    if not isinstance(selection, dict) or selection.get("complete") is False or "lam" not in selection:
        raise SSVMInputError(f"resume: {resume} is the refit's checkpoint; it needs the complete selection.json of its "
                             f"grid in {run_dir.path}, which is missing or incomplete")
    return selection
