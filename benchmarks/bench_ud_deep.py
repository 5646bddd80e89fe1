"""Neural UD English-EWT parsers (issue 58): the table of every head and a paired bootstrap, generated from
the run archive ``benchmarks/results/ud_deep_runs/<head>_s<seed>/`` (``recipes/ud_deep_all.sh`` trains the
runs and fills it).

For every archived run: UAS and LAS (and a words-only run's UPOS accuracy) recomputed from its
``test_predictions.pt`` and the shipped test file by CoNLL 2018's definitions (every word, punctuation
included; LAS on the universal part of DEPREL) and checked against its ``results.json``; per head the mean
+- sample std over seeds of test UAS / LAS, dev UAS / LAS, epochs, s/epoch (the median of the run's epochs: an
epoch during which the run was paused, for a CI run on the same cores, would swamp a mean) and the hours of a
run at that pace (epochs x median), both as the run was trained (most runs beside another on the 2 cores with 1
torch thread, as recipes/ud_deep_all.sh runs two
instances; a run's config.json says its ``threads``, listed per head in the JSON; the wall-clock hours as run,
pauses included, are in the JSON too; the heads' speed measured alone is bench_ud_deep_speed.py's, printed
below the table when its JSON is there),
the tree layer's share of an epoch, test sentences per second, and the test UAS of the same arc
scores decoded by a per-word argmax (no tree constraint) with the share of its outputs that are not trees.
A paired bootstrap
(test sentences resampled with replacement, ``--draws`` draws, the same sentences for every system and
seed; Koehn 2004, Berg-Kirkpatrick et al. 2012) of each margin head (hinge, softmax-margin) against the CRF
head and against the local head: the difference of the UAS and LAS averaged over the seeds both heads have, its
95% interval and the one-sided p-value (the share of draws whose difference has the other sign); of each second-order head
(config.json ``"order": 2``, filed as ``2o_<loss>``) against the first-order head of the same loss, of each one with
first-child parts (``"first_child": true``, ``2o_fc_<loss>``) against the second-order head without them; and of each
run trained from partial annotation (config.json ``"hide_fraction"`` F > 0, filed as ``partial<100 F>_<head>``)
against the full-annotation run of the same head and seed, and of each margin head trained from partial
annotation against the CRF head with the same positions hidden; of each words-only head (config.json ``"tags":
"predicted"``, filed as ``words_<head>``) against the gold-UPOS head, and of the scorers reading the predicted
tags (``words_tagfeed_<head>``) against the same head without them (issue 72's choice on dev). Gold UPOS is
an input of every run whose config.json says ``"upos_input": true`` (the table says so).

Usage: python benchmarks/bench_ud_deep.py [--runs benchmarks/results/ud_deep_runs] [--draws 1000] [--markdown]
Writes benchmarks/results/ud_deep.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from ssvm_torch.data.ud import load_ud_ewt, universal
from ssvm_torch.deep.ud_tagging import tag_accuracy
from ssvm_torch.outputs import load_torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HEADS = ("local", "crf", "hinge", "softmax_margin", "2o_crf", "2o_hinge", "2o_softmax_margin", "2o_fc_softmax_margin",
         "words_softmax_margin",
         "words_tagfeed_softmax_margin", "words_2o_softmax_margin", "words_tagfeed_2o_softmax_margin")
MARGIN_HEADS = ("hinge", "softmax_margin")
#: a second-order head's runs are filed as "2o_<loss>" (config.json ``"order": 2``) and paired with the first-order
#: runs of the same loss
SECOND_ORDER = "2o_"
#: ... with McDonald & Pereira's first-child parts (config.json ``"first_child": true``) as "2o_fc_<loss>", paired
#: with the second-order runs of the same loss without them
FIRST_CHILD = "fc_"
#: a words-only parser's runs (config.json ``"tags": "predicted"``: UPOS predicted, not read) as "words_<head>"
WORDS = "words_"
#: ... whose scorers read the predicted tags too (config.json ``"tag_feed": true``) as "words_tagfeed_<head>"
TAG_FEED = "tagfeed_"
#: runs trained with a share of the training heads hidden (config.json ``"hide_fraction"`` F > 0, issue 73) as
#: "partial<100 F>_<head>", each paired with the full-annotation run of the same head and seed
PARTIAL = "partial"
#: runs trained with weight averaging (config.json ``"ema_decay"`` > 0), tag noise (``"tag_noise"`` P > 0) or an XPOS
#: head (``"xpos"``), issue 72's levers, as "ema_<head>" / "noise<100 P>_<head>" / "xpos_<head>" ("ema_noise3_<head>"
#: with the first two), each paired with <head>; likewise batches of similar length (``"length_pool"`` P > 0) as
#: "pool<P>_<head>", a decaying learning rate (``"lr_decay"`` D < 1) as "lrdecay<100 D>_<head>" and restarts at a lower
#: rate (``"lr_restarts"`` R > 0 at ``"restart_factor"`` F) as "restart<100 F>_<head>" ("restart<100 F>x<R>_" for R > 1)
EMA, NOISE, XPOS, POOL, LR_DECAY, RESTART = "ema_", "noise", "xpos_", "pool", "lrdecay", "restart"
#: a run decoded by expected LAS (config.json ``"decode": "mbr"``, benchmarks/redecode_ud_run.py) as "mbr_<head>",
#: paired with the same runs decoded as trained
MBR = "mbr_"


#: config.json keys that may differ between the seeds of one head (what a run is, not how it was run)
RUN_KEYS = ("seed", "threads", "out", "device", "module", "_class_path", "__manifest__", "decoded_from")


def configuration_clash(config: dict, other: dict) -> tuple | None:
    """The first (key, value, other's value) where two runs' configs disagree outside RUN_KEYS (keys both have:
    older archives lack later keys), or None: runs filed under one head must be seeds of one configuration."""
    for key in sorted(set(config) & set(other) - set(RUN_KEYS)):
        if config[key] != other[key]:
            return key, config[key], other[key]
    return None


def option_prefix(config: dict) -> str:
    """The prefix of a run's model options (ema_, noise<100 P>_, xpos_), in that order."""
    p = config.get("tag_noise", 0.0)
    return (EMA if config.get("ema_decay", 0.0) > 0 else "") + (f"{NOISE}{round(100 * p)}_" if p > 0 else "") + \
        (XPOS if config.get("xpos", False) else "")


def schedule_prefix(config: dict, restarts: bool = True) -> str:
    """The prefix of a run's batching and learning-rate options (pool<P>_, lrdecay<100 D>_, restart<100 F>_), in
    that order (``restarts`` False: without the last)."""
    pool, decay, restart = config.get("length_pool", 0), config.get("lr_decay", 1.0), config.get("lr_restarts", 0)
    factor = round(100 * config.get("restart_factor", 0.1))
    return (f"{POOL}{pool}_" if pool else "") + (f"{LR_DECAY}{round(100 * decay)}_" if decay != 1 else "") + \
        (f"{RESTART}{factor}" + (f"x{restart}_" if restart > 1 else "_") if restart and restarts else "")


def training_prefix(config: dict) -> str:
    """The prefix of a run's training options: its model options, then its schedule's."""
    return option_prefix(config) + schedule_prefix(config)


def partial_prefix(config: dict) -> str:
    f = config.get("hide_fraction", 0.0)
    return f"{PARTIAL}{round(100 * f)}_" if f > 0 else ""


def sentence_counts(gold_heads: list, gold_rels: list, heads: list, labels: list) -> np.ndarray:
    """(n, 3) per test sentence: words, words with the right head, words with the right head and relation."""
    out = np.zeros((len(gold_heads), 3), dtype=np.int64)
    for i, (gh, gr, ph, pl) in enumerate(zip(gold_heads, gold_rels, heads, labels)):
        if len(ph) != len(gh) or len(pl) != len(gh):
            raise SystemExit(f"test sentence {i}: {len(gh)} words, the predictions have {len(ph)} heads / "
                             f"{len(pl)} labels")
        right = [a == b for a, b in zip(gh, ph)]
        out[i] = (len(gh), sum(right), sum(r and a == b for r, a, b in zip(right, gr, pl)))
    return out


def checked_tag_accuracy(gold: list, pred: list, run: Path, kind: str = "upos") -> float:
    """The UPOS (XPOS) accuracy (:func:`ssvm_torch.deep.ud_tagging.tag_accuracy`) of a run's predicted tags ``pred``
    (one list of names per sentence) against the gold file's ``gold``, refused (naming ``kind``) unless they cover it
    word for word."""
    if len(pred) != len(gold) or any(len(p) != len(g) for p, g in zip(pred, gold)):
        raise SystemExit(f"{run}: the predicted {kind.upper()} do not cover the {len(gold)} test sentences word for "
                         "word")
    return tag_accuracy(gold, pred)


def scores(counts: np.ndarray) -> tuple[float, float]:
    """(UAS, LAS) in % of per-sentence counts summed over the sentences."""
    words, heads, labeled = counts.sum(0)
    return 100.0 * heads / max(words, 1), 100.0 * labeled / max(words, 1)


def paired_bootstrap(a: list, b: list, draws: int, seed: int = 0) -> dict:
    """Paired bootstrap of mean_seeds score(a) - mean_seeds score(b) for UAS and LAS: ``a``, ``b`` lists (one
    per seed) of (n, 3) count arrays on the same sentences; each draw resamples the n sentences."""
    rng = np.random.default_rng(seed)
    n = a[0].shape[0]

    def diff(idx):
        sa = np.mean([scores(x[idx]) for x in a], axis=0)
        sb = np.mean([scores(x[idx]) for x in b], axis=0)
        return sa - sb
    observed = diff(np.arange(n))
    draws_ = np.array([diff(rng.integers(0, n, n)) for _ in range(draws)])
    out = {"draws": draws}
    for k, name in enumerate(("uas", "las")):
        sign = 1.0 if observed[k] >= 0 else -1.0
        out[name] = {"observed_diff": float(observed[k]),
                     "ci95": [float(np.percentile(draws_[:, k], 2.5)), float(np.percentile(draws_[:, k], 97.5))],
                     "p_value": float(np.mean(sign * draws_[:, k] <= 0))}
    return out


def mean_std(xs: list) -> dict:
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else None, "values": xs}


def report(runs: Path, draws: int) -> dict:
    test = load_ud_ewt("test")
    gold_heads = [[w[4] for w in test.sentence(i)] for i in range(test.n)]
    gold_tags = {"upos": [[w[2] for w in test.sentence(i)] for i in range(test.n)],
                 "xpos": [[w[3] for w in test.sentence(i)] for i in range(test.n)]}
    gold_rels = [[universal(w[5]) for w in test.sentence(i)] for i in range(test.n)]
    by_head: dict = {}
    first_of_head: dict = {}
    plain_of: dict = {}                  # each head without its training options (training_prefix)
    unscheduled_of: dict = {}            # each head without its schedule's options (schedule_prefix)
    unrestarted_of: dict = {}            # each head without its restarts
    undecoded_of: dict = {}              # a re-decoded head: the same runs decoded as trained
    for d in sorted(runs.glob("*_s*")):
        config = json.loads((d / "config.json").read_text())
        results = json.loads((d / "results.json").read_text())
        history = json.loads((d / "history.json").read_text())
        pred = load_torch(d / "test_predictions.pt", "test_predictions", "a test predictions")
        counts = sentence_counts(gold_heads, gold_rels, pred["heads"], pred["labels"])
        uas, las = scores(counts)
        if abs(uas - results["test_uas"]) > 1e-9 or abs(las - results["test_las"]) > 1e-9:
            raise SystemExit(f"{d}: UAS / LAS recomputed {uas:.4f} / {las:.4f}, results.json says "
                             f"{results['test_uas']:.4f} / {results['test_las']:.4f}")
        tagged = {"upos": None, "xpos": None}     # a gold-UPOS run predicts no tags, a words-only run UPOS (XPOS)
        for kind in tagged:
            if kind in pred:                    # its tags, recomputed against the gold file
                tagged[kind] = checked_tag_accuracy(gold_tags[kind], pred[kind], d, kind)
                if abs(tagged[kind] - results[f"test_{kind}"]) > 1e-9:
                    raise SystemExit(f"{d}: {kind.upper()} recomputed {tagged[kind]:.4f}, results.json says "
                                     f"{results[f'test_{kind}']:.4f}")
        median_epoch = statistics.median(r["seconds"] for r in history)
        plain = partial_prefix(config) + (WORDS if config.get("tags", "gold") == "predicted" else "") + \
            (TAG_FEED if config.get("tag_feed", False) else "") + \
            (SECOND_ORDER if config.get("order", 1) == 2 else "") + \
            (FIRST_CHILD if config.get("first_child", False) else "") + config["loss"]
        head = training_prefix(config) + plain
        plain_of[head] = plain
        unscheduled_of[head] = option_prefix(config) + plain
        unrestarted_of[head] = option_prefix(config) + schedule_prefix(config, restarts=False) + plain
        if config.get("decode", "max") == "mbr":      # compared with its own runs as trained only
            undecoded_of[MBR + head] = head
            head = MBR + head
            plain_of[head] = unscheduled_of[head] = unrestarted_of[head] = head
        first, first_config = first_of_head.setdefault(head, (d, config))
        clash = configuration_clash(config, first_config)
        if clash is not None:
            raise SystemExit(f"{d}: filed under {head} beside {first.name}, but its {clash[0]} is {clash[1]!r} "
                             f"against {clash[2]!r}; a head's runs must be seeds of one configuration (archive a "
                             "variant elsewhere)")
        by_head.setdefault(head, []).append(
            {"run": d.name, "seed": config["seed"], "projective": config["projective"],
             "upos_input": config["upos_input"], "test_uas": uas, "test_las": las, "dev_uas": results["dev_uas"],
             "dev_las": results["dev_las"], "epochs": results["epochs"], "best_epoch": results["best_epoch"],
             "threads": config["threads"], "s_per_epoch": median_epoch, "hours": len(history) * median_epoch / 3600,
             "hours_as_run": sum(r["seconds"] for r in history) / 3600,
             "tree_layer_share": statistics.fmean(r["tree_layer_share"] for r in history),
             "test_sentences_per_s": results["test_sentences_per_s"], "counts": counts,
             # the same arc scores decoded by a per-word argmax over heads, no tree constraint (issue 58, Deliver 2)
             "test_uas_argmax": results["test_uas_argmax"], "argmax_not_tree_pct": results["test_argmax_not_tree_pct"],
             "test_upos": tagged["upos"], "test_xpos": tagged["xpos"]})
    out = {"test_sentences": test.n, "test_words": int(test.lengths.sum()), "heads": [], "bootstrap": []}
    for head in [*HEADS, *sorted(set(by_head) - set(HEADS))]:
        rows = by_head.get(head)
        if not rows:
            continue
        out["heads"].append({"head": head, "seeds": [r["seed"] for r in rows],
                             "upos_input": all(r["upos_input"] for r in rows),
                             "projective": all(r["projective"] for r in rows),
                             "threads": [r["threads"] for r in rows],
                             **{k: mean_std([r[k] for r in rows]) for k in
                                ("test_uas", "test_las", "dev_uas", "dev_las", "epochs", "best_epoch", "s_per_epoch",
                                 "hours", "hours_as_run", "tree_layer_share", "test_sentences_per_s", "test_uas_argmax",
                                 "argmax_not_tree_pct")},
                             **{k: (mean_std([r[k] for r in rows]) if all(r[k] is not None for r in rows) else None)
                                for k in ("test_upos", "test_xpos")}})
    pairs = [(a, b) for a in MARGIN_HEADS for b in ("crf", "local")]
    pairs += [(SECOND_ORDER + loss, loss) for loss in ("crf", "hinge", "softmax_margin")]   # second vs first order
    pairs += [(SECOND_ORDER + FIRST_CHILD + loss, SECOND_ORDER + loss) for loss in ("crf", "hinge", "softmax_margin")]
    pairs += [(WORDS + head, head) for head in ("softmax_margin", "2o_softmax_margin")]   # words only vs gold UPOS
    # scorers reading predicted tags or not
    pairs += [(WORDS + TAG_FEED + head, WORDS + head) for head in ("softmax_margin", "2o_softmax_margin")]
    # issue 72's configuration against its first order and against the same head reading gold UPOS
    pairs += [(WORDS + TAG_FEED + "2o_softmax_margin", WORDS + TAG_FEED + "softmax_margin"),
              (WORDS + TAG_FEED + "2o_softmax_margin", "2o_softmax_margin")]
    # from partial annotation too: each margin loss against the CRF with the same positions hidden (issue 73)
    for prefix in sorted({h.split("_", 1)[0] + "_" for h in by_head if h.startswith(PARTIAL)}):
        pairs += [(prefix + a, prefix + "crf") for a in MARGIN_HEADS]
    # a training option (weight averaging, tag noise, an XPOS head) against the same head trained without it
    pairs += [(h, plain_of[h]) for h in sorted(by_head) if plain_of[h] != h]
    # and a schedule (length pools, a decaying rate) against the same model options on the recipe's schedule
    pairs += [(h, unscheduled_of[h]) for h in sorted(by_head) if unscheduled_of[h] not in (h, plain_of[h])]
    # and restarts against the same options and schedule without them
    pairs += [(h, unrestarted_of[h]) for h in sorted(by_head)
              if unrestarted_of[h] not in (h, plain_of[h], unscheduled_of[h])]
    # a decode against the same weights decoded as they were trained
    pairs += [(h, undecoded_of[h]) for h in sorted(undecoded_of)]
    for a, b in pairs:
        # over the seeds both heads have, so that a head with a run still training (2 seeds of 3) is compared
        # with the same initialisations and orders, not with the other head's extra seed
        seeds = sorted({r["seed"] for r in by_head.get(a, [])} & {r["seed"] for r in by_head.get(b, [])})
        if seeds:
            out["bootstrap"].append({"a": a, "b": b, "seeds": seeds, **paired_bootstrap(
                [r["counts"] for r in by_head[a] if r["seed"] in seeds],
                [r["counts"] for r in by_head[b] if r["seed"] in seeds], draws)})
    # partial annotation against full, seed by seed (the same seed's full run: one initialisation, one order)
    for a in sorted(h for h in by_head if h.startswith(PARTIAL)):
        full = by_head.get(a.split("_", 1)[1], [])
        for r in by_head[a]:
            twin = [f for f in full if f["seed"] == r["seed"]]
            if twin:
                out["bootstrap"].append({"a": r["run"], "b": twin[0]["run"],
                                         **paired_bootstrap([r["counts"]], [twin[0]["counts"]], draws)})
    return out


def markdown(out: dict) -> str:
    def ms(x, d=2):
        return f"{x['mean']:.{d}f}" + (f" ± {x['std']:.{d}f}" if x["std"] is not None else "")
    rows = ["| head | seeds | reads | **test UAS** | **test LAS** | dev UAS | dev LAS | epochs (best) | "
            "s / epoch (median, as run) | hours per run at that pace | tree layer share | test sentences / s | "
            "test UAS, per-word argmax (% not a tree) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in out["heads"]:
        # a words-only head under a training prefix (ema_words_...) predicts tags too: told by its tags, not its name
        tags = ", ".join(f"{k.upper()} predicted: {ms(r[f'test_{k}'])}%" for k in ("upos", "xpos")
                         if r[f"test_{k}"] is not None)
        reads = "words + gold UPOS" if r["upos_input"] else f"words only ({tags})" if tags else "words only"
        rows.append(f"| {r['head']} | {len(r['seeds'])} | {reads} | "
                    f"**{ms(r['test_uas'])}** | **{ms(r['test_las'])}** | {ms(r['dev_uas'])} | {ms(r['dev_las'])} | "
                    f"{ms(r['epochs'], 1)} ({ms(r['best_epoch'], 1)}) | {ms(r['s_per_epoch'], 0)} | {ms(r['hours'], 1)} | "
                    f"{100 * r['tree_layer_share']['mean']:.1f}% | {r['test_sentences_per_s']['mean']:.0f} | "
                    f"{ms(r['test_uas_argmax'])} ({r['argmax_not_tree_pct']['mean']:.1f}%) |")
    rows.append("")
    for b in out["bootstrap"]:
        for m in ("uas", "las"):
            x = b[m]
            seeds = f"seeds {', '.join(map(str, b['seeds']))}, " if "seeds" in b else ""
            rows.append(f"* {b['a']} − {b['b']}, {m.upper()}: {x['observed_diff']:+.2f} (95% CI "
                        f"[{x['ci95'][0]:+.2f}, {x['ci95'][1]:+.2f}], one-sided p = {x['p_value']:.3f}, "
                        f"{seeds}{b['draws']} draws)")
    speed = RESULTS / "ud_deep_speed.json"
    if speed.is_file():        # the heads' speed measured alone (bench_ud_deep_speed.py), not as the runs shared the cores
        sp = json.loads(speed.read_text())
        rows += ["", f"Speed measured alone ({sp['machine']['threads']} torch threads, median of {sp['repeats']} rounds, "
                 "`python benchmarks/bench_ud_deep_speed.py`):", "",
                 "| head | trees | s / epoch (training steps) | tree layer share | dev evaluation s | test sentences / s |",
                 "| --- | --- | --- | --- | --- | --- |"]
        rows += [f"| {r['head']} | {r['trees']} | {r['s_per_epoch']:.0f} | {100 * r['tree_layer_share']:.1f}% | "
                 f"{r['dev_eval_s']:.1f} | {r['test_sentences_per_s']:.0f} |" for r in sp["rows"]]
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default=str(RESULTS / "ud_deep_runs"), help="the archive of run directories")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--markdown", action="store_true", help="also print the docs/results.md table")
    ap.add_argument("--out", default=str(RESULTS / "ud_deep.json"))
    args = ap.parse_args()
    out = report(Path(args.runs), args.draws)
    print(markdown(out))
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
