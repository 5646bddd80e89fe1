"""The neural dependency parser on UD English-EWT as one LightningModule: ``python -m ssvm_torch.deep fit
--config recipes/ud_deep_<head>.yaml`` (the recipe's ``model.class_path`` picks this module).

The network (:class:`ssvm_torch.deep.biaffine.BiaffineParser`, Dozat & Manning 2017) trains with Adam on
the mean per-sentence loss of its head scores plus the relation cross-entropy at the gold heads. Heads:

* ``"local"``: cross-entropy of every word over its candidate heads (Dozat & Manning 2017);
* ``"crf"``, ``"hinge"``, ``"softmax_margin"``: the tree losses of :class:`ssvm_torch.nn.DependencyTree`
  (the tree CRF of Zhang et al. 2020; the structured hinge with Hamming cost over heads, Taskar et al.
  2003; its softmax-margin, Gimpel & Smith 2010), over projective trees (``projective=True``: Eisner;
  the training trees that are not projective, 2.3% of EWT's, then enter the relation loss only) or all
  trees (Chu-Liu-Edmonds, the matrix-tree theorem).

``tags="predicted"`` (with ``upos_input=False``) makes a parser that reads words only: a UPOS head on the shared
encoder (:mod:`ssvm_torch.deep.ud_tagging`, a :class:`ssvm_torch.nn.LinearChain` with its own ``tag_loss``) is
trained jointly (the loss adds ``tag_weight`` x the tagger's) and predicts the tags at test time; the tree head
reads the shared states, and with ``tag_feed`` also the embeddings (``upos_dim``) of the tagger's predicted tags
(:meth:`~ssvm_torch.deep.biaffine.BiaffineParser.scorer_states`; ``tag_noise``: in training, that share of them
replaced by tags the tagger finds likely, :func:`~ssvm_torch.deep.ud_tagging.confusable_tags`). Its dev UPOS
accuracy is recorded every epoch, the test one and the predicted tags (``"upos"``) in the outputs. ``xpos`` adds a
second tagger of the same kind for the treebank's XPOS (EWT: Penn Treebank tags), trained jointly with the same
weight (a multi-task signal for the shared encoder, as in Stanza's joint UPOS / XPOS tagger) and predicting them
(``"xpos"``; its dev / test accuracy recorded too); the scorers read the UPOS ones only.

``order=2`` adds adjacent-sibling scores (the network's triaffine sibling scorer, ``sib_dim``; Zhang et al.
2020) to a tree head's arc scores: the second-order projective model of :class:`ssvm_torch.nn.DependencyTree`,
trained with the same three losses and decoded by the second-order Eisner (McDonald & Pereira 2006);
``first_child`` adds McDonald & Pereira's first-child parts (the scorer's entries [m, h, h]: the dependent
nearest its head on each side), which SuPar's model leaves out.

Partial annotation (issue 73): ``hide_fraction`` hides that fraction of the training words' heads and relations
(the positions drawn by ``hide_seed`` alone, :func:`ssvm_torch.data.partial.hidden_positions`: the same words for
every loss). A tree head reads a hidden head as unobserved (its loss over the trees that agree with the observed
heads, :mod:`ssvm_torch.trees.partial`), ``local`` and the relation loss skip the word. The sentences a
projective head trains on stay those whose complete tree is projective (the full runs' set), and dev keeps its
annotation: the comparison with the full runs changes the training annotation only. ``results.json`` records
the hidden and total training words.

Every head decodes well-formed single-root trees (Eisner or MST, as ``projective`` says); for ``local``
the per-word argmax of the same scores is scored too (``dev_uas_argmax``, with the share of sentences
whose argmax is not a tree). Model selection: dev LAS after every epoch (the released dev split), the best
epoch's weights kept, training stops after ``patience`` epochs without a better dev LAS (or at the
trainer's max_epochs); the test file is decoded once, at the end. With ``ema_decay`` > 0 what dev scores and
selects (and ``parser.pt`` holds) is the exponential moving average of the trained weights (Polyak averaging;
torch's ``AveragedModel``, updated after every step, in the checkpoint), and each epoch's record also has the
trained weights' own dev UAS / LAS (``dev_uas_trained``, ``dev_las_trained``: one more dev decoding). UAS /
LAS by CoNLL 2018's definitions: every word, punctuation included, LAS on the universal part of DEPREL. Gold UPOS
is an input unless ``upos_input=False``.

Outputs (``out`` or the logger's directory): ``config.json`` (with ``"loss"``, ``"projective"``,
``"upos_input"``, ``"order"``, ``"device"``: where it trained, :func:`ssvm_torch.outputs.device_record`,
``"trainer_max_epochs"``: the trainer's epoch cap),
``history.json`` (per epoch: loss, dev UAS / LAS, seconds, the share of the epoch in the tree layer's forward
and backward),
``parser.pt`` (weights, vocabulary, hyper-parameters), ``test_predictions.pt`` (``{"heads": [[int, ...],
...], "labels": [[str, ...], ...]}``, the test sentences in file order, one entry per word) and
``results.json``. Lightning checkpoints carry the history and the best weights: a resumed run ends where
the uninterrupted one would.
"""
from __future__ import annotations

import json
import math
import time

import lightning as L
import torch
import torch.nn.functional as F
import torch.utils.data as tud
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ..atomic import atomic_write_bytes
from ..data.partial import check_hiding, hidden_positions
from ..devices import use_threads
from ..errors import check, check_choice, check_positive
from ..lightning import log_hp_metrics, run_output_dir, save_last_checkpoint
from ..outputs import device_record, save_history, save_torch
from .biaffine import BiaffineParser
from .ud_decode import DECODES, decode_split, sibling_scores, split_scores, tree_layer
from .dev_selection import DevSelectedRun
from .conll_chunker import peak_rss_mb
from .conll_text import word_dropout
from .epochs import EpochPermutation, LengthPooledBatches, epoch_mean, epoch_seed, manual_step
from .plateau import check_restarts, patience_spent, restart_due, restart_from, restarts_done
from .ud_network import HEADS, build_network
from .ud_tagging import TAG_LOSSES
from .ud_text import load_ud_parsing


class UDParser(DevSelectedRun, L.LightningModule):
    """See the module docstring. ``batch_sentences``: sentences per step; ``length_pool`` > 0: batches of
    similar-length sentences (:class:`~ssvm_torch.deep.epochs.LengthPooledBatches`, pools of that many batches:
    less padding, the same steps per epoch), 0: random batches (the recipes'); ``word_dropout``: the alpha of
    the UNK dropout (a word seen c times is replaced by UNK with probability alpha / (alpha + c)); ``lr_decay`` < 1:
    the learning rate times lr_decay^(step / 5000), Dozat & Manning 2017's schedule (their 0.75), 1: constant;
    ``lr_restarts`` > 0: that many restarts from the best dev weights at ``restart_factor`` x the rate when patience
    runs out (:mod:`ssvm_torch.deep.plateau`); ``decode``: how dev and test are decoded, ``"max"`` (the best tree)
    or ``"mbr"`` (the tree of highest expected LAS, :func:`~ssvm_torch.deep.ud_decode.expected_las_heads`);
    ``train_size`` / ``dev_size``: the first that many sentences of the released train / dev split (quick runs: dev is
    decoded after every epoch; None: the whole split). The test split is always whole."""

    selected_by = "the parser keeps the weights of its best dev LAS epoch"
    weights_file = "parser.pt"
    checkpoint_key, checkpoint_names = "ssvm_ud_parser", ("UDParser", "parser state")

    resume_identity = ("loss", "projective", "upos_input", "word_min_count", "train_size", "dev_size", "word_dim",
                       "char_dim", "char_filters", "upos_dim", "hidden", "layers", "arc_dim", "rel_dim", "order",
                       "sib_dim", "tags", "tag_loss", "tag_dim", "tag_feed", "hide_fraction", "hide_seed", "ema_decay",
                       "xpos", "first_child")

    def __init__(self, loss: str = "crf", projective: bool = True, upos_input: bool = True,
                 word_min_count: int = 2, word_dropout: float = 0.25, word_dim: int = 100, char_dim: int = 30,
                 char_filters: int = 50, upos_dim: int = 50, hidden: int = 200, layers: int = 2,
                 arc_dim: int = 256, rel_dim: int = 64, dropout: float = 0.33, lr: float = 2e-3,
                 grad_clip: float = 5.0, batch_sentences: int = 32, patience: int = 5,
                 train_size: int | None = None, seed: int = 0, threads: int | None = None, out: str | None = None,
                 order: int = 1, sib_dim: int = 100, tags: str = "gold", tag_loss: str = "softmax_margin",
                 tag_weight: float = 1.0, tag_dim: int = 100, tag_feed: bool = False, hide_fraction: float = 0.0,
                 hide_seed: int = 0, tag_noise: float = 0.0, ema_decay: float = 0.0, xpos: bool = False,
                 length_pool: int = 0, lr_decay: float = 1.0, lr_restarts: int = 0, restart_factor: float = 0.1,
                 decode: str = "max", first_child: bool = False, dev_size: int | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        check_choice(loss, "loss", HEADS)
        check(isinstance(projective, bool), "projective", "true or false", projective)
        check(isinstance(upos_input, bool), "upos_input", "true or false", upos_input)
        check(isinstance(batch_sentences, int) and batch_sentences >= 1, "batch_sentences", "an int >= 1",
              batch_sentences)
        check(isinstance(patience, int) and patience >= 1, "patience", "an int >= 1", patience)
        check(isinstance(length_pool, int) and not isinstance(length_pool, bool) and length_pool >= 0, "length_pool",
              "an int >= 0 (batches per pool of similar-length sentences; 0: random batches)", length_pool)
        for name in ("word_dim", "char_dim", "char_filters", "upos_dim", "hidden", "layers", "arc_dim", "rel_dim",
                     "word_min_count"):
            value = getattr(self.hparams, name)
            check(isinstance(value, int) and not isinstance(value, bool) and value >= 1, name,
                  "an int >= 1 (a layer size or count of the network)", value)
        check(order in (1, 2) and not isinstance(order, bool), "order", "1 (arc-factored) or 2 (adjacent siblings)",
              order)
        check_choice(tags, "tags", ("gold", "predicted"))
        if tags == "predicted":
            check(not upos_input, "upos_input", "false with tags predicted (nothing gold but the words reaches the "
                  "network)", upos_input)
            check_choice(tag_loss, "tag_loss", TAG_LOSSES)
            check(isinstance(tag_dim, int) and not isinstance(tag_dim, bool) and tag_dim >= 1, "tag_dim",
                  "an int >= 1", tag_dim)
            check(isinstance(tag_weight, (int, float)) and tag_weight > 0, "tag_weight", "a number > 0", tag_weight)
        check(isinstance(tag_feed, bool), "tag_feed", "true or false", tag_feed)
        check(not tag_feed or tags == "predicted", "tag_feed", "false unless tags is predicted (the scorers read the "
              "tagger's predicted tags)", tag_feed)
        check(isinstance(xpos, bool) and (tags == "predicted" or not xpos), "xpos", "true or false, and false unless "
              "tags is predicted (a second tagger beside the UPOS one)", xpos)
        check(isinstance(tag_noise, (int, float)) and (0 <= tag_noise < 1 if tag_feed else tag_noise == 0), "tag_noise",
              "a probability in [0, 1) with tag_feed, 0 without", tag_noise)
        if order == 2:
            check(loss != "local", "loss", "a tree loss (crf, hinge or softmax_margin) with order 2: the sibling scores "
                  "are trained through the tree layer", loss)
            check(projective, "projective", "true with order 2 (second-order parsing is exact over projective trees "
                  "only)", projective)
            check(isinstance(sib_dim, int) and not isinstance(sib_dim, bool) and sib_dim >= 1, "sib_dim",
                  "an int >= 1", sib_dim)
        check(isinstance(first_child, bool) and (order == 2 or not first_child), "first_child", "true or false, and "
              "false unless order is 2 (first-child parts are second order)", first_child)
        check(0.0 <= dropout < 1.0, "dropout", "a probability in [0, 1)", dropout)
        check(word_dropout >= 0, "word_dropout", "alpha >= 0", word_dropout)
        check_hiding(hide_fraction, hide_seed)
        check(isinstance(ema_decay, (int, float)) and 0 <= ema_decay < 1, "ema_decay", "a number in [0, 1) (0: the "
              "trained weights themselves; else the decay of their moving average, which dev selects)", ema_decay)
        for name in ("lr", "grad_clip"):
            check_positive(getattr(self.hparams, name), name)
        check(isinstance(lr_decay, (int, float)) and 0 < lr_decay <= 1, "lr_decay", "a number in (0, 1] (the learning "
              "rate's factor per 5000 steps; 1: constant)", lr_decay)
        check_restarts(lr_restarts, restart_factor, lr_decay)
        check_choice(decode, "decode", DECODES)
        self.corpus = self.parser = self.averaged = None
        self.tree = tree_layer(loss, projective, first_child)
        self.history: list = []
        self.best: dict = {"epoch": -1, "dev_las": -math.inf, "dev_uas": -math.inf, "state": None}
        self.gen = torch.Generator().manual_seed(seed)
        self._epoch: dict = {}

    # -- set-up (setup(): DevSelectedRun) ---------------------------------------------------------
    def build(self) -> None:
        """The corpus and the network of the hyperparameters (without a trainer: tests, notebooks)."""
        hp = self.hparams
        if hp.threads is not None:
            use_threads(hp.threads)
        self.corpus = load_ud_parsing(hp.word_min_count, hp.train_size, hp.dev_size)
        train = self.corpus.train
        hidden = hidden_positions(len(train.head), hp.hide_fraction, hp.hide_seed)
        train.head, train.rel = torch.where(hidden, -1, train.head), torch.where(hidden, -1, train.rel)
        self.hidden_heads = int(hidden.sum())
        v = self.corpus.vocab
        torch.manual_seed(hp.seed)                  # the initial weights: a function of the seed alone
        self.parser = build_network(hp, v).to(self.device)
        self.word_counts = torch.tensor(v.word_counts)
        if hp.ema_decay > 0:                        # a submodule: the checkpoint carries it (exact resume)
            self.averaged = AveragedModel(self.parser, multi_avg_fn=get_ema_multi_avg_fn(hp.ema_decay))

    def check_trainer(self, trainer) -> None:
        """DevSelectedRun's refusals, and ``length_pool`` > 0 on several devices: its batches are drawn whole by
        every process, so DDP would train each rank on the same batches."""
        super().check_trainer(trainer)
        check(not self.hparams.length_pool or trainer.world_size == 1, "length_pool", "0 when training on several "
              "devices (the pooled batches are not split between processes)", self.hparams.length_pool)

    @property
    def selected_network(self) -> BiaffineParser:
        """The weights that dev evaluates and selects and the test decodes: the moving average of the trained ones
        (``ema_decay`` > 0: Polyak averaging, an exponential window of about 1 / (1 - decay) steps), else the
        trained ones."""
        return self.averaged.module if self.averaged is not None else self.parser

    def configure_optimizers(self):
        adam = torch.optim.Adam(self.parser.parameters(), lr=self.hparams.lr, betas=(0.9, 0.9))
        if self.hparams.lr_decay == 1:
            return adam
        decay = float(self.hparams.lr_decay)
        return [adam], [torch.optim.lr_scheduler.LambdaLR(adam, lambda step: decay ** (step / 5000))]

    def train_dataloader(self):
        hp, train = self.hparams, self.corpus.train
        if hp.length_pool:
            pooled = LengthPooledBatches(train.lengths, hp.batch_sentences, hp.length_pool, hp.seed)
            return tud.DataLoader(range(train.n), batch_sampler=pooled, collate_fn=torch.tensor)
        return tud.DataLoader(range(train.n), batch_size=hp.batch_sentences, sampler=EpochPermutation(train.n, hp.seed),
                              collate_fn=torch.tensor)

    def _on_device(self, batch: dict) -> dict:
        return {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in batch.items()}

    # -- the loop -------------------------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        hp, epoch = self.hparams, self.current_epoch
        self._epoch = {"t0": time.perf_counter(), "loss": 0.0, "batches": 0, "tree_s": 0.0}
        if restart_due(epoch, self.best["epoch"], self.history, hp.patience, hp.lr_restarts):
            k, self._epoch["restart"] = len(restarts_done(self.history)) + 1, True
            rate = hp.lr * hp.restart_factor ** k
            nets = [self.parser] + ([self.averaged.module] if self.averaged is not None else [])
            restart_from(self.best["state"], nets, self.optimizers().optimizer, rate)
            print(f"epoch {epoch}: restart {k} from the best dev weights (epoch {self.best['epoch']}), rate {rate:.3g}",
                  flush=True)

    @property
    def tree_seconds(self) -> float:
        """Seconds spent in the tree layer's forward and backward since the epoch started (its share of the epoch)."""
        return self._epoch.get("tree_s", 0.0)

    def training_step(self, idx, batch_idx):
        hp = self.hparams
        s = epoch_seed(hp.seed, self.current_epoch) * 100_003 + batch_idx    # every draw from (seed, epoch, step)
        self.gen.manual_seed(s % (2 ** 63))
        torch.manual_seed((s + 1) % (2 ** 63))
        loss = self.batch_loss(idx)
        self._epoch["loss"] += manual_step(self, loss, [self.optimizers()], clip=(self.parser.parameters(),
                                                                                 hp.grad_clip))
        if self.averaged is not None:
            self.averaged.update_parameters(self.parser)
        if hp.lr_decay != 1:                        # manual optimization: the schedule steps here (checkpointed)
            self.lr_schedulers().step()
        self._epoch["batches"] += 1
        return None

    def head_loss(self, arcs: torch.Tensor, batch: dict, sibs: torch.Tensor | None = None) -> torch.Tensor:
        """(B,) per-sentence loss of the arc scores (and, second order, the sibling scores ``sibs``): the
        per-word cross-entropy summed over words (``local``) or the tree layer's loss; sentences whose gold tree
        the layer cannot produce (non-projective under ``projective``) get 0 here."""
        mask, heads = batch["mask"], batch["heads"]
        if self.hparams.loss == "local":
            # word m's distribution over heads 0..n (padding heads excluded), its gold head's log-probability
            N = arcs.shape[1]
            cand = torch.arange(N, device=arcs.device)[None, None, :] <= batch["lengths"][:, None, None]
            logp = torch.log_softmax(arcs.masked_fill(~cand, float("-inf")), dim=2)
            picked = logp.gather(2, heads.clamp(min=0)[..., None])[..., 0]
            return -(picked * (mask & (heads >= 0))).sum(1)           # a hidden head (-1): no term
        ok = batch["tree_ok"]
        per = arcs.new_zeros(arcs.shape[0])
        if bool(ok.any()):
            sub = ok.nonzero()[:, 0]
            # the layer's forward and backward on a detached copy, timed (the epoch's tree-layer share); a term
            # with the same value and the same gradient then carries it into the network's backward
            every = len(sub) == len(ok)
            mine = arcs if every else arcs[sub]
            t0 = time.perf_counter()
            leaf = mine.detach().requires_grad_(True)
            if sibs is None:
                value = self.tree(leaf, heads[sub], mask[sub], reduction="none")
                (grad,) = torch.autograd.grad(value.sum(), leaf)
            else:
                sib_mine = sibs if every else sibs[sub]
                sib_leaf = sib_mine.detach().requires_grad_(True)
                value = self.tree(leaf, heads[sub], mask[sub], reduction="none", sib_scores=sib_leaf)
                grad, sib_grad = torch.autograd.grad(value.sum(), (leaf, sib_leaf))
            self._epoch["tree_s"] = self._epoch.get("tree_s", 0.0) + time.perf_counter() - t0
            carried = value.detach() + (mine * grad).sum((1, 2)) - (mine.detach() * grad).sum((1, 2))
            if sibs is not None:
                carried = carried + (sib_mine * sib_grad).sum((1, 2, 3)) - (sib_mine.detach() * sib_grad).sum((1, 2, 3))
            per = per.index_put((sub,), carried)
        return per

    def batch_loss(self, idx: torch.Tensor) -> torch.Tensor:
        """The mean over sentences of head loss + relation cross-entropy at the gold heads (training mode)."""
        self.parser.train()
        batch = self.corpus.train.batch(idx.cpu())
        batch["tree_ok"] = (self.corpus.train.projective[idx.cpu()] if self.hparams.projective
                            else torch.ones(len(idx), dtype=torch.bool))
        word = word_dropout(batch["word"], self.word_counts, self.hparams.word_dropout, self.gen)
        word = torch.where(batch["mask"], word, batch["word"])      # never drop the root's or the padding's ids
        batch = self._on_device(batch)
        states = self.parser.encode(batch, word.to(self.device))
        scorer = self.parser.scorer_states(states, batch["mask"], tag_noise=self.hparams.tag_noise)
        arcs = self.parser.arc_scores(scorer)
        rel = self.parser.rel_scores(scorer, batch["heads"])
        unscored = ~batch["mask"] | (batch["rels"] < 0)                # padding, root, a hidden relation
        rel_ce = F.cross_entropy(rel.transpose(1, 2), batch["rels"].masked_fill(unscored, -100),
                                 ignore_index=-100, reduction="none").sum(1)
        total = self.head_loss(arcs, batch, sibling_scores(self.parser, scorer, batch["lengths"])) + rel_ce
        if self.parser.tagger is not None:                 # the joint loss of a words-only parser
            total = total + self.hparams.tag_weight * self.parser.tagger.loss(states, batch["upos"], batch["mask"])
        if self.parser.xpos_tagger is not None:
            total = total + self.hparams.tag_weight * self.parser.xpos_tagger.loss(states, batch["xpos"], batch["mask"])
        return total.mean()

    def on_train_epoch_end(self) -> None:
        hp = self.hparams
        seconds = time.perf_counter() - self._epoch["t0"]
        dev = self.evaluate(self.corpus.dev)
        rec = {"epoch": self.current_epoch, "loss": epoch_mean(self, self._epoch["loss"], self._epoch["batches"]),
               "dev_uas": dev["uas"], "dev_las": dev["las"], "seconds": seconds,
               "tree_layer_share": self.tree_seconds / max(seconds, 1e-9), "peak_rss_mb": peak_rss_mb(),
               "lr": self.optimizers().optimizer.param_groups[0]["lr"]}
        if "restart" in self._epoch:                # read back by plateau.restarts_done
            rec["restart"] = True
        if hp.loss == "local":
            rec.update(dev_uas_argmax=dev["uas_argmax"], dev_argmax_not_tree=dev["argmax_not_tree"])
        rec.update({f"dev_{k}": dev[k] for k in ("upos", "xpos") if k in dev})
        if self.averaged is not None:               # what the averaging adds, epoch by epoch (not selected on)
            raw = self.evaluate(self.corpus.dev, self.parser)
            rec.update(dev_uas_trained=raw["uas"], dev_las_trained=raw["las"])
        if dev["las"] > self.best["dev_las"]:
            state = self.selected_network.state_dict()
            self.best = {"epoch": self.current_epoch, "dev_las": dev["las"], "dev_uas": dev["uas"],
                         "state": {k: v.detach().cpu().clone() for k, v in state.items()}}
        rec["best_epoch"] = self.best["epoch"]
        self.history.append(rec)
        if (patience_spent(self.current_epoch, self.best["epoch"], self.history, hp.patience)
                and len(restarts_done(self.history)) >= hp.lr_restarts):
            self.trainer.should_stop = True
        if self.trainer.is_global_zero:
            trained = f" [trained weights: {rec['dev_las_trained']:.2f}]" if self.averaged is not None else ""
            print(f"epoch {rec['epoch']}: loss {rec['loss']:.4f}, dev UAS {dev['uas']:.2f} LAS {dev['las']:.2f}"
                  f"{trained} (best LAS {self.best['dev_las']:.2f} at epoch {self.best['epoch']}), {seconds:.1f} s "
                  f"({100 * rec['tree_layer_share']:.0f}% in the tree layer), peak RSS {rec['peak_rss_mb']:.0f} MB",
                  flush=True)
        for logger in self.loggers:
            logger.log_metrics({f"parser/{k}": float(v) for k, v in rec.items()}, step=self.current_epoch)
        save_last_checkpoint(self.trainer)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A checkpoint holds the averaged weights exactly when its run averaged (``ema_decay`` > 0): one of a run
        without them is refused by name rather than by the state dict's missing keys."""
        has = any(k.startswith("averaged.") for k in checkpoint.get("state_dict", {}))
        check(has == (self.averaged is not None), "ema_decay", "the checkpoint's: it holds "
              f"{'averaged' if has else 'no averaged'} weights; resume with ema_decay "
              f"{'> 0' if has else '0'} or start a new run", self.hparams.ema_decay)
        super().on_load_checkpoint(checkpoint)

    # -- prediction -----------------------------------------------------------------------------
    def predict(self, split, chunk: int = 128, network: BiaffineParser | None = None) -> dict:
        """:func:`decode_split` of ``split`` with ``network`` (default :attr:`selected_network`; in eval mode
        for the call)."""
        network = self.selected_network if network is None else network
        was = network.training
        network.eval()
        try:
            return decode_split(network, self.tree, split, self.corpus.vocab.rels, self.device, chunk,
                                self.corpus.vocab.upos, xpos_names=self.corpus.vocab.xpos, decode=self.hparams.decode)
        finally:
            network.train(was)

    def evaluate(self, split, network: BiaffineParser | None = None) -> dict:
        """:func:`~ssvm_torch.deep.ud_decode.split_scores` of :meth:`predict`'s decoding, with it (``"pred"``)."""
        pred = self.predict(split, network=network)
        return {**split_scores(split, pred), "pred": pred}

    # -- checkpoints ----------------------------------------------------------------------------
    # -- outputs (the checkpoint's history / best and on_fit_end: DevSelectedRun) ---------------
    def write_outputs(self, final: bool = True):
        """Restore the best dev weights, decode the test file once, write the run files (None, and nothing
        written, when no epoch has ended). ``final`` False (an interrupted fit,
        :meth:`~ssvm_torch.deep.dev_selection.DevSelectedRun.write_interrupted`): no test decoding;
        history.json, parser.pt and a results.json that says so; returns (folder, "LAS", best dev LAS, its
        epoch)."""
        if self.best["state"] is None:
            print("no epoch finished, so no model was selected on dev; nothing written", flush=True)
            return None
        out = run_output_dir(self.trainer, self.hparams.out)
        out.mkdir(parents=True, exist_ok=True)
        self.selected_network.load_state_dict(self.best["state"])
        results = {"dev_uas": self.best["dev_uas"], "dev_las": self.best["dev_las"], "best_epoch": self.best["epoch"],
                   "epochs": len(self.history),
                   "s_per_epoch": sum(r["seconds"] for r in self.history) / max(1, len(self.history)),
                   "peak_rss_mb": peak_rss_mb(), "n_parameters": sum(p.numel() for p in self.parser.parameters()),
                   "hidden_heads": self.hidden_heads, "train_words": len(self.corpus.train.head)}
        if final:
            t0 = time.perf_counter()
            test = self.evaluate(self.corpus.test)
            test_s = time.perf_counter() - t0
            pred = test.pop("pred")
            results.update(test_uas=test["uas"], test_las=test["las"], test_uas_argmax=test["uas_argmax"],
                           test_argmax_not_tree_pct=test["argmax_not_tree"],
                           test_sentences_per_s=self.corpus.test.n / max(test_s, 1e-9))
            results.update({f"test_{k}": test[k] for k in ("upos", "xpos") if k in test})
        else:
            results["interrupted"] = True
        save_history(out, self.history)
        weights = self.selected_network.state_dict()
        save_torch(out / "parser.pt", {"state_dict": {k: v.detach().cpu() for k, v in weights.items()},
                                       "vocab": self.corpus.vocab.state(), "hparams": dict(self.hparams)})
        # the trainer's epoch cap too: runs that differ only in it are different configurations (bench_ud_deep.py)
        config = {"module": "ssvm_torch.deep.UDParser", **dict(self.hparams), "device": device_record(self.device),
                  "trainer_max_epochs": self.trainer.max_epochs}
        atomic_write_bytes(out / "config.json", json.dumps(config, indent=1, default=str).encode())
        atomic_write_bytes(out / "results.json", json.dumps(results, indent=1).encode())
        if not final:
            return out, "LAS", results["dev_las"], results["best_epoch"]
        save_torch(out / "test_predictions.pt", {"heads": pred["heads"], "labels": pred["labels"],
                                                 **{k: pred[k] for k in ("upos", "xpos") if k in pred}})
        log_hp_metrics(self, {"hp_metric": results["dev_las"], "hp/test_las": results["test_las"]}, len(self.history))
        print(f"best dev LAS {results['dev_las']:.2f} (epoch {results['best_epoch']}); test UAS {results['test_uas']:.2f} "
              f"LAS {results['test_las']:.2f} on {self.corpus.test.n} sentences; {results['s_per_epoch']:.1f} s/epoch; "
              f"outputs in {out}", flush=True)
        return out
