"""``ssvm-train --hide-labels FRACTION --hide-seed S``: the latent SSVM (ssvm_torch/latent.py) on a chain task
with that fraction of the training positions' labels hidden (on ``ud-ewt-spans``: that fraction of the gold
trees' spans; on ``ud-ewt``: of the words' heads; on ``scene-graph`` / ``ocr-graph``: of the graphs' node labels),
trained by CCCP with the command's solver options as the inner solver.

The run directory holds config.json (the options, the fraction, the seed and the number of hidden
positions), hidden.json (the hidden positions' indices into the training set's positions, the hidden spans' rows
of the stacked gold trees, or the words whose heads are hidden: the run's data is reproducible from it as from
the seed), latent.json (one record per outer step: objective, inner gap and
passes, completions changed, the train and test errors of the step's model: reported, never used to choose),
and history.json / model.pt / test_predictions.json as every run (history.json: the same records, the last one the
returned model's);
model.pt's ``ell`` is the dual's of the last accepted inner problem, and ``latent_objective`` its J(w).
With ``--checkpoint``, checkpoint.pt holds CCCP's state (``train_latent``'s: the accepted w and completion, the
records, the inner solver's state) at every inner gap check and after every outer step; ``--resume`` continues it
exactly (a killed or interrupted run), or takes more outer steps with a larger ``--latent-outer``;
``--checkpoint-every SECONDS`` writes it at most that often (and at the end).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict

import torch

from ..atomic import atomic_write_bytes
from ..data.partial import hidden_positions
from ..data.examples import GraphData
from ..data.span_data import SpanData
from ..data.trees import DependencyData
from ..data.types import ChainData
from ..errors import RunInterrupted, SSVMInputError
from ..outputs import load_checkpoint, save_predictions
from ..latent import (INNER_SOLVERS, check_inner, check_start, hidden_parts, hide_heads, hide_labels,
                      resumed_state, train_latent)
from ..models.chain import ChainModel
from ..models.constituency import ConstituencyModel
from ..models.dependency import DependencyModel
from ..models.graph_crf import GraphCRFModel
from ..models.semimarkov import SemiMarkovModel
from .checkpoints import CheckpointWrites
from .interrupts import stop_on_signal
from .results import print_test_figures, save_results


def add_options(p) -> None:
    """ssvm-train's options of the latent SSVM (--hide-labels and what goes with it)."""
    p.add_argument("--hide-labels", type=float, default=None, metavar="FRACTION",
                   help="hide this fraction of the training positions' labels (chains; ud-ewt-spans: of the gold "
                        "trees' spans; ud-ewt: of the words' heads) and train the latent SSVM by CCCP, the options above being its inner solver "
                        "(docs/latent.md); None = every label seen")
    p.add_argument("--hide-sentences", action="store_true",
                   help="with --hide-labels: hide that fraction of the training sentences, every label (span, "
                        "head) of each, instead of single positions (the semi-supervised setting); with "
                        "--hide-bracket-labels, every label of that fraction of the trees")
    p.add_argument("--hide-bracket-labels", type=float, default=0.0, metavar="FRACTION",
                   help="ud-ewt-spans with --hide-labels: also hide the labels of this fraction of the gold spans, "
                        "their brackets kept where observed (Pereira & Schabes 1992's unlabeled brackets)")
    p.add_argument("--hide-seed", type=int, default=0, help="the seed of the hidden positions (--hide-labels)")
    p.add_argument("--latent-outer", type=int, default=20, help="at most this many CCCP steps (--hide-labels)")
    p.add_argument("--latent-start", choices=("auto", "letters", "arcs", "zeros"), default="auto",
                   help="CCCP's start (--hide-labels): auto = letters for chains and segments, arcs (the SSVM of the "
                        "observed arcs) for dependency trees, zeros for constituency trees, the SSVM of the observed "
                        "subgraphs for graphs (docs/latent.md)")


def check_options(args, launched_by_torchrun: bool) -> None:
    """What the latent SSVM runs with, refused by name before the run directory is touched (the latent options
    without --hide-labels too)."""
    if args.hide_labels is None:
        for name, on in (("hide_bracket_labels", args.hide_bracket_labels), ("hide_sentences", args.hide_sentences)):
            if on:
                raise SSVMInputError(f"{name}: trains the latent SSVM, with --hide-labels")
        return
    f = args.hide_labels
    if not (isinstance(f, float) and 0.0 <= f < 1.0):
        raise SSVMInputError(f"hide_labels: expected a fraction in [0, 1), got {f}")
    u = args.hide_bracket_labels
    if not (isinstance(u, float) and 0.0 <= u <= 1.0):
        raise SSVMInputError(f"hide_bracket_labels: expected a fraction in [0, 1] (1: brackets without any label), "
                             f"got {u}")
    if u and args.dataset != "ud-ewt-spans":
        raise SSVMInputError(f"hide_bracket_labels: hides constituency brackets' labels (ud-ewt-spans), not "
                             f"{args.dataset}'s")
    if args.latent_outer < 1:
        raise SSVMInputError(f"latent_outer: expected an int >= 1, got {args.latent_outer}")
    refused = [("--select-lam", args.select_lam), ("torchrun", launched_by_torchrun),
               (f"--exchange {args.exchange}", args.exchange != "auto"), ("--dtype float32", args.dtype != "float64"),
               (f"--device {args.device}", args.device != "cpu"), (f"--kernels {args.kernels}", args.kernels == "torch"),
               (f"--solver {args.solver}", args.solver not in INNER_SOLVERS), ("--averaging", args.averaging)]
    bad = [name for name, on in refused if on]
    if bad:
        raise SSVMInputError(f"hide_labels: the latent SSVM runs CCCP in one process on the numba chain, segment, "
                             f"constituency, dependency-tree or graph store (CPU float64) with an inner solver of "
                             f"{', '.join(INNER_SOLVERS)}; not with {', '.join(bad)}")


def rows_trees(rows: list, data: SpanData) -> torch.Tensor:
    """The distinct trees (sentence indices) the span ``rows`` of the stacked gold trees belong to."""
    return torch.unique(torch.searchsorted(data.span_offsets.cpu(), torch.tensor(rows, dtype=torch.int64),
                                           right=True) - 1)


def run_latent(args, cfg, task, lam: float, run_dir, featurization: dict) -> dict:
    """CCCP on ``task`` with ``args.hide_labels`` of its training positions hidden; writes the run files."""
    model, train = task.model, task.train
    spans = isinstance(train, SpanData) and isinstance(model, ConstituencyModel)
    heads = isinstance(train, DependencyData) and isinstance(model, DependencyModel)
    nodes = isinstance(train, GraphData) and isinstance(model, GraphCRFModel)
    if not (spans or heads or nodes) and not (isinstance(train, ChainData) and
                                              isinstance(model, (ChainModel, SemiMarkovModel))):
        raise SSVMInputError(f"hide_labels: the latent SSVM trains a chain (ocr-small, ocr-large, conll2000, its "
                             f"edge-feature templates too), segments (conll2000-segments), constituency trees "
                             f"(ud-ewt-spans), dependency trees (ud-ewt) or pairwise graphs (scene-graph, ocr-graph); "
                             f"{args.dataset} is a {type(model).__name__}")
    whole = args.hide_sentences
    hidden = hide_heads(train, args.hide_labels, args.hide_seed, model.projective, whole) if heads else \
        hide_labels(train, args.hide_labels, args.hide_seed, args.hide_bracket_labels, whole)
    check_inner(model, hidden, lam, cfg)                # a solver the store cannot run: refused before any write
    check_start(model, None if args.latent_start == "zeros" else args.latent_start)
    total = hidden.spans.shape[0] if spans else len(hidden.heads) if heads else len(hidden.y) if nodes else \
        len(hidden.Y)
    unlabeled = []
    if spans:      # rows of the stacked gold trees (the completion's rows are ordered by its own spans)
        rows = train.span_offsets if whole else None
        gone = hidden_parts(total, args.hide_labels, args.hide_seed, rows)
        positions = torch.nonzero(gone)[:, 0].tolist()
        unl = torch.ones(total, dtype=torch.bool) if args.hide_bracket_labels == 1.0 else \
            hidden_parts(total, args.hide_bracket_labels, args.hide_seed, rows, ("hide_bracket_labels", "hide_seed"),
                         stream=1)
        unlabeled = torch.nonzero(unl & ~gone)[:, 0].tolist()
    else:
        positions = torch.nonzero(~hidden.observed)[:, 0].tolist()
    unit = "gold spans" if spans else "heads" if heads else "node labels" if nodes else "labels"
    sentences = torch.nonzero(hidden_positions(train.n, args.hide_labels, args.hide_seed, ("hide_labels", "hide_seed"))
                              )[:, 0].tolist() if whole else None
    out = run_dir.path
    speak = not args.quiet
    # the run a checkpoint belongs to: another dataset, lambda, hidden set or inner solver is refused by name
    identity = {"dataset": args.dataset, "train_size": args.train_size, **featurization, "dtype": "float64",
                "n": task.n_train, "d": task.d, "lam": lam, "hide_labels": args.hide_labels,
                "hide_seed": args.hide_seed, "hide_bracket_labels": args.hide_bracket_labels,
                "hide_sentences": whole,
                "latent_solver": args.solver}
    resume = load_checkpoint(args.resume, identity) if args.resume else None
    if resume is not None:
        resumed_state(model, hidden, lam, resume)       # a damaged or foreign state: refused before any write
    run_dir.write_config({"command": "ssvm-train", "dataset": args.dataset, "train_size": args.train_size,
                          **featurization, "lam": lam, "hide_labels": args.hide_labels, "hide_seed": args.hide_seed,
                          "hidden_positions": len(positions), "hide_sentences": whole,
                          "hide_bracket_labels": args.hide_bracket_labels,
                          "unlabeled_brackets": len(unlabeled), "latent_outer": args.latent_outer,
                          "latent_start": args.latent_start, "resume": args.resume,
                          "checkpoint_every": args.checkpoint_every,
                          "device": "cpu", "dtype": "float64", "kernels": args.kernels, "solver": asdict(cfg)})
    atomic_write_bytes(out / "hidden.json", json.dumps({"fraction": args.hide_labels, "seed": args.hide_seed,
                                                        "positions": total, "unit": "span rows" if spans else
                                                        "words" if heads else "nodes" if nodes else "positions",
                                                        "hidden": positions,
                                                        **({"hidden_sentences": sentences} if whole else {}),
                                                        **({"bracket_labels_fraction": args.hide_bracket_labels,
                                                            "unlabeled": unlabeled} if spans else {})}).encode())
    if speak:
        print(f"{args.dataset}: n = {task.n_train} train / {task.n_test} test examples, d = {task.d}, lam = {lam:g}; "
              + (f"{len(sentences)} of {train.n} training {'graphs' if nodes else 'sentences'} hidden whole "
                 f"({len(positions)} of {total} {unit})" if whole else f"{len(positions)} of {total} training {unit} hidden")
              + (f", the labels of {len(unlabeled)} observed brackets" if unlabeled else "")
              + (f" (every label of {int(rows_trees(unlabeled, train).numel())} trees)" if unlabeled and whole else "")
              + f" (seed {args.hide_seed}); CCCP with "
              f"{args.solver} inner solves", flush=True)
        if spans and args.hide_bracket_labels == 1.0 and args.latent_start in ("auto", "zeros"):
            print("note: with every label hidden, CCCP from w = 0 completes every bracket as a join (label 0) and "
                  "predicts flat trees (docs/latent.md)", flush=True)

    def progress(rec):
        if speak:
            gap = "" if rec["inner_gap"] is None else f"  inner gap {rec['inner_gap']:.3e} ({rec['inner_passes']:.0f} passes)"
            print(f"outer {rec['outer']:3d}  objective {rec.get('candidate_objective', rec['objective']):.6f}{gap}"
                  + ("" if rec["changed"] is None else f"  changed {rec['changed']}")
                  + ("  (interrupted: inner solve cut short)" if rec.get("interrupted") else "" if rec["accepted"]
                     else "  (not lower: stop)") + f"  test {rec['test_error']:.4f}"
                  + (f"  F1 {rec['test_f1']:.2f}" if "test_f1" in rec else "")
                  + (f"  UAS {rec['test_uas']:.2f}" if "test_uas" in rec else "")
                  + f"  [{rec['time_s']:.1f} s]", flush=True)

    writes = CheckpointWrites(out / "checkpoint.pt", identity, args.checkpoint_every)

    def checkpoint(state):
        writes.offer(lambda: state, f"in outer step {state['outer']}")

    if speak and resume is not None:
        print(f"resumed from {args.resume} at outer step {resume['outer']}", flush=True)
    t0 = time.perf_counter()
    with stop_on_signal("ssvm-train", stopping="stopping at the inner solver's next gap check") as requested:
        w, records = train_latent(model, hidden, lam, cfg, max_outer=args.latent_outer, progress=progress,
                                  interrupt=lambda: requested() or writes.failed, evaluate=task.evaluate,
                                  w0=None if args.latent_start == "zeros" else args.latent_start,
                                  checkpoint=checkpoint if args.checkpoint else None, resume=resume)
        writes.flush()                              # the last state, if --checkpoint-every skipped its check
    atomic_write_bytes(out / "latent.json", json.dumps(records, indent=1).encode())
    final = records[-1]                     # evaluated at the returned model (the lowest objective)
    save_results(out, records, w, final.get("ell", math.nan), lam, args.dataset, task.describe(),
                 {"latent_objective": final["objective"]})
    save_predictions(out, task.predictions(w))
    if speak:
        print(f"CCCP: {len(records) - 1} outer steps, objective {records[0]['objective']:.6f} -> "
              f"{final['objective']:.6f} ({time.perf_counter() - t0:.1f} s)")
        print_test_figures(final, task)
        print(f"wrote {out / 'latent.json'}, {out / 'hidden.json'}, {out / 'history.json'}, {out / 'model.pt'} and "
              f"{out / 'test_predictions.json'}")
        if args.checkpoint:
            print(writes.summary())
    if writes.failed:
        raise writes.error(f"the run stopped there and wrote {out / 'latent.json'} and {out / 'model.pt'}")
    if requested():
        resume = (f"resume with --resume {out / 'checkpoint.pt'}" if args.checkpoint
                  else "a run with --checkpoint can be resumed")
        raise RunInterrupted(f"interrupted in outer step {records[-1]['outer']}: wrote {out / 'latent.json'} and "
                             f"{out / 'model.pt'} (the lowest objective so far); {resume}", requested.signal)
    return final
