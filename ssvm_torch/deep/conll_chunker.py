"""Neural CoNLL-2000 chunkers as one LightningModule: ``python -m ssvm_torch.deep fit --config
recipes/conll_deep_hinge.yaml`` (the recipe's ``model.class_path`` picks this module).

The network (:class:`ssvm_torch.deep.conll_tagger.ChunkTagger`) trains on the *fit* split with Adam on the
mean per-sentence loss of its chain layer: the structured hinge with Hamming token loss
(``loss="hinge"``: max_y [s(y) + Hamming(y, y_i)] - s(y_i), the margin-rescaled hinge of Taskar et al.
2003 / Tsochantaridis et al. 2005 inside the network), the CRF negative log-likelihood
(``loss="crf"``) or the softmax-margin loss (``loss="softmax_margin"``: the CRF likelihood of the
Hamming-augmented scores, Gimpel & Smith 2010; docs/nn.md). With ``features`` (a template name, e.g. ``rich``) the linear model's sparse
attributes add their per-tag scores to the emissions (the hybrid; SparseAdam on those rows).

Model selection: after every epoch the chunk F1 of the *dev* split (the last ``heldout`` of the
training file, :func:`ssvm_torch.data.conll.split_heldout`, the split of ``ssvm-train --select-lam``)
is recorded; the weights of the best dev epoch are kept, training stops after ``patience`` epochs
without a better dev F1 (or at the trainer's ``max_epochs``). With ``ema_decay`` the weights that are
evaluated, kept and saved are an exponential moving average of the trained ones (updated after every
optimizer step, ``torch.optim.swa_utils.AveragedModel``; Polyak & Juditsky 1992 averaging): the training
itself is unchanged. The test file is decoded once, at the
end, with the best dev weights. Outputs (``out`` or the logger's directory): ``config.json``,
``history.json`` (per epoch: loss, dev F1, seconds, peak RSS), ``chunker.pt`` (weights, vocabulary,
hyper-parameters), ``test_predictions.pt`` (``{"predictions": [[BIO tag, ...], ...]}``, one list per
test sentence in file order) and ``results.json``. Every file loads with ``weights_only=True``;
Lightning checkpoints carry the history and the best weights, so a resumed run ends where the
uninterrupted one would.

Partial annotation (issue 73): ``hide_fraction`` hides that fraction of the fit split's token labels, the
positions drawn by ``hide_seed`` alone (:func:`ssvm_torch.data.partial.hidden_positions`: the same positions
for every loss and seed of the run); the chain layer reads a hidden position as unobserved (its loss over
the labelings that agree with the observed tags, :mod:`ssvm_torch.chain.partial`). The dev split keeps its
labels, so model selection is the full runs' and the comparison changes the training annotation only;
``results.json`` records the hidden and total positions. A semi-Markov head (below) reads the observed tags,
in the run's tag scheme, as a :class:`~ssvm_torch.segments.PartialSegmentation` (each position's chunk type and
begin flag, and with BIOES tags its end flag) and trains on the segmentations that agree with it
(:mod:`ssvm_torch.segments.objectives`).

Chunks as segments: ``structure="semimarkov"`` trains the same encoder with a semi-Markov head
(:class:`ssvm_torch.nn.SemiMarkovChain`; :mod:`ssvm_torch.deep.conll_tagger`): one label per chunk type plus "O",
segments of at most ``max_segment`` words (None: the fit split's longest chunk), the same three losses
(the hinge's and softmax-margin's Delta: the words whose BIO tag differs). Chunk tags are read into segments the
way conlleval reads them (:func:`ssvm_torch.segments.segments_from_tags`) and decoded segments are written back
as BIO tags, so dev and test F1 are computed exactly as for the chain heads. With ``features`` (the hybrid) an
attribute scores each segment label's words, first and last word, and with ``single_scores`` one-word segments too
(:mod:`ssvm_torch.deep.conll_tagger`).

Decoding: ``decode="max"`` (the best labeling or segmentation) or ``"mbr"`` (minimum Bayes risk: the one of least
expected Hamming / BIO-tag loss under the CRF of the scores, :mod:`ssvm_torch.chain.mbr`,
:mod:`ssvm_torch.segments.mbr`), for dev selection and the test file alike.
"""
from __future__ import annotations

import json
import math
import resource
import time

import lightning as L
import torch
import torch.utils.data as tud

from ..constraints import allowed_transitions, bio_to_bioes
from ..data.partial import check_hiding, hidden_positions
from ..devices import use_threads
from ..errors import check, check_choice, check_positive
from ..lightning import log_hp_metrics, run_output_dir, save_last_checkpoint
from ..atomic import atomic_write_bytes
from ..outputs import device_record, save_history, save_torch
from ..segments import (PartialSegmentation, partial_from_tags, segment_lengths, segments_from_tags,
                        tags_from_segments)
from .epochs import EpochPermutation, epoch_mean, epoch_seed, manual_step
from .conll_tagger import ChunkTagger
from .dev_selection import DevSelectedRun
from .conll_text import load_chunking, tags_to_bio, word_dropout

DECODES = ("max", "mbr")


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB; Linux reports ru_maxrss in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def chunk_f1(gold: list, pred: list) -> float:
    """Chunk F1 in % by seqeval (default conlleval mode) of BIO tag lists."""
    from seqeval.metrics import f1_score
    return 100 * float(f1_score(gold, pred))   # a Python float: checkpoints load weights_only


class ConllChunker(DevSelectedRun, L.LightningModule):
    """See the module docstring. ``tags``: train on BIO or BIOES tags; ``constraints``: forbid the
    scheme's invalid transitions in training and decoding (:func:`ssvm_torch.nn.allowed_transitions`);
    ``word_dropout``: the alpha of the UNK dropout; ``attr_dropout``: the hybrid's attribute dropout;
    ``batch_sentences``: sentences per step;
    ``decode``: how dev and test are decoded, ``"max"`` (the best labeling) or ``"mbr"`` (the labeling of least
    expected task loss under the CRF of the scores, :meth:`predict`)."""

    selected_by = "the chunker keeps the weights of its best dev F1 epoch"
    weights_file = "chunker.pt"
    checkpoint_key, checkpoint_names = "ssvm_chunker", ("ConllChunker", "chunker state")

    # what a checkpoint belongs to: resuming it under other values is refused (lightning/cli.py)
    resume_identity = ("loss", "tags", "constraints", "features", "attr_min_count", "word_min_count", "heldout",
                       "train_size", "word_dim", "char_dim", "char_filters", "pos_dim", "hidden", "layers",
                       "ema_decay", "hide_fraction", "hide_seed", "structure", "max_segment", "single_scores")

    def __init__(self, loss: str = "hinge", tags: str = "bioes", constraints: bool = True,
                 features: str | None = None, attr_min_count: int = 1, bag_lr: float = 0.01, attr_dropout: float = 0.0,
                 word_min_count: int = 2, word_dropout: float = 0.25, word_dim: int = 100, char_dim: int = 30,
                 char_filters: int = 50, pos_dim: int = 25, hidden: int = 128, layers: int = 1,
                 dropout: float = 0.5, lr: float = 1e-3, weight_decay: float = 0.0, grad_clip: float = 5.0,
                 batch_sentences: int = 32, patience: int = 5, heldout: float = 0.1, train_size: int | None = None,
                 seed: int = 0, threads: int | None = None, kernels: str = "auto", out: str | None = None,
                 ema_decay: float | None = None, hide_fraction: float = 0.0, hide_seed: int = 0,
                 structure: str = "chain", max_segment: int | None = None, single_scores: bool = False,
                 decode: str = "max"):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        check_choice(loss, "loss", ("hinge", "crf", "softmax_margin"))
        check_choice(tags, "tags", ("bio", "bioes"))
        check(isinstance(batch_sentences, int) and batch_sentences >= 1, "batch_sentences", "an int >= 1",
              batch_sentences)
        check(isinstance(patience, int) and patience >= 1, "patience", "an int >= 1", patience)
        check(0.0 <= dropout < 1.0, "dropout", "a probability in [0, 1)", dropout)
        check(word_dropout >= 0, "word_dropout", "alpha >= 0", word_dropout)
        check(0.0 <= attr_dropout < 1.0, "attr_dropout", "a probability in [0, 1)", attr_dropout)
        for name in ("lr", "bag_lr", "grad_clip"):
            check_positive(getattr(self.hparams, name), name)
        check(weight_decay >= 0, "weight_decay", ">= 0", weight_decay)
        check(ema_decay is None or 0.0 < ema_decay < 1.0, "ema_decay", "None or a decay in (0, 1)", ema_decay)
        check_hiding(hide_fraction, hide_seed)
        check_choice(structure, "structure", ("chain", "semimarkov"))
        check_choice(decode, "decode", DECODES)
        if structure == "semimarkov":
            check(not constraints, "constraints", "false with structure 'semimarkov' (every segmentation is a "
                  "well-formed chunking: there is nothing to constrain)", constraints)
        check(max_segment is None or (isinstance(max_segment, int) and max_segment >= 1), "max_segment",
              "None (the fit split's longest chunk) or an int >= 1", max_segment)
        check(not single_scores or (structure == "semimarkov" and features is not None), "single_scores",
              "false unless a semi-Markov hybrid (structure 'semimarkov' with features)", single_scores)
        self.segment_labels: list | None = None
        self.corpus = self.tagger = self.ema = None
        self.history: list = []
        self.best: dict = {"epoch": -1, "dev_f1": -math.inf, "state": None}
        self.gen = torch.Generator().manual_seed(seed)
        self._epoch: dict = {}

    # -- set-up (setup(): DevSelectedRun) ---------------------------------------------------------
    def build(self) -> None:
        """The corpus and the network of the hyperparameters (what :meth:`setup` does besides the
        trainer's checkpoint writer; without a trainer: tests, notebooks)."""
        hp = self.hparams
        if hp.threads is not None:
            use_threads(hp.threads)
        self.corpus = load_chunking(hp.tags, hp.heldout, hp.word_min_count, hp.features, hp.attr_min_count,
                                    hp.train_size)
        fit = self.corpus.fit
        hidden = hidden_positions(len(fit.tag), hp.hide_fraction, hp.hide_seed)
        fit.tag = torch.where(hidden, -1, fit.tag)
        self.hidden_labels = int(hidden.sum())
        v = self.corpus.vocab
        constraints = allowed_transitions(self.corpus.scheme, v.tags) if hp.constraints else None
        n_out, L = len(v.tags), 0
        if hp.structure == "semimarkov":
            L = self._fit_segments()
            n_out = len(self.segment_labels)
        torch.manual_seed(hp.seed)                  # the initial weights: a function of the seed alone
        self.tagger = ChunkTagger(len(v.words), len(v.chars), len(v.pos), n_out, self.corpus.n_attributes,
                                  hp.word_dim, hp.char_dim, hp.char_filters, hp.pos_dim, hp.hidden, hp.layers,
                                  hp.dropout, hp.loss, constraints, hp.kernels, hp.attr_dropout, L,
                                  hp.single_scores).to(self.device)
        if hp.ema_decay is not None:
            from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
            # a submodule: Lightning's checkpoints carry (and seal) the average with the weights. Parameters
            # only: the buffers are the chain layer's constant constraint penalties (-inf, which a
            # moving average would turn into NaN), and the tagger keeps no running statistics
            self.ema = AveragedModel(self.tagger, multi_avg_fn=get_ema_multi_avg_fn(hp.ema_decay))
            self.ema.requires_grad_(False)          # not trained: DDP must not wait for its gradients
        self.word_counts = torch.tensor(v.word_counts)

    def _fit_segments(self) -> int:
        """The semi-Markov head's labels ("O" and the fit split's chunk types), the fit split's gold segments as a
        flat tensor aligned with its tokens, and the longest segment allowed (``max_segment``, checked against
        the fit split's chunks)."""
        fit = self.corpus.fit
        kinds = sorted({t[2:] for s in fit.gold for t in s if t != "O"})
        self.segment_labels = ["O"] + kinds
        segments, lengths = segments_from_tags(fit.gold, self.segment_labels)
        longest = int(segment_lengths(segments, lengths).max())
        L = self.hparams.max_segment or longest
        check(longest <= L, "max_segment", f">= {longest}, the fit split's longest chunk", L)
        inside = torch.arange(segments.shape[1])[None, :] < lengths[:, None]
        self.fit_segments = segments[inside]
        self.fit_observed = None
        if self.hidden_labels:
            # the hidden positions' tags unknown, the others read in the run's tag scheme (BIOES tags also
            # observe where chunks end), so a semi-Markov head sees what a chain head of the same tags sees
            scheme = self.corpus.scheme
            names = [bio_to_bioes(s) if scheme == "BIOES" else list(s) for s in fit.gold]
            known = (fit.tag >= 0).tolist()
            flat = iter(known)
            partial = [[t if next(flat) else None for t in s] for s in names]
            observed, _ = partial_from_tags(partial, self.segment_labels, scheme=scheme)
            self.fit_observed = torch.stack([x[inside] for x in observed])          # (3, W): labels, begins, ends
        return L

    def configure_optimizers(self):
        hp = self.hparams
        opts = [torch.optim.AdamW(self.tagger.dense_parameters(), lr=hp.lr, weight_decay=hp.weight_decay)]
        if self.tagger.sparse_parameters():
            opts.append(torch.optim.SparseAdam(self.tagger.sparse_parameters(), lr=hp.bag_lr))
        return opts

    def train_dataloader(self):
        order = EpochPermutation(self.corpus.fit.n, self.hparams.seed)
        return tud.DataLoader(range(self.corpus.fit.n), batch_size=self.hparams.batch_sentences, sampler=order,
                              collate_fn=torch.tensor)

    def _on_device(self, batch: dict) -> dict:
        out = {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in batch.items()}
        if batch["bag"] is not None:
            out["bag"] = tuple(t.to(self.device) for t in batch["bag"])
        return out

    # -- the loop -------------------------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        self._epoch = {"t0": time.perf_counter(), "loss": 0.0, "batches": 0}

    def training_step(self, idx, batch_idx):
        hp = self.hparams
        # every random draw of a step (UNK, dropout and attribute-dropout masks) from a seed of (run seed,
        # epoch, step) alone: a resumed run draws what the uninterrupted one drew, whatever else (e.g. the
        # DataLoader's base seed) consumed the global generator in between
        s = epoch_seed(hp.seed, self.current_epoch) * 100_003 + batch_idx
        self.gen.manual_seed(s % (2 ** 63))
        torch.manual_seed((s + 1) % (2 ** 63))
        loss = self.batch_loss(idx)
        opts = self.optimizers()
        opts = opts if isinstance(opts, list) else [opts]
        self._epoch["loss"] += manual_step(self, loss, opts, clip=(self.tagger.dense_parameters(), hp.grad_clip))
        if self.ema is not None:
            self.ema.update_parameters(self.tagger)
        self._epoch["batches"] += 1
        return None

    def batch_loss(self, idx: torch.Tensor) -> torch.Tensor:
        """The training loss of the fit split's sentences ``idx``: the chain layer's loss, the mean
        over the sentences (so under DDP the ranks' averaged gradient is the one of the union of their
        batches), with the word and (hybrid) attribute dropout of training mode."""
        self.tagger.train()
        batch = self.corpus.fit.batch(idx.cpu())
        word = word_dropout(batch["word"], self.word_counts, self.hparams.word_dropout, self.gen)
        batch = self._on_device(batch)
        if self.segment_labels is not None:
            rows = batch["rows"]
            take = (lambda flat: torch.where(rows >= 0, flat[rows.clamp(min=0).cpu()].to(self.device), -1))
            gold = take(self.fit_segments) if self.fit_observed is None else \
                PartialSegmentation(*(take(x) for x in self.fit_observed))
            return self.tagger.chain(self.tagger.segment_scores(batch, word.to(self.device)), gold,
                                     lengths=batch["mask"].sum(1), reduction="mean")
        em = self.tagger.emissions(batch, word.to(self.device))
        # -1 at a masked-on position: a hidden label, unobserved for the chain layer (hide_fraction)
        return self.tagger.chain(em, torch.where(batch["mask"], batch["tag"], 0), batch["mask"], reduction="mean")

    def on_train_epoch_end(self) -> None:
        hp = self.hparams
        seconds = time.perf_counter() - self._epoch["t0"]
        dev_f1 = chunk_f1(self.corpus.dev.gold, self.predict(self.corpus.dev, self.evaluated()))
        rec = {"epoch": self.current_epoch, "loss": epoch_mean(self, self._epoch["loss"], self._epoch["batches"]),
               "dev_f1": dev_f1, "seconds": seconds, "peak_rss_mb": peak_rss_mb()}
        if dev_f1 > self.best["dev_f1"]:
            self.best = {"epoch": self.current_epoch, "dev_f1": dev_f1,
                         "state": {k: v.detach().cpu().clone() for k, v in self.evaluated().state_dict().items()}}
        rec["best_epoch"] = self.best["epoch"]
        self.history.append(rec)
        if self.current_epoch - self.best["epoch"] >= hp.patience:
            self.trainer.should_stop = True
        if self.trainer.is_global_zero:
            print(f"epoch {rec['epoch']}: loss {rec['loss']:.4f}, dev F1 {dev_f1:.2f} (best {self.best['dev_f1']:.2f} "
                  f"at epoch {self.best['epoch']}), {seconds:.1f} s, peak RSS {rec['peak_rss_mb']:.0f} MB", flush=True)
        for logger in self.loggers:
            logger.log_metrics({f"chunker/{k}": float(v) for k, v in rec.items()}, step=self.current_epoch)
        save_last_checkpoint(self.trainer)          # every epoch: a killed run resumes from its last one

    # -- prediction -----------------------------------------------------------------------------
    def evaluated(self):
        """The network that dev F1 measures and the best state keeps: the moving average with
        ``ema_decay``, else the trained tagger."""
        return self.tagger if self.ema is None else self.ema.module

    @torch.no_grad()
    def predict(self, split, tagger=None, chunk: int = 256) -> list:
        """BIO tag lists of every sentence of ``split`` (in its order), decoded by the chain layer of
        ``tagger`` (default: this module's) under the constraints, by ``decode`` (``"max"``: the best labeling or
        segmentation; ``"mbr"``: the one of least expected task loss under the CRF of the scores, the layers'
        ``decode(..., mbr=True)``); sentences batched by length."""
        tagger = self.tagger if tagger is None else tagger
        mbr = self.hparams.decode == "mbr"
        was = tagger.training
        tagger.eval()
        names = tags_to_bio(self.corpus.vocab.tags, self.corpus.scheme)
        order = torch.argsort(split.lengths, stable=True)
        out = [None] * split.n
        for s in range(0, split.n, chunk):
            idx = order[s:s + chunk]
            batch = self._on_device(split.batch(idx))
            if self.segment_labels is not None:
                lengths = batch["mask"].sum(1)
                segments = tagger.chain.decode(tagger.segment_scores(batch), lengths=lengths, mbr=mbr)
                tags = tags_from_segments(segments.cpu(), lengths.cpu(), self.segment_labels)
                for i, row in zip(idx.tolist(), tags):
                    out[i] = row
                continue
            tags = tagger.chain.decode(tagger.emissions(batch), batch["mask"], mbr=mbr).cpu()
            for row, i in enumerate(idx.tolist()):
                out[i] = [names[k] for k in tags[row, :int(split.lengths[i])].tolist()]
        tagger.train(was)
        return out

    # -- checkpoints ----------------------------------------------------------------------------
    # -- outputs (the checkpoint's history / best and on_fit_end: DevSelectedRun) ---------------
    def write_outputs(self, final: bool = True):
        """Restore the best dev weights, decode the test file once, write the run files (None, and
        nothing written, when no epoch has ended). ``final`` False (an interrupted fit,
        :meth:`~ssvm_torch.deep.dev_selection.DevSelectedRun.write_interrupted`): no test decoding;
        history.json, chunker.pt and a results.json that says so; returns (folder, "F1", best dev F1,
        its epoch)."""
        if self.best["state"] is None:     # no epoch ended (a stop before the first): no model to write
            print("no epoch finished, so no model was selected on dev; nothing written (resume from a "
                  "checkpoint or train at least one epoch)", flush=True)
            return None
        out = run_output_dir(self.trainer, self.hparams.out)
        out.mkdir(parents=True, exist_ok=True)
        self.tagger.load_state_dict(self.best["state"])
        results = {"dev_f1": self.best["dev_f1"], "best_epoch": self.best["epoch"], "epochs": len(self.history),
                   "s_per_epoch": sum(r["seconds"] for r in self.history) / max(1, len(self.history)),
                   "peak_rss_mb": peak_rss_mb(), "n_parameters": sum(p.numel() for p in self.tagger.parameters()),
                   "hidden_positions": self.hidden_labels, "fit_positions": len(self.corpus.fit.tag)}
        if final:
            test = self.predict(self.corpus.test)
            results.update(test_f1=chunk_f1(self.corpus.test.gold, test), test_sentences=len(test),
                           test_tokens=sum(map(len, test)))
        else:
            results["interrupted"] = True
        save_history(out, self.history)
        save_torch(out / "chunker.pt", {"state_dict": {k: v.detach().cpu() for k, v in self.tagger.state_dict().items()},
                                        "vocab": self.corpus.vocab.state(), "hparams": dict(self.hparams),
                                        "segment_labels": self.segment_labels})
        config = {"module": "ssvm_torch.deep.ConllChunker", **dict(self.hparams), "device": device_record(self.device)}
        atomic_write_bytes(out / "config.json", json.dumps(config, indent=1, default=str).encode())
        atomic_write_bytes(out / "results.json", json.dumps(results, indent=1).encode())
        if not final:
            return out, "F1", results["dev_f1"], results["best_epoch"]
        save_torch(out / "test_predictions.pt", {"predictions": test})
        log_hp_metrics(self, {"hp_metric": results["dev_f1"], "hp/test_f1": results["test_f1"]}, len(self.history))
        print(f"best dev F1 {results['dev_f1']:.2f} (epoch {results['best_epoch']}); test F1 {results['test_f1']:.2f} "
              f"on {len(test)} sentences; {results['s_per_epoch']:.1f} s/epoch; outputs in {out}", flush=True)
        return out
