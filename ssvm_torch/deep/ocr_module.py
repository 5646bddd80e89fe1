"""CNN + chain SSVM on OCR words as one LightningModule (issue 16), five ``method`` s:

* ``cnn``         -- the letter CNN alone (cross-entropy, independent letters).
* ``two-stage``   -- the LSP recipe (Osokin et al. 2016, App. I.4): the CNN pretrained on letters,
  frozen; its penultimate features are the chain SSVM's features; BCFW with gap sampling trains w.
* ``alternating`` -- two-stage, then per epoch: optimizer steps on the network minimizing the primal
  objective lam/2 ||w||^2 + 1/n sum_i H_i at the current w (through :func:`ssvm_torch.nn.chain_hinge`,
  dropout off so the steps see the objective itself), then a BCFW phase warm-started from the same
  dual variables on the new features (:func:`ssvm_torch.deep.warm.warm_start`); the exact gap of the
  SSVM subproblem is recorded after every phase.
* ``hinge``       -- end to end: network and chain weights by one torch optimizer on
  1/B sum_b H_b + lam/2 ||w||^2 (the deep structured SVM).
* ``crf``         -- the same with the CRF negative log-likelihood (:func:`ssvm_torch.chain.chain_crf_nll`).

Every method starts with ``pretrain_epochs`` of letter cross-entropy (the network trained upstream
on its own loss). An epoch is one pass over the training words in batches of ``batch_words``.
Test errors are recorded per epoch for monitoring only: nothing is selected on them (the epoch
counts and lambda are the recipe's). Outputs (``out`` or the logger's directory): ``history.json``,
``network.pt``, ``model.pt`` (the chain weights in the :class:`~ssvm_torch.models.chain.ChainModel`
layout on the network's features; ``cnn``: none), ``test_predictions.pt`` (a list of int64 label
tensors, one per test word in dataset order) and ``config.json``.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as Fn
import torch.utils.data as tud

from ..devices import use_threads
from ..errors import check, check_choice, check_positive
from ..lightning import log_hp_metrics, run_output_dir, seal, unseal
from ..models.chain import ChainModel
from ..nn import ChainSSVMHead, chain_crf_nll, chain_decode, chain_hinge
from ..atomic import atomic_write_bytes
from ..outputs import device_record, save_history, save_model, save_torch
from ..portable import pack, unpack
from ..solvers.loop import Solver, SolverConfig
from ..stores import make_store
from .epochs import EpochPermutation, epoch_mean, epoch_seed, manual_step
from .ocr_words import load_ocr_words, pad_rows
from .ocr_pose_nets import LetterCNN
from .warm import warm_start, with_features

METHODS = ("cnn", "two-stage", "alternating", "hinge", "crf")
CHECKPOINT_KEY = "ssvm_deep"


def shift_augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Each letter shifted by -1, 0 or +1 pixel in each direction (zeros enter at the border)."""
    padded = Fn.pad(images, (1, 1, 1, 1))
    dy = torch.randint(0, 3, (images.shape[0],), generator=generator)
    dx = torch.randint(0, 3, (images.shape[0],), generator=generator)
    rows = (dy[:, None] + torch.arange(16)[None, :])[:, :, None].expand(-1, 16, 8)
    cols = (dx[:, None] + torch.arange(8)[None, :])[:, None, :].expand(-1, 16, 8)
    b = torch.arange(images.shape[0])[:, None, None]
    return padded[b, 0, rows, cols][:, None]


class DeepChainModule(L.LightningModule):
    """See the module docstring. ``lam`` defaults to 1/n; ``bcfw_passes`` are the effective passes of
    each BCFW phase (two-stage / alternating), checked exactly every ``gap_check`` passes."""

    # what a checkpoint belongs to: resuming it under other values is refused (lightning/cli.py)
    resume_identity = ("method", "split", "train_size", "width", "n_features", "lam")

    def __init__(self, method: str = "alternating", split: str = "large", train_size: int | None = None,
                 width: int = 32, n_features: int = 128, dropout: float = 0.3, augment: bool = True,
                 pretrain_epochs: int = 8, lr: float = 1e-3, finetune_lr: float = 2e-4, weight_decay: float = 1e-4,
                 batch_words: int = 32, lam: float | None = None, bcfw_passes: float = 20, gap_check: float = 10,
                 seed: int = 0, threads: int | None = None, out: str | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        check_choice(method, "method", METHODS)
        check(isinstance(pretrain_epochs, int) and pretrain_epochs >= 0, "pretrain_epochs", "an int >= 0",
              pretrain_epochs)
        check(isinstance(batch_words, int) and batch_words >= 1, "batch_words", "an int >= 1", batch_words)
        check_positive(bcfw_passes, "bcfw_passes")
        if lam is not None:                           # None: 1/n, set once the data are loaded
            check_positive(lam, "lam")
        torch.manual_seed(seed)
        self.net = LetterCNN(width, n_features, 26, dropout)
        self.head = ChainSSVMHead(n_features, 26)
        self.gen = torch.Generator().manual_seed(seed)
        self.solver: Solver | None = None
        self.history: list = []
        self.train_words = self.test_words = None
        self._epoch = {}
        self._resumed = None              # a checkpoint's solver state, until the next BCFW phase

    # -- set-up ---------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if self.train_words is None:
            self.build()

    def build(self) -> None:
        """The words and lambda of the hyperparameters (all :meth:`setup` does; without a trainer:
        tests, notebooks), as :meth:`ConllChunker.build <ssvm_torch.deep.ConllChunker.build>`."""
        if self.hparams.threads is not None:
            use_threads(self.hparams.threads)
        self.train_words, self.test_words = load_ocr_words(self.hparams.split, self.hparams.train_size)
        self.lam = float(self.hparams.lam) if self.hparams.lam is not None else 1.0 / self.train_words.n

    def train_dataloader(self):
        order = EpochPermutation(self.train_words.n, self.hparams.seed)
        return tud.DataLoader(range(self.train_words.n), batch_size=self.hparams.batch_words, sampler=order,
                              collate_fn=torch.tensor)

    def configure_optimizers(self):
        hp = self.hparams
        params = list(self.net.parameters()) + (list(self.head.parameters()) if hp.method in ("hinge", "crf") else [])
        return torch.optim.AdamW(params, lr=hp.lr, weight_decay=hp.weight_decay)

    @property
    def pretraining(self) -> bool:
        return self.current_epoch < self.hparams.pretrain_epochs or self.hparams.method == "cnn"

    # -- features -------------------------------------------------------------------------------
    def _images(self, words, rows):
        """The letter images of ``rows`` on the module's device (augmented on the host, like any
        input pipeline, when training with ``augment``)."""
        x = words.images[rows.cpu()]
        if self.hparams.augment and self.net.training:
            x = shift_augment(x, self.gen)
        return x.to(self.device)

    @torch.no_grad()
    def all_features(self, words) -> torch.Tensor:
        """Penultimate features of every letter (N, F), eval mode, float64 on the CPU (the store's)."""
        was = self.net.training
        self.net.eval()
        out = torch.cat([self.net.features(words.images[s:s + 4096].to(self.device))
                         for s in range(0, words.images.shape[0], 4096)])
        self.net.train(was)
        return out.to("cpu", torch.float64)

    # -- the loop -------------------------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        self._epoch = {"t0": time.perf_counter(), "loss": 0.0, "batches": 0}
        hp = self.hparams
        self.gen.manual_seed(epoch_seed(hp.seed, self.current_epoch))          # augmentation
        torch.manual_seed(epoch_seed(hp.seed, self.current_epoch) + 1)          # dropout
        fresh = self.solver is None and self._resumed is None     # no SSVM yet (a resumed one is rebuilt later)
        if not self.pretraining and hp.method == "alternating" and fresh:
            # the two-stage SSVM on the pretrained features: the alternating loop's starting point
            rec = {"epoch": self.current_epoch, "stage": "two-stage", **self.bcfw_phase(), **self.evaluate()}
            self.history.append(rec)
        elif not self.pretraining and hp.method == "two-stage" and fresh:
            self.bcfw_phase()
        if hp.method == "alternating" and not self.pretraining:
            for group in self.optimizers().optimizer.param_groups:
                group["lr"] = hp.finetune_lr

    def training_step(self, idx, batch_idx):
        hp = self.hparams
        if hp.method == "two-stage" and not self.pretraining:
            return None                                     # the network is frozen after pretraining
        opt = self.optimizers()
        loss = self.batch_loss(idx)
        self._epoch["loss"] += manual_step(self, loss, [opt])
        self._epoch["batches"] += 1
        return None

    def batch_loss(self, idx: torch.Tensor) -> torch.Tensor:
        """The training loss of the training words ``idx`` in the current stage: the letters' cross
        entropy while pretraining, else the chain head's loss, the mean over the words (+ lam/2 ||head||^2
        for hinge and crf; under DDP the ranks' averaged gradient is the one of the union of their batches)."""
        hp = self.hparams
        pos, lengths, gt = self.train_words.batch(idx.cpu())
        pos, lengths, gt = pos.to(self.device), lengths.to(self.device), gt.to(self.device)
        rows = pos[pos >= 0]
        if self.pretraining:
            self.net.train()
            loss = Fn.cross_entropy(self.net(self._images(self.train_words, rows)), gt[pos >= 0])
        else:
            if hp.method == "alternating":
                self.net.eval()                             # dropout off: the steps see the primal itself
            else:
                self.net.train()
            feats = pad_rows(self.net.features(self._images(self.train_words, rows)), torch.where(
                pos >= 0, torch.cumsum((pos >= 0).reshape(-1), 0).reshape(pos.shape) - 1, -1))
            unary = self.head.unaries(feats)
            if hp.method == "crf":
                per = chain_crf_nll(unary, lengths, self.head.first, self.head.last, self.head.trans, gt)
            else:
                per = chain_hinge(unary, lengths, self.head.first, self.head.last, self.head.trans, gt)
            loss = per.mean()
            if hp.method in ("hinge", "crf"):
                loss = loss + self.lam / 2 * self.head.sq_norm()
        return loss

    def on_train_epoch_end(self) -> None:
        hp = self.hparams
        rec = {"epoch": self.current_epoch, "stage": "pretrain" if self.pretraining else hp.method,
               "net_loss": epoch_mean(self, self._epoch["loss"], self._epoch["batches"])}
        if hp.method == "alternating" and not self.pretraining:
            rec.update(self.bcfw_phase())
        elif hp.method == "two-stage" and self.solver is not None:
            rec.update(self._phase_record)
        rec["seconds"] = time.perf_counter() - self._epoch["t0"]
        rec.update(self.evaluate())
        self.history.append(rec)
        if self.trainer.is_global_zero:
            print(f"epoch {rec['epoch']} {rec['stage']}: net loss {rec['net_loss']:.4f}"
                  + (f", SSVM gap {rec['gap']:.4g}" if "gap" in rec else "")
                  + f", test error {rec['test_error']:.4f} per word / {rec['test_letter_error']:.4f} per letter,"
                  f" {rec['seconds']:.1f} s", flush=True)
        for logger in self.loggers:
            logger.log_metrics({f"deep/{k}": float(v) for k, v in rec.items()
                                if isinstance(v, (int, float)) and math.isfinite(v)}, step=self.current_epoch)

    # -- the SSVM subproblem --------------------------------------------------------------------
    def bcfw_phase(self) -> dict:
        """BCFW-gap passes on the SSVM with the network frozen: cold on the first call, then warm
        from the previous phase's dual variables. Returns the phase's gap record."""
        hp = self.hparams
        t0 = time.perf_counter()
        data = with_features(self.train_words.chain, self.all_features(self.train_words))
        rec = {}
        if self.solver is None:
            model = ChainModel.for_data(data)
            cfg = SolverConfig(solver="bcfw", sampling="gap", passes=hp.bcfw_passes, gap_check=hp.gap_check,
                               seed=hp.seed)
            self.solver = Solver(make_store(model, data, self.lam), cfg)
            if self._resumed is not None:               # the checkpoint's dual on this network's features
                self.solver.load_state_dict(self._resumed)       # w follows in warm_start below
                self._resumed = None
        if self.solver.passes > 0:
            self.solver, gp = warm_start(self.solver, data, passes=self.solver.passes + hp.bcfw_passes)
            rec["gap_warm_start"] = float(gp.block_gaps.sum())
        history = self.solver.run()
        last = history[-1]
        rec.update({"gap": last["gap"], "primal": last["primal"], "dual": last["dual"],
                    "ssvm_passes": self.solver.passes, "bcfw_seconds": time.perf_counter() - t0})
        self.head.load_w(self.solver.dual.w.to(self.head.first))
        self._phase_record = rec
        return rec

    # -- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Lightning saves the network, head and optimizer; this adds the SSVM dual (blocks, sampler,
        counters) and the history, with a SHA-256 of their content and of the weights and optimizer states. The dual does not depend on the
        features, so the resumed run rebuilds its store on the restored network's features."""
        state = {"solver": None if self.solver is None else pack(self.solver.state_dict(), sparse=True),
                 "history": list(self.history), "phase": dict(getattr(self, "_phase_record", {}))}
        checkpoint[CHECKPOINT_KEY] = seal(state, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = unseal(checkpoint, CHECKPOINT_KEY, "DeepChainModule", "SSVM state")
        self.history = list(saved["history"])
        self._phase_record = dict(saved["phase"])
        self._resumed = None if saved["solver"] is None else unpack(saved["solver"])

    # -- evaluation -----------------------------------------------------------------------------
    @torch.no_grad()
    def predict_words(self, words) -> list:
        """Predicted labels of every word (a list of int64 tensors): per-letter argmax for ``cnn``
        and during pretraining, chain decoding otherwise."""
        feats = self.all_features(words).to(self.device, self.head.first.dtype)
        if self.hparams.method == "cnn" or (self.pretraining and self.hparams.method in ("hinge", "crf")):
            was = self.net.training
            self.net.eval()
            labels = self.net.classifier(feats).argmax(1).cpu()
            self.net.train(was)
        elif self.hparams.method in ("two-stage", "alternating"):
            if self.solver is None:                         # still pretraining: the letter classifier
                labels = self.net.classifier(feats).argmax(1).cpu()
            else:                                           # the engine's own float64 prediction
                model = self.solver.dual.model
                labels = model.predict_ragged(self.solver.dual.w, with_features(words.chain, feats.double().cpu()))
        else:
            pos = words.pos.to(self.device)
            unary = self.head.unaries(pad_rows(feats, pos))
            lab = chain_decode(unary, words.chain.lengths.to(self.device), self.head.first, self.head.last,
                               self.head.trans)
            labels = lab[pos >= 0].cpu()
        off = words.chain.offsets
        return [labels[int(off[i]):int(off[i + 1])].to(torch.int64) for i in range(words.n)]

    def evaluate(self) -> dict:
        out = {}
        for name, words in (("train", self.train_words), ("test", self.test_words)):
            pred = torch.cat(self.predict_words(words))
            per_word = ChainModel.for_data(words.chain).ragged_loss(words.chain, pred)      # normalized Hamming
            out[f"{name}_error"] = float(per_word.mean())
            out[f"{name}_letter_error"] = float((pred != words.chain.Y).to(torch.float64).mean())
        return out

    # -- outputs --------------------------------------------------------------------------------
    def output_dir(self) -> Path:
        return run_output_dir(self.trainer, self.hparams.out)

    def on_fit_end(self) -> None:
        if self.trainer.is_global_zero:
            self.write_outputs()

    def write_outputs(self) -> Path:
        out = self.output_dir()
        out.mkdir(parents=True, exist_ok=True)
        save_history(out, self.history)
        save_torch(out / "network.pt", {"state_dict": {k: v.detach().cpu() for k, v in self.net.state_dict().items()},
                                        "width": self.hparams.width, "n_features": self.hparams.n_features})
        if self.hparams.method != "cnn":
            layout = {**ChainModel(self.hparams.n_features, 26).describe(), "features": "LetterCNN penultimate"}
            if self.solver is not None:
                w, ell = self.solver.dual.w, self.solver.dual.ell
            else:
                w, ell = self.head.to_w().double(), float("nan")     # end to end: no dual, no ell
            save_model(out, w, ell, self.lam, f"ocr-{self.hparams.split}", layout)
        save_torch(out / "test_predictions.pt", {"predictions": self.predict_words(self.test_words)})
        config = {"method": self.hparams.method, **{k: v for k, v in self.hparams.items()}, "lam": self.lam,
                  "device": device_record(self.device)}
        atomic_write_bytes(out / "config.json", json.dumps(config, indent=1, default=str).encode())
        if self.history:                 # no dev split here: hp_metric is the training objective at the end
            last = self.history[-1]
            log_hp_metrics(self, {"hp_metric": last.get("primal", last["net_loss"]), "hp/test_error": last["test_error"]},
                           len(self.history))
        return out
