"""``ssvm-train --select-lam``: lambda (and the feature cut-off) chosen on a development split by the warm grid
of :func:`ssvm_torch.selection.select_lambda`, before the refit on all the training data that
:mod:`ssvm_torch.cli.train` runs."""
from __future__ import annotations

import gc

from ..errors import RunInterrupted
from ..outputs import RunDir, save_selection
from ..selection import select_lambda
from ..solvers import SolverConfig
from ..tasks import load_task


def select_on_dev(args, cfg: SolverConfig, device, dtype, run_dir: RunDir, featurization: dict, requested) -> dict:
    """--select-lam: the warm grid on the fit / dev split for each cut-off of --min-counts; the best
    (lambda, cut-off) by the dev score. selection.json is written before the refit. ``requested``: the
    signal flag; once set the grid ends after the lambda being solved, selection.json gets the finished
    rows (``"complete": false``) and the run stops (RunInterrupted)."""
    speak, rows, best = not args.quiet, [], None

    def progress(rec):
        if speak:
            score = (f"dev F1 {rec['test_f1']:.2f}" if "test_f1" in rec else f"dev UAS {rec['test_uas']:.2f}"
                     if "test_uas" in rec else f"dev error {rec['test_error']:.4f}")
            print(f"  lam {rec['lam']:<8g} {score}  gap {rec['gap']:.3e}  [{rec['passes']:.0f} passes, "
                  f"{rec['time_s']:.1f} s]", flush=True)
    for min_count in args.min_counts or [featurization["min_count"]]:
        fit = None                                            # the previous cut-off's problem goes before the next loads
        fit = load_task(args.dataset, train_size=args.train_size, device=device, dtype=dtype, heldout=args.heldout,
                        **{**featurization, "min_count": min_count})
        if speak:
            print(f"selecting lambda on a dev split: {fit.n_train} fit / {fit.n_test} dev examples, min count "
                  f"{min_count} (d = {fit.d:,}), lams {', '.join(f'{v:g}' for v in sorted(args.lams, reverse=True))}, "
                  f"at most {args.passes:g} passes each", flush=True)
        lam, table = select_lambda(fit, args.lams, cfg, passes=args.passes, device=device, dtype=dtype,
                                   kernels=args.kernels, progress=progress, interrupt=requested)
        rows += [{"min_count": min_count, "d": fit.d, **r} for r in table]
        key = next(k for k in ("dev_f1", "dev_uas", "dev_error") if k in table[0])
        score = next(r[key] for r in table if r["lam"] == lam) * (-1 if key == "dev_error" else 1)
        if best is None or score > best[0]:                 # ties keep the smaller cut-off (the larger model)
            best = (score, lam, min_count)
        if requested():
            break
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
                             f"far lam = {best[1]:g}, min count {best[2]}); run --select-lam again for the whole grid, "
                             f"or train with --lam {best[1]:g} --min-count {best[2]}", requested.signal)
    del fit
    gc.collect()                                              # the fit split's store goes before the refit's is built
    run_dir.begin()                                           # the run's first file
    save_selection(run_dir.path, selection)
    if speak:
        n_refit = selection["n_fit"] if args.heldout == "dev" else selection["n_fit"] + selection["n_dev"]
        print(f"selected lam = {best[1]:g}, min count {best[2]}; refitting on all {n_refit} training examples",
              flush=True)
    return selection
