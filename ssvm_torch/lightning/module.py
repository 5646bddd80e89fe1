"""``SSVMModule``: the solver engine as a Lightning optimizer loop (manual optimization).

Nothing here re-implements a solver. The module loads the task from the registry
(:func:`ssvm_torch.tasks.load_task`: the same datasets, models and stores as ``ssvm-train``) and a
:class:`~ssvm_torch.solvers.Solver`,
then lets Lightning own the loop:

* an epoch = one interval between exact gap checks (``gap_check`` passes of block steps);
* a training step = one chunk of ``blocks_per_step`` block steps (default n), run by the
  :class:`BlockFrankWolfe` optimizer's ``step`` so that Lightning counts optimizer steps
  (global step = chunks);
* the :class:`~ssvm_torch.lightning.callbacks.GapCheck` callback closes every epoch with the exact
  gap pass (refreshing all block gaps of the gap sampler), the test error, logging and stopping
  on gap <= ``gap_threshold`` / the pass or time budget;
* checkpoints carry the full solver state (w, ell, blocks, gap estimates, counters, sampler RNG,
  active sets and caches), so ``trainer.fit(module, ckpt_path=...)`` resumes exactly.

For a fixed seed the history equals ``Solver.run()``'s (and ``ssvm-train``'s) record for record,
apart from timings, as long as ``blocks_per_step`` is n (other chunk sizes move the exact w
recomputation, done at chunk ends, by less than a chunk).

TensorBoard (any Lightning logger gets the scalars): ``ssvm/<field>`` for every numeric history
field (gap, gap_estimate, primal, dual, train/test error, oracle_calls, passes, step_size_mean,
full_step_rate, cache_hit_rate, ...) at step = oracle calls, histograms ``ssvm/block_gaps`` and
``ssvm/sampling_prob``, and the run's hyper-parameters.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .. import distributed
from ..errors import SSVMInputError, check, check_choice
from ..outputs import content_digest, save_history, save_model, save_predictions
from ..portable import pack, unpack
from ..solvers import GapSampler, Solver, SolverConfig
from ..stores import KERNELS
from ..tasks import Problem, load_task
from .checkpoint_io import AtomicCheckpointIO
from .data import LiveChunk, block_loader

# the loader must stay in-process (its draws read the solver's live block gaps)
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*`IterableDataset` has `__len__` defined.*")
warnings.filterwarnings("ignore", ".*returned `None`, this fit will run with no optimizer.*")

CHECKPOINT_KEY = "ssvm_solver"


class BlockFrankWolfe(torch.optim.Optimizer):
    """torch.optim face of the engine: ``step(closure)`` runs the block steps of the chunk the
    closure returns (BCFW / SSG), or ``gap_check`` batch FW iterations. The parameter is w."""

    def __init__(self, solver: Solver):
        self.solver = solver
        super().__init__([solver.dual.w], {})

    @torch.no_grad()
    def step(self, closure=None):
        chunk = closure() if closure is not None else None
        if self.solver.cfg.solver == "fw":
            if not self.solver.state.done:
                self.solver.fw_iterations()
            return None
        check(isinstance(chunk, LiveChunk), "chunk", "a LiveChunk from the closure", type(chunk).__name__)
        return self.solver.run_chunk(chunk)


def run_output_dir(trainer, out) -> Path:
    """Where a module writes its run files: ``out`` if given, else the logger's log_dir, else the
    trainer's default_root_dir."""
    if out is not None:
        return Path(out)
    logger = trainer.logger
    return Path(logger.log_dir if logger is not None and getattr(logger, "log_dir", None)
                else trainer.default_root_dir)


class SSVMModule(L.LightningModule):
    """Train an SSVM with FW / BCFW (uniform, perm, gap sampling; fw/pairwise/away/best steps;
    caching) / SSG under a Lightning ``Trainer``. Arguments are ``ssvm-train``'s flags.

    Args:
        dataset: a registered task (ssvm_torch.tasks.TASKS): ocr-small, ocr-large, conll2000,
            conll2000-segments, scene, ocr-letters, segmentation-synth, pose-synth, hansards, ud-ewt or
            ud-ewt-spans.
        lam: regularization lambda of objective (1); default 1/n.
        blocks_per_step: steps per Lightning training step (default one pass: n, or n / batch_size).
        batch_size: blocks per step (mini-batch BCFW: tau distinct blocks decoded in one batched oracle
            call, one exact line search on their joint direction; 1 = BCFW).
        exchange: under ``strategy="ddp"`` (data-parallel mini-batch BCFW, ssvm_torch.distributed): how
            the ranks combine a step's direction, ``allreduce``, ``gather`` (bit-identical to one
            process) or ``auto`` (gather for d >= 2^20); or ``rounds``: BCFW rounds on each rank's shard
            with one all-reduce per round (CoCoA+; a training step is a round of ``blocks_per_step``
            steps per rank, default one pass over the largest shard); or ``shared``: the ranks of one
            machine step asynchronously on one w in shared memory, exact at every gap check.
        out: directory for ``history.json`` and ``model.pt`` (default: the logger's log_dir,
            else the trainer's default_root_dir).
        histograms: log block-gap and sampling-probability histograms at every gap check.
        kernels: the decoder and store kernels, ``auto`` (numba on CPU float64, torch elsewhere),
            ``numba`` or ``torch`` (forces the pure-torch path, the one CUDA runs).
    """

    # what a checkpoint belongs to: resuming it under other values is refused (lightning/cli.py)
    resume_identity = ("dataset", "lam", "train_size", "unary_only", "dtype")

    def __init__(self, dataset: str = "ocr-small", lam: float | None = None, train_size: int | None = None,
                 unary_only: bool = False, solver: str = "bcfw", sampling: str = "gap", step: str = "fw",
                 cache: bool = False, cache_F: float = 0.25, cache_nu: float = 0.01, max_cache: int = 50,
                 gap_check: float = 10, gap_refresh: int = 1, passes: float = 50, gap_threshold: float = 0.0,
                 time_budget: float | None = None, seed: int = 0, averaging: bool = False,
                 recompute_every: int = 10, blocks_per_step: int | None = None, dtype: str = "float64",
                 threads: int | None = 1, histograms: bool = True, out: str | None = None, kernels: str = "auto",
                 batch_size: int = 1, exchange: str = "auto"):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        check_choice(dtype, "dtype", ("float64", "float32"))
        check_choice(kernels, "kernels", KERNELS)
        check_choice(exchange, "exchange", distributed.EXCHANGES)
        if blocks_per_step is not None:
            check(isinstance(blocks_per_step, int) and blocks_per_step >= 1, "blocks_per_step", "an int >= 1",
                  blocks_per_step)
        if threads is not None:
            check(isinstance(threads, int) and threads >= 1, "threads", "an int >= 1", threads)
        self.config = SolverConfig.from_mapping(
            {**self.hparams, "time_budget": math.inf if time_budget is None else time_budget}).validate()
        self.solver: Solver | None = None
        self.task: Problem | None = None
        self.lam: float | None = None
        self.logged = 0              # history records already sent to the loggers

    # -- set-up ---------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if self.solver is not None:
            return
        strategy = self.trainer.strategy
        if type(strategy.checkpoint_io) is TorchCheckpointIO:
            strategy.checkpoint_io = AtomicCheckpointIO()
        if self.hparams.threads is not None:
            torch.set_num_threads(self.hparams.threads)
        hp = self.hparams
        dtype, device = getattr(torch, hp.dtype), strategy.root_device
        self.task = load_task(hp.dataset, train_size=hp.train_size, unary_only=hp.unary_only, device=device,
                              dtype=dtype)
        self.lam = self.task.lam(hp.lam)
        if self.trainer.world_size > 1:        # DDP: this rank's shard of the blocks (ssvm_torch.distributed)
            store = distributed.sharded_store(self.task, self.lam, device=device, dtype=dtype, kernels=hp.kernels,
                                              exchange=hp.exchange)
            # DDP wraps only a module with a trainable parameter; the solver's state is not one (it runs
            # its own collectives), so a sharded run carries this one unused scalar
            self.ddp_anchor = torch.nn.Parameter(torch.zeros(1, device=device))
        else:
            store = self.task.store(self.lam, device=device, dtype=dtype, kernels=hp.kernels)
        if isinstance(store, distributed.RoundsDual):
            self.solver = distributed.RoundsSolver(store, self.config, evaluate=self.task.evaluate)
        else:
            self.solver = Solver(store, self.config, evaluate=self.task.evaluate)

    def configure_optimizers(self):
        return BlockFrankWolfe(self.solver)

    def configure_callbacks(self):
        from .callbacks import GapCheck
        return [GapCheck()]

    def on_fit_start(self) -> None:
        """GapCheck runs first among the callbacks: the record it logs at an epoch's end is then what
        the progress bar's own epoch-end hook shows (Lightning appends a module's callbacks after the
        bar, which showed the previous record on its last line), and it stays before ModelCheckpoint."""
        from .callbacks import GapCheck
        callbacks = self.trainer.callbacks
        self.trainer.callbacks = ([c for c in callbacks if isinstance(c, GapCheck)]
                                  + [c for c in callbacks if not isinstance(c, GapCheck)])

    def train_dataloader(self):
        return block_loader(self.solver, self.hparams.blocks_per_step)

    # -- the loop -------------------------------------------------------------------------------
    def on_train_start(self) -> None:
        if self.history and self.trainer.is_global_zero:       # restored by on_load_checkpoint
            print(f"resumed at {self.solver.passes:.1f} effective passes ({len(self.history)} history records)",
                  flush=True)
        self.solver.start()
        self.log_records()

    def training_step(self, chunk, batch_idx):
        self.optimizers().step(closure=lambda: chunk)

    @property
    def history(self) -> list:
        return self.solver.state.history

    # -- logging --------------------------------------------------------------------------------
    def log_records(self) -> None:
        """Send the history records not yet logged to every logger (step = oracle calls)."""
        for rec in self.history[self.logged:]:
            step = int(rec["oracle_calls"])
            scalars = {f"ssvm/{k}": float(v) for k, v in rec.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
            for logger in self.loggers:
                logger.log_metrics(scalars, step=step)
        if self.history[self.logged:] and self.hparams.histograms:
            self._log_histograms(int(self.history[-1]["oracle_calls"]))
        self.logged = len(self.history)
        for logger in self.loggers:
            logger.save()

    def _log_histograms(self, step: int) -> None:
        from lightning.pytorch.loggers import TensorBoardLogger
        gaps = self.solver.block_gaps
        sampler = self.solver.sampler
        probs = sampler.probabilities() if isinstance(sampler, GapSampler) else np.full(len(gaps), 1.0 / len(gaps))
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                if np.isfinite(gaps).all():
                    logger.experiment.add_histogram("ssvm/block_gaps", gaps, step)
                logger.experiment.add_histogram("ssvm/sampling_prob", probs, step)

    # -- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        state = pack(self.solver.state_dict(), sparse=True)
        checkpoint[CHECKPOINT_KEY] = {"solver": state, "logged": self.logged, "sha256": content_digest(state)}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if CHECKPOINT_KEY not in checkpoint:
            raise SSVMInputError(f"checkpoint: expected an SSVMModule checkpoint with key {CHECKPOINT_KEY!r}, "
                                 f"got keys {sorted(checkpoint)}")
        saved = checkpoint[CHECKPOINT_KEY]
        if "sha256" in saved and saved["sha256"] != content_digest(saved["solver"]):
            raise SSVMInputError("checkpoint: the solver state is damaged: its content does not match the SHA-256 "
                                 "saved with it (flipped or truncated bytes); resume from another checkpoint")
        self.solver.load_state_dict(unpack(saved["solver"]))
        self.logged = checkpoint[CHECKPOINT_KEY]["logged"]

    # -- outputs --------------------------------------------------------------------------------
    def output_dir(self) -> Path:
        return run_output_dir(self.trainer, self.hparams.out)

    def write_outputs(self) -> Path:
        """history.json, model.pt and test_predictions.json, in the formats of ``ssvm-train``."""
        out = self.output_dir()
        save_history(out, self.solver.finish())               # the last record: the returned model's
        w, ell = self.solver.model_point()
        save_model(out, w, ell, self.lam, self.hparams.dataset, self.task.describe(), self.solver.model_extras())
        if self.task.predictions is not None:
            save_predictions(out, self.task.predictions(w))
        return out
