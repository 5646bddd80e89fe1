"""Speed of the neural UD English-EWT parser's heads (issue 58, "Speed"), measured alone on this machine's CPU
rather than read from the training logs (whose epochs share the cores with other work and other runs).

For every head (local, crf, hinge, softmax_margin) and tree kind (projective: Eisner; non-projective: the
matrix-tree theorem and Chu-Liu-Edmonds), the recipe's network (``recipes/ud_deep_<head>.yaml``, seed 0,
untrained weights: the work per step does not depend on them):

* **training**: ``--batches`` consecutive training steps (0: all of epoch 0's after the warm-up) of the
  recipe's batch size (forward, the head's loss, backward, gradient clipping, Adam), the first batches of
  epoch 0's permutation, after
  ``--warmup`` untimed steps; the mean step time times the steps of one epoch is ``s_per_epoch``, and the
  share of those seconds inside the tree layer's forward and backward (the module's own clock) is
  ``tree_layer_share``;
* **decoding**: the whole test file (2,077 sentences) through :meth:`UDParser.predict` (trees decoded by
  the tree layer, relations by the labeler), ``test_sentences_per_s``; and the dev file's evaluation
  after every epoch, ``dev_eval_s``.

A head is a recipe's name after ``ud_deep_``: the first-order heads, the second-order ones (``2o_crf``,
``2o_hinge``, ``2o_softmax_margin``: projective only) and the words-only parser (``words_softmax_margin``).

``--length-pools 0 20`` measures every setting with random batches (0, the recipes') and with batches of
similar-length sentences (``UDParser(length_pool=20)``, :class:`ssvm_torch.deep.epochs.LengthPooledBatches`) side
by side: the training batches are then the first ones the module's own data loader gives in epoch 0, and the
rows record the batches' padding (``padded_tokens``, ``padded_n2``: padded over real tokens and over the real sum
of (n + 1)^2).

``--weights RUN/parser.pt`` starts every setting from a trained parser's weights (a ``parser.pt`` of the same
network, written by a run of that recipe) instead of the untrained ones: the tree layer's work then depends on
them, since a trained parser's scores (a few hundred nats) make the second-order real-space pass underflow on
long sentences, where untrained scores never do.

Each figure is the median of ``--repeats`` rounds; the rounds alternate the configurations so that the
machine's drift spreads over all of them. ``--threads`` torch threads (the recipes' 2).

``--baseline REV`` (one ``--length-pools`` value) measures this checkout against the commit REV side by side
(``benchmarks/commits.py``): every round runs one worker process per side, the sides alternating, each building its
settings afresh (one untimed warm-up round per side first); the JSON then has both sides' rows and the ratios.

Usage: python benchmarks/bench_ud_deep_speed.py [--heads local crf hinge softmax_margin 2o_softmax_margin]
       [--batches 40] [--repeats 3] [--threads 2] [--kinds projective non-projective] [--length-pools 0 20]
       [--baseline REV] [--weights RUN/parser.pt]
Writes benchmarks/results/ud_deep_speed.json (with --baseline: ud_deep_speed_commits.json).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import yaml

import ssvm_torch
from ssvm_torch.deep import UDParser
from ssvm_torch.deep.epochs import batch_padding
from ssvm_torch.deep.ud_parse import load_parser

sys.path.insert(0, str(Path(__file__).parent))
from commits import ROOT, baseline_worktree, revisions, run_worker  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "ud_deep_speed.json"
KINDS = ("projective", "non-projective")
HEADS = tuple(sorted(p.stem[len("ud_deep_"):] for p in (ROOT / "recipes").glob("ud_deep_*.yaml")))


def recipe_args(head: str, projective: bool, threads: int, pool: int = 0) -> dict:
    """The recipe's model arguments with the tree kind, thread count and batching of this measurement (a pool of 0
    leaves the argument out: a baseline checkout without ``length_pool`` builds the same module)."""
    args = yaml.safe_load((ROOT / "recipes" / f"ud_deep_{head}.yaml").read_text())["model"]["init_args"]
    return {**args, "projective": projective, "threads": threads, "seed": 0, **({"length_pool": pool} if pool else {})}


class Setting:
    """One head and tree kind: the module built once, its optimizer, and the training batches it times."""

    def __init__(self, head: str, kind: str, threads: int, batches: int, warmup: int, pool: int = 0,
                 weights: str | None = None):
        self.head, self.kind, self.pool = head, kind, pool
        self.module = UDParser(**recipe_args(head, kind == "projective", threads, pool))
        self.module.build()
        if weights:
            load_trained(self.module, weights)
        self.optimizer = self.module.configure_optimizers()
        loader = self.module.train_dataloader()         # epoch 0's batches, as training draws them
        epoch = list(loader)
        self.steps_per_epoch = len(epoch)
        self.padding = batch_padding([b.tolist() for b in epoch], self.module.corpus.train.lengths)
        take = warmup + batches if batches else self.steps_per_epoch      # 0: the rest of the epoch
        if take > self.steps_per_epoch or take <= warmup:
            raise SystemExit(f"--warmup + --batches: at most {self.steps_per_epoch} steps (one epoch), got {take}")
        self.batches = epoch[:take]
        self.warmup = warmup

    def step(self, idx: torch.Tensor) -> None:
        m, hp = self.module, self.module.hparams
        loss = m.batch_loss(idx)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parser.parameters(), hp.grad_clip)
        self.optimizer.step()

    def train_round(self) -> dict:
        """Mean seconds per step and the tree layer's share over the timed steps."""
        for idx in self.batches[:self.warmup]:
            self.step(idx)
        self.module.on_train_epoch_start()          # zeroes the module's tree-layer clock (tree_seconds)
        t0 = time.perf_counter()
        for idx in self.batches[self.warmup:]:
            self.step(idx)
        seconds = time.perf_counter() - t0
        timed = len(self.batches) - self.warmup
        return {"s_per_step": seconds / timed, "tree_layer_share": self.module.tree_seconds / seconds}

    def decode_round(self) -> dict:
        m = self.module
        t0 = time.perf_counter()
        m.predict(m.corpus.test)
        test_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        m.evaluate(m.corpus.dev)
        return {"test_sentences_per_s": m.corpus.test.n / test_s, "dev_eval_s": time.perf_counter() - t0}


def load_trained(module: UDParser, path: str) -> None:
    """The weights of the parser.pt at ``path`` (integrity-checked, no pickle: :func:`load_parser`) in the
    module's network; refused when its vocabularies or its network's shape differ from the module's."""
    trained = load_parser(path)
    if trained.vocab != module.corpus.vocab:
        raise SystemExit(f"--weights: {path} was trained with other vocabularies than this recipe's corpus")
    try:
        module.parser.load_state_dict(trained.network.state_dict())
    except RuntimeError as e:
        raise SystemExit(f"--weights: {path} is not a network of this recipe's shape ({str(e).splitlines()[0]})")


def measure(heads, kinds, threads: int, batches: int, warmup: int, repeats: int, pools=(0,),
            weights: str | None = None) -> list:
    """Every (head, kind, length pool) setting's rounds (``repeats`` of training + decoding, the order
    alternating), from the weights of ``weights`` (a parser.pt) when given."""
    torch.set_num_threads(threads)
    # a second-order head parses projective trees only (UDParser refuses projective false with order 2)
    settings = [Setting(h, k, threads, batches, warmup, p, weights) for k in kinds for h in heads for p in pools
                if k == "projective" or "2o_" not in h]
    rounds = {(s.head, s.kind, s.pool): [] for s in settings}
    for r in range(repeats):
        for s in (settings if r % 2 == 0 else settings[::-1]):       # alternate the order between rounds
            rounds[(s.head, s.kind, s.pool)].append({**s.train_round(), **s.decode_round()})
            last = rounds[(s.head, s.kind, s.pool)][-1]
            print(f"round {r}: {s.head:>14} {s.kind:>14} pool {s.pool:>2}: {last['s_per_step'] * 1e3:7.1f} ms/step "
                  f"({100 * last['tree_layer_share']:.1f}% tree layer), test {last['test_sentences_per_s']:6.0f} "
                  f"sentences/s, dev evaluation {last['dev_eval_s']:.1f} s", file=sys.stderr, flush=True)
    return [{"head": s.head, "trees": s.kind, "length_pool": s.pool, "steps_per_epoch": s.steps_per_epoch,
             **s.padding, "rounds": rounds[(s.head, s.kind, s.pool)]} for s in settings]


def summarise(settings: list) -> list:
    """Medians over each setting's rounds: s per epoch (mean step x steps per epoch), tree share, decoding."""
    rows = []
    for s in settings:
        runs = s["rounds"]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        extra = {k: s[k] for k in ("length_pool", "padded_tokens", "padded_n2") if k in s}
        rows.append({"head": s["head"], "trees": s["trees"], **extra, "steps_per_epoch": s["steps_per_epoch"],
                     "s_per_epoch": med["s_per_step"] * s["steps_per_epoch"], "ms_per_step": med["s_per_step"] * 1e3,
                     "tree_layer_share": med["tree_layer_share"], "test_sentences_per_s": med["test_sentences_per_s"],
                     "dev_eval_s": med["dev_eval_s"], "rounds": runs})
    return rows


def print_table(rows: list, side: str = "") -> None:
    print(f"\n{side}| head | trees | length pool | padded tokens / N^2 | s / epoch (training steps) | tree layer share "
          "| dev evaluation s | test sentences / s |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        pad = f"{row['padded_tokens']:.2f} / {row['padded_n2']:.2f}" if "padded_tokens" in row else "-"
        print(f"| {row['head']} | {row['trees']} | {row.get('length_pool', 0)} | {pad} | {row['s_per_epoch']:.0f} "
              f"| {100 * row['tree_layer_share']:.1f}% "
              f"| {row['dev_eval_s']:.1f} | {row['test_sentences_per_s']:.0f} |")


def against_baseline(args) -> dict:
    """Both sides' rows (each round one worker per side, alternating) and current / baseline ratios."""
    revs = revisions(args.baseline)
    work = ["--heads", *args.heads, "--kinds", *args.kinds, "--batches", args.batches, "--warmup", args.warmup,
            "--threads", args.threads, "--length-pools", *args.length_pools,
            *(["--weights", Path(args.weights).resolve()] if args.weights else [])]
    with baseline_worktree(revs["baseline"]) as wt:
        sides = {"current": ROOT, "baseline": wt}
        script = Path(__file__).resolve()
        for path in sides.values():                    # warm-up round: numba's caches, the corpus files
            run_worker(path, script, [*work, "--batches", 1, "--warmup", 0], args.threads)
        got = {name: [] for name in sides}
        for r in range(args.repeats):
            for name in (("current", "baseline") if r % 2 == 0 else ("baseline", "current")):
                got[name].append(run_worker(sides[name], script, work, args.threads)["settings"])
                print(f"round {r} {name}: " + ", ".join(f"{s['head']} {s['trees']} "
                                                       f"{s['rounds'][0]['s_per_step'] * 1e3:.0f} ms/step"
                                                       for s in got[name][-1]), flush=True)
    sides_rows = {}
    for name, per_round in got.items():
        merged = [{**s, "rounds": [rd[i]["rounds"][0] for rd in per_round]} for i, s in enumerate(per_round[0])]
        sides_rows[name] = summarise(merged)
        print_table(sides_rows[name], f"{name} ({revs[name]}):\n")
    ratios = [{"head": c["head"], "trees": c["trees"],
               "training_speedup": b["s_per_epoch"] / c["s_per_epoch"],
               "test_decode_speedup": c["test_sentences_per_s"] / b["test_sentences_per_s"],
               "dev_eval_speedup": b["dev_eval_s"] / c["dev_eval_s"]}
              for c, b in zip(sides_rows["current"], sides_rows["baseline"])]
    for q in ratios:
        print(f"{q['head']} {q['trees']}: training x{q['training_speedup']:.2f}, test decoding "
              f"x{q['test_decode_speedup']:.2f}, dev evaluation x{q['dev_eval_speedup']:.2f} the baseline")
    return {**revs, "sides": sides_rows, "ratios": ratios}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", nargs="+", default=["local", "crf", "hinge", "softmax_margin"], choices=HEADS)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--batches", type=int, default=40, help="timed training steps per round (0: every step of "
                    "epoch 0 after the warm-up ones: the long sentences' batches included)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed training steps before each round's timed ones")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--length-pools", nargs="+", type=int, default=[0],
                    help="UDParser length_pool values measured side by side (0: random batches)")
    ap.add_argument("--baseline", help="an earlier commit (any git revision) measured side by side")
    ap.add_argument("--weights", help="a trained parser.pt of the heads' network to start from (default: untrained)")
    ap.add_argument("--out")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for name in ("repeats", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name}: expected an int >= 1, got {getattr(args, name)}")
    if args.batches < 0:
        raise SystemExit(f"--batches: expected an int >= 0 (0: the whole epoch after the warm-up steps), "
                         f"got {args.batches}")
    if args.warmup < 0:
        raise SystemExit(f"--warmup: expected an int >= 0, got {args.warmup}")
    if any(p < 0 for p in args.length_pools):
        raise SystemExit(f"--length-pools: expected ints >= 0, got {args.length_pools}")
    if args.baseline and len(args.length_pools) != 1:
        raise SystemExit("--length-pools: one value with --baseline (several are compared in one checkout, side by "
                         "side)")
    if args.worker:                    # one round of every setting, for against_baseline
        print(json.dumps({"module": ssvm_torch.__file__,
                          "settings": measure(args.heads, args.kinds, args.threads, args.batches, args.warmup, 1,
                                              args.length_pools, args.weights)}))
        return
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
               "torch": torch.__version__, "threads": args.threads, "load_average_at_start": list(os.getloadavg())}
    common = {"machine": machine, "batches": args.batches, "warmup": args.warmup, "repeats": args.repeats,
              "length_pools": args.length_pools, "weights": args.weights}
    if args.baseline:
        out, path = {**common, **against_baseline(args)}, args.out or str(OUT.with_name("ud_deep_speed_commits.json"))
    else:
        rows = summarise(measure(args.heads, args.kinds, args.threads, args.batches, args.warmup, args.repeats,
                                 args.length_pools, args.weights))
        print_table(rows)
        out, path = {**common, "rows": rows}, args.out or str(OUT)
    Path(path).write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
