"""``ssvm-train --solver perceptron``: the (averaged) structured perceptron of :mod:`ssvm_torch.perceptron` on any
task of the command, with the run directory of every ``ssvm-train`` run.

The run directory holds config.json (the options, the perceptron's settings), history.json (one record per epoch:
epoch, mistakes, train_loss, updates, eta, time_s, and the task's errors of the point the run returns then --
train / test error, F1, UAS -- at every ``--eval-every``-th epoch and the last: reported, never used to choose),
model.pt (the returned point ``w``, the average unless ``--no-average``, and ``epochs``; ``lam`` and ``ell`` are
NaN: the perceptron has no regularizer and no dual; the last iterate is in checkpoint.pt) and the task's test
predictions. With ``--checkpoint``, checkpoint.pt holds the run's state after every epoch (``--checkpoint-every
SECONDS``: at most that often, and at the end); ``--resume`` continues it exactly, to a larger ``--epochs`` too.
Ctrl-C / SIGTERM stops the run at the end of the current epoch, which is written as at any other stop.
"""
from __future__ import annotations

import math
import time

from .. import distributed
from ..errors import RunInterrupted, SSVMInputError
from ..outputs import PREDICTIONS_BYTES, RunDir, load_checkpoint, save_predictions
from ..perceptron import PerceptronConfig, PerceptronResult, check_resumable, train_perceptron
from ..tasks import load_task
from .checkpoints import CheckpointWrites, check_every, check_resume_file
from .entry import task_options
from .interrupts import stop_on_signal
from .results import every_kth_check, evaluate_final_record, print_test_figures, save_results

DEFAULT_EPOCHS = 10


def add_options(p) -> None:
    """ssvm-train's options of the perceptron (with ``--solver perceptron``)."""
    p.add_argument("--epochs", type=int, default=None,
                   help=f"--solver perceptron: epochs in all (a resumed run goes on to this many); None = "
                        f"{DEFAULT_EPOCHS}")
    p.add_argument("--no-average", action="store_true",
                   help="--solver perceptron: return the last iterate, not the average of every step's w")
    p.add_argument("--loss-augmented", action="store_true",
                   help="--solver perceptron: decode loss-augmented and update where the margin is violated")
    p.add_argument("--decay-exponent", type=float, default=0.0,
                   help="--solver perceptron: the step (t0 + epoch)^-kappa's kappa (0: the unit step)")
    p.add_argument("--decay-t0", type=float, default=1.0, help="--solver perceptron: t0 of the step above")


def perceptron_config(args) -> PerceptronConfig | None:
    """The perceptron's settings from the command's options (None: another solver); refused by name before any
    file is touched: a perceptron option without ``--solver perceptron``, and with it an option of the SSVM's
    solvers."""
    if args.solver != "perceptron":
        given = [name for name, on in (("--epochs", args.epochs is not None), ("--no-average", args.no_average),
                                       ("--loss-augmented", args.loss_augmented),
                                       ("--decay-exponent", args.decay_exponent != 0.0),
                                       ("--decay-t0", args.decay_t0 != 1.0)) if on]
        if given:
            raise SSVMInputError(f"{given[0].lstrip('-').replace('-', '_')}: an option of --solver perceptron, not "
                                 f"of --solver {args.solver}")
        return None
    refused = [("--lam", args.lam is not None), ("--passes (the perceptron counts --epochs)", args.passes is not None),
               ("--gap-check", args.gap_check is not None), ("--gap-threshold", args.gap_threshold != 0.0),
               ("--time-budget", math.isfinite(args.time_budget)), ("--select-lam", args.select_lam),
               ("--hide-labels", args.hide_labels is not None), ("--lams", args.lams is not None),
               ("--heldout", args.heldout is not None), ("--min-counts", bool(args.min_counts)),
               (f"--step {args.step}", args.step != "fw"), ("--cache", args.cache),
               ("--averaging (the perceptron averages unless --no-average)", args.averaging),
               ("--sampling uniform (an epoch visits a fresh permutation)", args.sampling == "uniform"),
               (f"--kernels {args.kernels}", args.kernels != "auto"), (f"--exchange {args.exchange}",
                                                                        args.exchange != "auto"),
               ("--round-steps", args.round_steps is not None), ("torchrun", distributed.launched_by_torchrun())]
    bad = [name for name, on in refused if on]
    if bad:
        raise SSVMInputError(f"solver: the perceptron runs in one process on the task's model (no regularizer, dual "
                             f"or gap); not with {', '.join(bad)}")
    return PerceptronConfig(epochs=DEFAULT_EPOCHS if args.epochs is None else args.epochs,
                            average=not args.no_average, batch_size=args.batch_size,
                            decay_exponent=args.decay_exponent, decay_t0=args.decay_t0,
                            loss_augmented=args.loss_augmented, seed=args.seed).validate()


def run_perceptron(args, cfg: PerceptronConfig, device, dtype) -> dict:
    """Train the perceptron on ``args.dataset`` into ``args.out`` (module docstring); the returned point's record."""
    check_every(args.checkpoint_every, args.checkpoint)
    check_resume_file(args.resume)
    featurization = task_options(args)
    with RunDir(args.out, overwrite=args.overwrite, resume=args.resume) as run_dir:      # before any work
        task = load_task(args.dataset, train_size=args.train_size, unary_only=args.unary_only, device=device,
                         dtype=dtype, **featurization)
        # the run a checkpoint belongs to; the perceptron's own settings are checked by train_perceptron
        identity = {"dataset": args.dataset, "train_size": args.train_size, "unary_only": args.unary_only,
                    **featurization, "dtype": args.dtype, "n": task.n_train, "d": task.d, "solver": "perceptron"}
        resume = PerceptronResult.from_state_dict(load_checkpoint(args.resume, identity)) if args.resume else None
        if resume is not None:
            check_resumable(resume, cfg)                   # before config.json is rewritten
        run_dir.require_free(8 * task.d * (3 if args.checkpoint else 1) + (1 << 16) + PREDICTIONS_BYTES
                             + cfg.epochs * 2048, "model.pt, history.json, test_predictions.json"
                             + (" and checkpoint.pt" if args.checkpoint else ""))
        run_dir.write_config({"command": "ssvm-train", "dataset": args.dataset, "train_size": args.train_size,
                              "unary_only": args.unary_only, **featurization, "device": str(device),
                              "dtype": args.dtype, "resume": args.resume, "checkpoint_every": args.checkpoint_every,
                              "solver": {"solver": "perceptron", **vars(cfg)}})
        return _train(args, cfg, task, run_dir.path, identity, resume)


def _train(args, cfg: PerceptronConfig, task, out, identity: dict, resume: PerceptronResult | None) -> dict:
    speak = not args.quiet
    if speak:
        print(f"{args.dataset}: n = {task.n_train} train / {task.n_test} test examples, d = {task.d}; perceptron "
              f"({'averaged' if cfg.average else 'last iterate'}, batch {cfg.batch_size}"
              + (", loss-augmented" if cfg.loss_augmented else "") + ")", flush=True)
        if resume is not None:
            print(f"resumed from {args.resume} after epoch {len(resume.history)}", flush=True)

    made = [len(resume.history) if resume is not None else 0]        # the index of the record being made

    def progress(rec):
        made[0] = rec["epoch"]
        if speak:
            print(f"epoch {rec['epoch']:4d}  mistakes {rec['mistakes']:7d}  train loss {rec['train_loss']:.4f}  "
                  + (f"train {rec['train_error']:.4f}  test {rec['test_error']:.4f}  " if "test_error" in rec else "")
                  + (f"F1 {rec['test_f1']:.2f}  " if "test_f1" in rec else "")
                  + (f"UAS {rec['test_uas']:.2f}  LAS {rec['test_las']:.2f}  " if "test_uas" in rec else "")
                  + f"[{rec['time_s']:.2f} s]", flush=True)

    writes = CheckpointWrites(out / "checkpoint.pt", identity, args.checkpoint_every)
    t0 = time.perf_counter()
    with stop_on_signal("ssvm-train", stopping="stopping at the end of the current epoch") as requested:
        result = train_perceptron(task.model, task.train, cfg, nonnegative=task.nonnegative,
                                  evaluate=every_kth_check(task.evaluate, args.eval_every, lambda: made[0]),
                                  progress=progress, resume=resume, interrupt=lambda: requested() or writes.failed,
                                  checkpoint=(lambda state: writes.offer(state, f"after epoch {made[0]}"))
                                  if args.checkpoint else None)
        writes.flush()
    history, w = result.history, result.w
    last = history[-1]
    if "test_error" not in last:                      # --eval-every skipped the returned point's epoch
        evaluate_final_record(last, task.evaluate, w)
    save_results(out, history, w, math.nan, math.nan, args.dataset, task.describe(),
                 {"epochs": len(history)})
    if task.predictions is not None:
        save_predictions(out, task.predictions(w))
    if writes.failed:
        raise writes.error(f"the run stopped there and wrote {out / 'history.json'} and {out / 'model.pt'}")
    if speak:
        print(f"stopped: {result.stop_reason} after {len(history)} epochs, {last['time_s']:.2f} s training "
              f"({time.perf_counter() - t0:.2f} s wall incl. evaluation)")
        print_test_figures(last, task)
        print(f"wrote {out / 'history.json'} and {out / 'model.pt'}"
              + (f" and {out / 'test_predictions.json'}" if task.predictions is not None else ""))
        if args.checkpoint:
            print(writes.summary())
    if result.stop_reason == "interrupted":
        again = (f"resume with --resume {out / 'checkpoint.pt'}" if args.checkpoint
                 else "a run with --checkpoint can be resumed")
        raise RunInterrupted(f"interrupted after epoch {len(history)}; wrote {out / 'history.json'} and "
                             f"{out / 'model.pt'}; {again}", requested.signal)
    return last
