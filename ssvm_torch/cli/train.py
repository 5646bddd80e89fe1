"""``ssvm-train``: train an SSVM with FW / BCFW (uniform, perm or gap sampling) / SSG and report the
exact duality gap and test error.

Outputs in ``--out DIR`` (the run format of :mod:`ssvm_torch.outputs`):
  history.json  one record per exact gap check: passes, oracle_calls, steps, time_s, primal, dual, gap,
                gap_estimate, train_error, test_error (+ test_position_error, and avg_* with --averaging;
                with --eval-every k only every k-th record and the last carry the errors)
  model.pt      {"w": float64 tensor (d,), "ell": float, "lam": float, "dataset": str, "feature_layout": dict}
                (deg adds "w_dual" = w(z_bar) and "radius" R: its records' dual is recomputable from the file)
  checkpoint.pt the full solver state at the last gap check (with --checkpoint), for --resume
  config.json   dataset, lambda, every solver option, package versions and git revision
  selection.json  with --select-lam: the dev split, the lambda grid with each lambda's dev score, gap
                and passes, and the lambda refit on all training data (whose run history.json holds)
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from dataclasses import asdict

import torch

from .. import distributed
from ..devices import parse_device
from ..distributed.collectives import any_rank
from ..errors import DistributedError, RunInterrupted, SSVMInputError
from .entry import command_parser, run_command, task_options
from ..outputs import PREDICTIONS_BYTES, RunDir, load_checkpoint, save_predictions, save_rank_profiles
from ..portable import packed_bytes
from ..selection import DEFAULT_LAMS
from ..solvers import SAMPLERS, SOLVERS, STEPS, SolverConfig, make_solver
from ..solvers.cutting_plane import QP_SOLVERS
from ..stores import KERNELS
from ..tasks import TASKS, get_task, load_task
from ..ud_tasks import TREE_KINDS
from .checkpoints import CheckpointWrites, check_every, check_resume_file
from .grid import select_on_dev
from .interrupts import agreed_stop, stop_on_signal
from .latent import add_options as add_latent_options, check_options as check_latent_options, run_latent
from .perceptron import add_options as add_perceptron_options, perceptron_config, run_perceptron
from .results import evaluate_final_record, every_kth_check, print_test_figures, save_results, write_certified


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("ssvm-train", "Train a structured SVM with batch FW, BCFW (uniform, permutation or gap sampling; FW, "
                       "pairwise, away or best steps; optional caching) or SSG, and report the exact duality gap "
                       "and the test error. Writes history.json, model.pt and config.json to --out.")
    p.add_argument("--train-size", type=int, default=None,
                   help="conll2000 / ud-ewt / ud-ewt-spans / segmentation-synth / pose-synth / hansards: keep the "
                        "first N training examples; None = all")
    p.add_argument("--unary-only", action="store_true",
                   help="segmentation-synth / pose-synth: drop the pairwise features (the unaries-only baseline)")
    p.add_argument("--features", default=None,
                   help="conll2000: the feature template, sha-pereira, rich, rich-edges, or a template string such as "
                        "'w[0] w[-1]|w[0] suf3[0] edge:p[0]' (docs/conll.md); None = rich-edges for conll2000 (the "
                        "configuration chosen on its dev split, docs/conll.md); ud-ewt: mcdonald; ud-ewt-spans: "
                        "fenceposts (its only template)")
    p.add_argument("--min-count", type=int, default=None,
                   help="conll2000 / ud-ewt / ud-ewt-spans: keep the attributes seen at least this often in the "
                        "training sentences; None = 1")
    p.add_argument("--loss", choices=["normalized", "hamming"], default=None,
                   help="chain tasks: the task loss, normalized Hamming (1/T per wrong position, the papers') or the "
                        "Hamming count (1 per wrong position: every token weighs alike); ud-ewt: per wrong head; "
                        "ud-ewt-spans: per wrong labeled span (normalized: over the 2n - 1 spans); None = hamming for conll2000, "
                        "ud-ewt and ud-ewt-spans, normalized for the others")
    p.add_argument("--lam", type=float, default=None,
                   help="regularization lambda of objective (1), lam/2 |w|^2 + 1/n sum_i H_i(w); None = 1/n")
    p.add_argument("--constraints", choices=["none", "bio", "iob1", "bioes"], default=None,
                   help="conll2000: tag transitions every oracle obeys (BIO = IOB2, IOB1, BIOES chunking schemes); "
                        "refused when the scheme does not fit the tag set; None = bioes for conll2000")
    p.add_argument("--trees", choices=list(TREE_KINDS), default=None,
                   help="ud-ewt: the decoder's trees, projective (Eisner), non-projective (Chu-Liu-Edmonds) or "
                        "second-order (projective, with adjacent-sibling parts: McDonald & Pereira 2006), single-root "
                        "in every case; None = projective (docs/structures.md has all three on dev)")
    p.add_argument("--sibling-features", default=None,
                   help="ud-ewt --trees second-order: the sibling template, mcdonald-pereira (adjacent-sibling and "
                        "first-child parts), mcdonald-pereira-adjacent (no first-child parts) or item strings such as "
                        "'hp|sp|mp sw|mw|dir' (docs/structures.md); None = mcdonald-pereira")
    p.add_argument("--graph-inference", choices=["lp", "enumerate", "exact"], default=None,
                   help="scene-graph / ocr-graph: the max oracle, the local-polytope LP (the relaxed SSVM on loopy "
                        "graphs), enumeration of every labeling (small graphs) or branch and bound over the LP (the "
                        "exact SSVM on loopy graphs of any size); None = lp")
    p.add_argument("--tags", choices=["bio", "bioes"], default=None,
                   help="conll2000: train on the BIO tags of the file or on them converted to BIOES (predictions are "
                        "converted back to BIO before the chunk F1); None = bioes for conll2000 (the old "
                        "defaults: --features sha-pereira --min-count 1 --tags bio --constraints none --loss normalized)")
    p.add_argument("--select-lam", action="store_true",
                   help="choose lambda on a development split (the last --heldout of the training examples, or the "
                        "released dev split of ud-ewt) by a "
                        "warm-started grid over --lams, each bounded by --passes, then refit on all training data; "
                        "only the refit model sees the test set")
    p.add_argument("--lams", type=float, nargs="+", default=None,
                   help="the grid of --select-lam; None = the task's grid (ud-ewt, ud-ewt-spans) or 1e-1, 3e-2, ..., "
                        "1e-4")
    p.add_argument("--heldout", type=float, default=None,
                   help="the development share of --select-lam; None = 0.1 (not for ud-ewt, ud-ewt-spans: their dev "
                        "split is released)")
    p.add_argument("--min-counts", type=int, nargs="+", default=None,
                   help="conll2000 with --select-lam: also choose the cut-off among these; None = --min-count only")
    p.add_argument("--solver", choices=(*SOLVERS, "perceptron"), default="bcfw",
                   help="fw: batch Frank-Wolfe; bcfw: block-coordinate FW; ssg: stochastic subgradient; eg: online "
                        "exponentiated gradient (chains); deg: dual extragradient (chains); cutting-plane: 1-slack "
                        "cutting plane; perceptron: the averaged structured perceptron (--epochs; docs/solvers.md)")
    p.add_argument("--step-size", type=float, default=0.0,
                   help="eg / deg: multiple of the safe step, the first try's (both adapt it: halved on a refused try) "
                        "(0 = the solver's default: eg 1000, deg 500)")
    p.add_argument("--eg-start", choices=("margin", "uniform"), default="margin",
                   help="eg: the start alpha_i ~ exp(m S(y_i)), m the smallest margin whose dual is >= -0.01 P(0) "
                        "(margin), or the uniform alpha_i of Collins et al. 2008 (docs/solvers.md compares them)")
    p.add_argument("--qp-solver", choices=QP_SOLVERS, default="daqp",
                   help="cutting-plane: the qpsolvers backend of the working-set QP")
    p.add_argument("--working-set", choices=("auto", "dense", "labelings"), default="auto",
                   help="cutting-plane: keep the constraints as dense d-vectors or as their joint labelings (chains; "
                        "auto: labelings when d >= 2^20)")
    p.add_argument("--inactive-window", type=int, default=50,
                   help="cutting-plane: QP solves a constraint may stay inactive (alpha = 0) before it is pruned")
    p.add_argument("--sampling", choices=sorted(SAMPLERS), default="gap",
                   help="block sampling: uniform, a fresh permutation per pass, or gap sampling (p_i ~ g_i)")
    p.add_argument("--step", choices=STEPS, default="fw",
                   help="BCFW step: fw (Alg. 1), pairwise (BCPFW, Alg. 3), away (BCAFW, Alg. 4), best of the three")
    p.add_argument("--batch-size", type=int, default=1,
                   help="mini-batch BCFW: blocks per step, decoded in one batched oracle call with one exact line "
                        "search on their joint direction (1 = BCFW, n = batch FW; a GPU wants hundreds)")
    p.add_argument("--cache", action="store_true",
                   help="gap-based caching of corners (Alg. 5); with --solver cutting-plane its inference cache")
    p.add_argument("--cache-F", type=float, default=0.25,
                   help="cache hit if g_hat >= max(F g_i, nu g / n) (cutting plane: violation >= F x the last 1-slack gap)")
    p.add_argument("--cache-nu", type=float, default=0.01, help="nu of the cache test above")
    p.add_argument("--max-cache", type=int, default=50, help="cache entries per block")
    p.add_argument("--gap-check", type=float, default=None,
                   help="passes of block steps between exact gap checks (fractional: e.g. 0.1 = every n/10 steps); "
                        "None = the task's default (10; 5 for ud-ewt)")
    p.add_argument("--eval-every", type=int, default=1,
                   help="the task's errors (train / test error, F1, UAS) in every k-th exact check's record, the first "
                        "and the returned model's included (0: the returned model's only); they cost wall time, not "
                        "solver time")
    p.add_argument("--gap-refresh", type=int, default=1,
                   help="every k-th gap check refreshes the sampler's block gaps (0: never; others only monitor)")
    p.add_argument("--passes", type=float, default=None,
                   help="budget of effective passes (n oracle calls each, counted gap passes included); the run "
                        "stops at the first gap check at or after it, so the last record may show a little more; "
                        "None = the task's default (50; 20 for ud-ewt, 60 for ud-ewt-spans); with --select-lam also each "
                        "lambda's budget")
    p.add_argument("--gap-threshold", type=float, default=0.0, help="stop when the exact duality gap <= this")
    p.add_argument("--time-budget", type=float, default=math.inf, help="stop after this many solver seconds")
    p.add_argument("--seed", type=int, default=0, help="seed of the block sampling (a seed gives one trajectory)")
    p.add_argument("--averaging", action="store_true", help="also report the weighted average (rho = 2/(k+2))")
    p.add_argument("--recompute-every", type=int, default=10, help="passes between exact recomputations of w")
    p.add_argument("--device", default="cpu", help="where the solver state lives: cpu or cuda[:N]")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                   help="precision of the solver state (float64 keeps gaps exact to ~1e-12)")
    p.add_argument("--kernels", choices=KERNELS, default="auto",
                   help="decoder and store kernels: numba (compiled, CPU float64), torch (the pure-torch path CUDA "
                        "runs, also on CPU), auto = numba on CPU float64, torch elsewhere")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 keeps batch-1 steps steady)")
    p.add_argument("--exchange", choices=distributed.EXCHANGES, default="auto",
                   help="under torchrun: how the ranks combine a mini-batch step: columns (w sharded by feature "
                        "columns, decoded labelings exchanged: sparse chain models on CPU), allreduce (one d-vector), "
                        "gather (each block's compact change; bit-identical to one process), rounds (BCFW rounds on "
                        "each rank's shard, CoCoA+, one all-reduce per round), shared (one machine's ranks step "
                        "asynchronously on one w in shared memory, exact at every gap check), auto = shared for BCFW "
                        "(batch size 1) on one machine's ranks where it applies, else columns where it applies, else "
                        "gather for d >= 2^20, else allreduce (docs/distributed.md)")
    p.add_argument("--round-steps", type=int, default=None,
                   help="--exchange rounds: BCFW steps per rank per round (default: one pass over the largest shard)")
    p.add_argument("--dist-timeout", type=float, default=300,
                   help="under torchrun: seconds a collective waits for a silent rank before every rank stops")
    add_latent_options(p)
    add_perceptron_options(p)
    p.add_argument("--out", default="runs/latest", help="output directory (refused if it holds another run)")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    p.add_argument("--checkpoint", action="store_true", help="save the solver state at every gap check")
    p.add_argument("--checkpoint-every", type=float, default=None, metavar="SECONDS",
                   help="with --checkpoint: write at a check only once SECONDS have passed since the last write (the "
                        "last check is always written); None = at every check")
    p.add_argument("--resume", default=None, help="checkpoint.pt to resume from (same options); None = a new run")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    return p


def _fmt(v, spec=".4g"):
    return "-" if v is None else format(v, spec)


#: what an option left at None means, unless the task says otherwise (Task.run_defaults)
RUN_DEFAULTS = {"passes": 50, "gap_check": 10, "lams": list(DEFAULT_LAMS), "heldout": 0.1}


def resolve_defaults(args) -> None:
    """Fill the options left at None from the task's run defaults (its configuration chosen on dev), else
    :data:`RUN_DEFAULTS`; a --heldout share is refused for a task with a released dev split."""
    task = get_task(args.dataset)
    if task.dev_split and args.heldout is not None:
        raise SSVMInputError(f"heldout: {args.dataset!r} has a released development split that --select-lam scores "
                             "on; drop --heldout")
    for key, value in RUN_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, task.run_defaults.get(key, value))
    if task.dev_split:
        args.heldout = "dev"


def run(args) -> dict:
    if args.threads < 1:
        raise SSVMInputError(f"threads: expected an int >= 1, got {args.threads}")
    if args.eval_every < 0:
        raise SSVMInputError(f"eval_every: expected an int >= 0 (0: the returned model's record only), "
                             f"got {args.eval_every}")
    torch.set_num_threads(args.threads)
    device = parse_device(args.device)
    dtype = getattr(torch, args.dtype)
    perceptron = perceptron_config(args)                   # before the SSVM's defaults fill its options
    if perceptron is not None:
        return run_perceptron(args, perceptron, device, dtype)
    resolve_defaults(args)
    check_resume_file(args.resume)
    cfg = SolverConfig.from_options(args).validate()             # bad options fail before the directory is touched
    check_every(args.checkpoint_every, args.checkpoint)
    check_latent_options(args, distributed.launched_by_torchrun())
    task = get_task(args.dataset)
    if args.min_counts and not args.select_lam:
        raise SSVMInputError("min_counts: a grid of cut-offs is for --select-lam; use --min-count for one")
    if args.select_lam:
        if args.lam is not None:
            raise SSVMInputError("lam: --select-lam chooses lambda; drop --lam (or --select-lam)")
        if not task.templates:
            raise SSVMInputError(f"select_lam: needs a task with a development split "
                                 f"{[t.name for t in TASKS.values() if t.templates]}, not {args.dataset!r}")
        if args.min_counts and not task.templates:
            raise SSVMInputError(f"min_counts: only for {[t.name for t in TASKS.values() if t.templates]}")
        if distributed.launched_by_torchrun() or args.solver != "bcfw":
            raise SSVMInputError("select_lam: runs the BCFW grid in one process; not with torchrun or "
                                 f"--solver {args.solver}")
    if not distributed.launched_by_torchrun():
        with RunDir(args.out, overwrite=args.overwrite, resume=args.resume) as run_dir:   # before any work
            return _train(args, cfg, device, dtype, run_dir)
    # torchrun: every rank trains its shard; rank 0 owns the run directory and writes the outputs
    _, size = distributed.init(device, args.dist_timeout)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    try:
        with contextlib.ExitStack() as stack:
            run_dir = distributed.on_rank0(
                lambda: stack.enter_context(RunDir(args.out, overwrite=args.overwrite, resume=args.resume)))
            return _train(args, cfg, device, dtype, run_dir)
    finally:
        distributed.finish()


def _train(args, cfg: SolverConfig, device, dtype, run_dir: RunDir | None) -> dict:
    """One process's run; under torchrun every rank runs it on its shard and only rank 0 (the one with
    ``run_dir``) evaluates, prints and writes."""
    rank, size = distributed.world()
    featurization = task_options(args)
    if args.select_lam:
        # Ctrl-C / SIGTERM from the grid to the refit's data: the lambda being solved stops at its next gap check,
        # the grid ends there and selection.json keeps its table; after the grid, the refit does not start
        with stop_on_signal("ssvm-train", stopping="stopping after the current lambda's next exact gap check "
                            "(the grid so far goes into selection.json)") as requested:
            selection, refit_resumes = select_on_dev(args, cfg, device, dtype, run_dir, featurization, requested)
            if not refit_resumes:       # --resume held the grid's state: the refit starts afresh
                args.resume = None
            featurization["min_count"] = selection["min_count"]
            task = load_task(args.dataset, train_size=args.train_size, unary_only=args.unary_only, device=device,
                             dtype=dtype, **featurization)
            if requested():
                raise RunInterrupted(f"interrupted after the lambda grid, before the refit: wrote "
                                     f"{run_dir.path / 'selection.json'} (lam = {selection['lam']:g}, min count "
                                     f"{selection['min_count']}); train the final model with --lam "
                                     f"{selection['lam']:g} --min-count {selection['min_count']} (no --select-lam)",
                                     requested.signal)
    else:
        selection = None
        task = load_task(args.dataset, train_size=args.train_size, unary_only=args.unary_only, device=device,
                         dtype=dtype, **featurization)
    lam = selection["lam"] if selection else task.lam(args.lam)
    if args.hide_labels is not None:
        return run_latent(args, cfg, task, lam, run_dir, featurization)
    # auto by measurement (docs/distributed.md): one process runs the coordinate-sharded store's kernels too
    # (no collectives) where they apply, the same mini-batch steps faster than the generic store's
    exchange = distributed.resolve_exchange(args.exchange, task, device, dtype, args.kernels, cfg)
    distributed.check_exchange(args.exchange, exchange, task, device, dtype, args.kernels, cfg, size)
    if args.round_steps is not None and args.exchange != "rounds":
        raise SSVMInputError(f"--round-steps: applies to --exchange rounds only, got --exchange {args.exchange}")
    if size > 1 or exchange in ("columns", "rounds", "shared"):
        dual = distributed.sharded_store(task, lam, device=device, dtype=dtype, kernels=args.kernels,
                                         exchange=exchange)
    else:
        dual = task.store(lam, device=device, dtype=dtype, kernels=args.kernels)
    sharded = isinstance(dual, distributed.RankStore)
    out = run_dir.path if run_dir is not None else None
    speak = not args.quiet and run_dir is not None

    solver = None
    # the run a checkpoint belongs to: a resume with another dataset, lambda, process count or exchange is refused
    identity = {"dataset": args.dataset, "train_size": args.train_size, "unary_only": args.unary_only, **featurization,
                "dtype": args.dtype, "n": task.n_train, "d": task.d, "lam": lam, "world_size": size,
                "hide_labels": None, "exchange": dual.exchange if sharded else "none",
                **({"round_steps": args.round_steps} if isinstance(dual, distributed.RoundsDual) else {})}

    def progress(rec):
        if speak:
            print(f"pass {rec['passes']:7.1f}  gap {_fmt(rec['gap'], '.3e')}  primal {rec['primal']:.6f}  "
                  f"dual {_fmt(rec['dual'], '.6f')}  "
                  + (f"train {rec['train_error']:.4f}  test {rec['test_error']:.4f}  " if "test_error" in rec else "")
                  + (f"F1 {rec['test_f1']:.2f}  " if "test_f1" in rec else "")
                  + (f"UAS {rec['test_uas']:.2f}  LAS {rec['test_las']:.2f}  " if "test_uas" in rec else "") +
                  f"[{rec['time_s']:.2f} s]", flush=True)
        if size > 1 and out is not None and solver is not None:   # what rank 0 writes if a peer dies later
            w_cert, ell_cert = solver.model_point()
            certified.update(records=len(solver.state.history), w=w_cert.detach().clone(), ell=ell_cert,
                             extras={k: v.detach().clone() if torch.is_tensor(v) else v
                                     for k, v in solver.model_extras().items()})
        if writes is not None and solver is not None:    # state_dict is a collective under torchrun: all ranks
            writes.offer(solver.state_dict, f"at {rec['passes']:.1f} effective passes")

    stop = {"requested": lambda: False}              # set to the signal flag while the solver runs
    writes = None if not args.checkpoint else CheckpointWrites(
        None if out is None else out / "checkpoint.pt", identity, args.checkpoint_every,
        agree=None if size == 1 else lambda due: any_rank(due, device))
    certified = {}                                   # torchrun, rank 0: the model of the last check
    solver_kw = {"round_steps": args.round_steps} if isinstance(dual, distributed.RoundsDual) else {}
    evaluate = every_kth_check(task.evaluate, args.eval_every, lambda: len(solver.state.history))
    solver = (distributed.RoundsSolver if solver_kw else make_solver)(
        dual, cfg, evaluate=evaluate if run_dir is not None else None, progress=progress,
        interrupt=lambda: stop["requested"]() or (writes is not None and writes.failed), **solver_kw)
    if args.checkpoint and run_dir is not None:   # the first checkpoint comes at the first gap check: room now
        local = dual.local if sharded else dual
        state = local.state_dict()            # written sparse: its size now, and its dense size as the bound
        run_dir.require_free(size * packed_bytes(state, sparse=True), "one checkpoint",
                             grows_to=size * packed_bytes(state))
    elif run_dir is not None:                     # the final files, before any training: model.pt + history.json
        checks = max(1.0, (args.passes if math.isfinite(args.passes) else 1000) / cfg.gap_check) + 2
        run_dir.require_free(8 * task.d + (1 << 16) + PREDICTIONS_BYTES + int(checks) * 2048,
                             "model.pt, history.json and test_predictions.json")
    if args.resume:
        solver.load_state_dict(load_checkpoint(args.resume, identity))
    if run_dir is not None:                       # every check has passed: the run's first file
        run_dir.write_config({"command": "ssvm-train", "dataset": args.dataset, "train_size": args.train_size,
                              "unary_only": args.unary_only, **featurization, "lam": lam, "selection": selection,
                              "device": str(device), "dtype": args.dtype,
                              "kernels": args.kernels, "resume": args.resume, "solver": asdict(cfg),
                              "checkpoint_every": args.checkpoint_every,
                              "distributed": distributed.describe(dual) if sharded else None})
    if speak and sharded:
        held = ("every block's statistics, a share of w's feature columns each" if dual.exchange == "columns"
                else f"round-robin shards of {dual.local.n} or so blocks")
        print(f"torchrun: {size} ranks ({'nccl' if device.type == 'cuda' else 'gloo'}), {held}, exchange "
              f"{dual.exchange}", flush=True)
    if speak:
        print(f"{args.dataset}: n = {task.n_train} train / {task.n_test} test examples, d = {task.d}, lam = {lam:g}, "
              f"solver = {args.solver}"
              + (f" ({cfg.block_sampling} sampling)" if cfg.block_sampling else "")
              + (f", {args.step} steps" if args.solver == "bcfw" else "") + (", cache" if args.cache else ""),
              flush=True)
        if args.resume:
            print(f"resumed from {args.resume} at {solver.passes:.1f} effective passes", flush=True)
    t0 = time.perf_counter()
    # Ctrl-C / SIGTERM: the solver stops at its next exact gap check and everything below runs as
    # after any stop. Under torchrun every rank polls one flag all ranks agree on (a signal reaches
    # the ranks at different moments, and the launcher repeats it), so they stop at the same pass.
    with stop_on_signal("ssvm-train", abort_on_repeat=size == 1, announce=run_dir is not None) as requested:
        stop["requested"] = requested if size == 1 else agreed_stop(requested, device)
        try:
            history = solver.run()
            if writes is not None:
                writes.flush()                      # the last check's state, if --checkpoint-every skipped it
        except DistributedError as e:               # a peer died: rank 0 keeps the last certified point
            if out is None or not certified:
                raise
            raise DistributedError(f"{e}; {write_certified(out, solver, certified, lam, args.dataset, task)}") \
                from None
    wall = time.perf_counter() - t0
    last = history[-1]
    interrupted = solver.state.stop_reason == "interrupted"
    profiles = distributed.rank_profiles(dual) if sharded else None     # a collective: every rank
    if out is None:
        if interrupted:
            if size > 1:          # the launcher ends every rank once one exits non-zero: not before rank 0 has written
                distributed.barrier()
            where = (f"rank {distributed.world()[0]} of {size}: rank 0 wrote the results" if size > 1
                     else "nothing written: no --out")
            raise RunInterrupted(f"interrupted at {last['passes']:.1f} effective passes ({where})", requested.signal)
        return last
    w_model, ell_model = solver.model_point()
    if profiles is not None:
        save_rank_profiles(out, profiles)
    if args.eval_every != 1:
        evaluate_final_record(last, task.evaluate, w_model, getattr(solver, "w_avg", None) if cfg.averaging else None)
    save_results(out, history, w_model, ell_model, lam, args.dataset, task.describe(), solver.model_extras())
    if task.predictions is not None:
        save_predictions(out, task.predictions(w_model))
    if writes is not None and writes.failed:
        raise writes.error(f"the run stopped there and wrote {out / 'history.json'} and {out / 'model.pt'}")
    if speak and sharded:
        print(f"exchanged {dual.bytes_per_step / 1e3:.1f} kB per step per rank ({dual.steps_exchanged} steps)")
        print("\n".join(distributed.profile_lines(profiles)))
    if speak:
        gap = "n/a (SSG keeps no dual)" if last["gap"] is None else f"{last['gap']:.6e}"
        budget = f" (budget {args.passes:g}; a run stops at the first gap check at or after it)" \
            if solver.state.stop_reason == "passes" and last["passes"] > args.passes else ""
        print(f"stopped: {solver.state.stop_reason} after {last['passes']:.1f} effective passes{budget}, "
              f"{last['time_s']:.2f} s solver time ({wall:.2f} s wall incl. evaluation)")
        print(f"exact duality gap: {gap}")
        if "cache_hit_rate" in last:
            print(f"steps: {last['fw_steps']} FW, {last['pairwise_steps']} pairwise, {last['away_steps']} away, "
                  f"{last['drop_steps']} drop; cache hit rate {last['cache_hit_rate']:.3f}")
        print_test_figures(last, task)
        print(f"wrote {out / 'history.json'} and {out / 'model.pt'}"
              + (f" and {out / 'test_predictions.json'}" if task.predictions is not None else "")
              + (f" and {out / 'ranks.json'}" if profiles is not None else ""))
        if writes is not None:
            print(writes.summary())
    if interrupted:
        if size > 1:                                # the other ranks wait here for the files above
            distributed.barrier()
        gap = "n/a" if last["gap"] is None else f"{last['gap']:.3e}"
        resume = (f"resume with --resume {out / 'checkpoint.pt'}" if args.checkpoint
                  else "a run with --checkpoint can be resumed")
        files = [out / "history.json", out / "model.pt"] + ([out / "test_predictions.json"] if task.predictions
                                                            is not None else [])
        raise RunInterrupted(f"interrupted at {last['passes']:.1f} effective passes (exact duality gap there {gap}); "
                             f"wrote {', '.join(map(str, files[:-1]))} and {files[-1]}; {resume}", requested.signal)
    return last


def main(argv=None) -> int:
    return run_command("ssvm-train", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
