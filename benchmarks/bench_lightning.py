"""Overhead of the Lightning loop over the plain engine: OCR-large, BCFW + gap sampling, same seed,
measured in one run (alternating plain / Lightning, median of --repeats).

Wall time of the optimization loop per effective pass: the plain ``Solver.run()`` against
``Trainer.fit`` from ``on_train_start`` to ``on_train_end`` (set-up and dataset loading excluded on
both sides, the exact gap checks and test-error evaluations included on both). The Lightning runs
log TensorBoard scalars + histograms at every check, no progress bar. Variants:
  plain / lightning               no checkpoints; one training step per pass (blocks_per_step = n)
  lightning_chunk_n/10            ten training steps per pass
  plain_ckpt / lightning_ckpt     + the full solver state written at every check (``ssvm-train
                                  --checkpoint``'s atomic torch.save / ModelCheckpoint last.ckpt via
                                  AtomicCheckpointIO; 44 MB on OCR-large)
The histories are checked equal to the plain engine's.

Usage: python benchmarks/bench_lightning.py [--passes 40] [--gap-check 10] [--repeats 3]
Writes benchmarks/results/lightning_overhead.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ssvm_torch.lightning import SSVMModule
from ssvm_torch.solvers import Solver, SolverConfig
from ssvm_torch.outputs import save_checkpoint
from ssvm_torch.tasks import load_task

warnings.filterwarnings("ignore")


class LoopTimer(L.Callback):
    def on_train_start(self, trainer, module):
        self.t0 = time.perf_counter()

    def on_train_end(self, trainer, module):
        self.wall = time.perf_counter() - self.t0


def plain(args, checkpoint_dir=None):
    task = load_task("ocr-large")
    solver = None

    def save(rec):                       # what ssvm-train --checkpoint does at every gap check
        if checkpoint_dir is not None and solver is not None:
            save_checkpoint(Path(checkpoint_dir) / "checkpoint.pt", solver.state_dict())
    solver = Solver(task.store(args.lam), SolverConfig(passes=args.passes, gap_check=args.gap_check, seed=args.seed),
                    evaluate=task.evaluate, progress=save)
    t0 = time.perf_counter()
    hist = solver.run()
    return time.perf_counter() - t0, hist


def lightning(args, blocks_per_step, root, checkpoint):
    module = SSVMModule(dataset="ocr-large", lam=args.lam, passes=args.passes, gap_check=args.gap_check,
                        seed=args.seed, blocks_per_step=blocks_per_step)
    timer = LoopTimer()
    callbacks = [timer] + ([ModelCheckpoint(save_top_k=0, save_last=True)] if checkpoint else [])
    L.Trainer(max_epochs=-1, default_root_dir=root, enable_progress_bar=False, enable_model_summary=False,
              log_every_n_steps=1, enable_checkpointing=checkpoint, callbacks=callbacks).fit(module)
    return timer.wall, module.history


def strip(h):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in h]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=float, default=40)
    ap.add_argument("--gap-check", type=float, default=10)
    ap.add_argument("--lam", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "lightning_overhead.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    plain(argparse.Namespace(**{**vars(args), "passes": 2, "gap_check": 1}))      # numba warm-up
    n = 6251
    variants = {"plain": (None, False), "lightning": (n, False), "lightning_chunk_n/10": (-(-n // 10), False),
                "plain_ckpt": (None, True), "lightning_ckpt": (n, True)}
    baseline = {"plain": "plain", "lightning": "plain", "lightning_chunk_n/10": "plain", "plain_ckpt": "plain_ckpt",
                "lightning_ckpt": "plain_ckpt"}
    walls = {k: [] for k in variants}
    ref = None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, (chunk, ckpt) in variants.items():
                where = Path(tmp) / f"{name.replace('/', '_')}_{r}"
                where.mkdir()
                if name.startswith("plain"):
                    wall, hist = plain(args, where if ckpt else None)
                else:
                    wall, hist = lightning(args, chunk, where, ckpt)
                ref = ref or strip(hist)
                if chunk in (None, n):
                    assert strip(hist) == ref, f"{name}: the history differs from the plain engine's"
                walls[name].append(wall)
                print(f"repeat {r}: {name:22s} {wall:7.3f} s  ({wall / hist[-1]['passes'] * 1e3:6.1f} ms/pass)",
                      flush=True)
    passes = ref[-1]["passes"]
    res = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
           "lightning": L.__version__, "dataset": "ocr-large", "n": n, "lam": args.lam, "passes": passes,
           "gap_check": args.gap_check, "repeats": args.repeats, "walls_s": walls, "variants": {}}
    for name, w in walls.items():
        med, base = statistics.median(w), statistics.median(walls[baseline[name]])
        # per-repeat ratios against the baseline run of the same repeat (same machine state)
        ratios = [x / p for x, p in zip(w, walls[baseline[name]])]
        res["variants"][name] = {"wall_median_s": med, "ms_per_pass": med / passes * 1e3, "baseline": baseline[name],
                                 "overhead_vs_baseline": med / base - 1.0,
                                 "overhead_per_repeat": [x - 1.0 for x in ratios],
                                 "overhead_median_of_ratios": statistics.median(ratios) - 1.0}
    print(f"\nOCR-large BCFW-gap, {passes:g} effective passes, gap check every {args.gap_check:g}, "
          f"median of {args.repeats}:")
    for name, v in res["variants"].items():
        print(f"  {name:22s} {v['ms_per_pass']:7.1f} ms/pass   vs {v['baseline']:10s} {100 * v['overhead_vs_baseline']:+5.1f}%  "
              f"(per repeat: {', '.join(f'{100 * x:+.1f}%' for x in v['overhead_per_repeat'])})")
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
