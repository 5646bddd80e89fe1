"""The BCFW-variant study of Osokin et al. 2016 on OCR (Sections 3.2-3.3, 5.1; Figs. 1-3, 5).

Parts (select with --parts):
  methods   the 8 methods: {uniform, gap} sampling x {BCFW, BCPFW (pairwise)} x {no cache, cache}
            on OCR-small and OCR-large for lambda in {1e-1, 1e-3, 1e-4}: exact gap vs effective
            passes and vs time, median and min-max over seeds; passes and seconds to reach gap
            1e-2 / 1e-3 / 1e-4; microseconds per step; cache hit rate.
  staleness BCFW + gap sampling with the block gaps refreshed every 1, 5, 10, 100 passes or never,
            vs uniform sampling (Fig. 1a), and the ratio gap_estimate / true gap (Fig. 1b).
  cache     cache regimes over a grid of F and nu (Fig. 2): passes and time to reach a gap.

Writes benchmarks/results/variants_<part>[_<datasets>].json and .png. Budgets are per run (--passes-small,
--passes-large, --time-budget); timings on a 2-core machine are noisy: compare medians.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from ssvm_torch import ChainModel, Solver, SolverConfig, load_ocr, make_store

RESULTS = Path(__file__).parent / "results"
METHODS = {f"{s}-{'bcpfw' if st == 'pairwise' else 'bcfw'}{'-cache' if c else ''}": (s, st, c)
           for s in ("uniform", "gap") for st in ("fw", "pairwise") for c in (False, True)}
TARGETS = (1e-2, 1e-3, 1e-4)


def run(model, train, lam, seed, passes, time_budget, gap_check=5, eps=1e-5, **cfg):
    dual = make_store(model, train, lam)
    config = SolverConfig(solver="bcfw", passes=passes, gap_check=gap_check, seed=seed, time_budget=time_budget,
                          gap_threshold=eps, **cfg)
    return Solver(dual, config).run()


def first_reach(hist, target, key):
    for r in hist:
        if r["gap"] is not None and r["gap"] <= target:
            return r[key]
    return None


def curve(hists, key="passes"):
    """Median / min / max exact gap at each check index present in every run."""
    out = []
    for j in range(min(len(h) for h in hists)):
        gaps = [h[j]["gap"] for h in hists]
        out.append({"x": statistics.median(h[j][key] for h in hists), "median": statistics.median(gaps),
                    "min": min(gaps), "max": max(gaps)})
    return out


def summarize(hists):
    last = [h[-1] for h in hists]
    s = {"runs": len(hists), "final_passes": statistics.median(r["passes"] for r in last),
         "final_gap": statistics.median(r["gap"] for r in last),
         "time_s": statistics.median(r["time_s"] for r in last),
         "us_per_step": statistics.median(r["time_s"] / max(r["steps"], 1) * 1e6 for r in last),
         "curve_passes": curve(hists, "passes"), "curve_time": curve(hists, "time_s")}
    if "cache_hit_rate" in last[0]:
        s["cache_hit_rate"] = statistics.median(r["cache_hit_rate"] for r in last)
    for t in TARGETS:
        p = [first_reach(h, t, "passes") for h in hists]
        sec = [first_reach(h, t, "time_s") for h in hists]
        reached = [x for x in p if x is not None]
        s[f"passes_to_{t:g}"] = statistics.median(reached) if len(reached) == len(p) else None
        s[f"seconds_to_{t:g}"] = statistics.median([x for x in sec if x is not None]) if len(reached) == len(p) else None
    return s


def part_methods(args):
    out = {}
    for split, passes in (("small", args.passes_small), ("large", args.passes_large)):
        if split not in args.datasets:
            continue
        train, _ = load_ocr(split)
        model = ChainModel.for_data(train)
        for lam in args.lams:
            key = f"ocr-{split} lam={lam:g}"
            out[key] = {}
            for name, (sampling, step, cache) in METHODS.items():
                hists = [run(model, train, lam, seed, passes, args.time_budget, sampling=sampling, step=step,
                             cache=cache) for seed in range(args.seeds)]
                s = summarize(hists)
                out[key][name] = s
                print(f"{key:24s} {name:22s} passes {s['final_passes']:6.0f} gap {s['final_gap']:.3e} "
                      f"t {s['time_s']:6.1f}s  {s['us_per_step']:6.1f} us/step  "
                      + "  ".join(f"->{t:g}: {s[f'passes_to_{t:g}'] or '-'}p/{_f(s[f'seconds_to_{t:g}'])}s"
                                  for t in TARGETS)
                      + (f"  hit {s['cache_hit_rate']:.2f}" if "cache_hit_rate" in s else ""), flush=True)
            save("methods_" + "_".join(args.datasets), out)
    plot_methods(out, "_".join(args.datasets))


def part_staleness(args):
    split = args.datasets[-1]
    train, _ = load_ocr(split)
    model = ChainModel.for_data(train)
    lam = 1e-3
    passes = args.passes_large if split == "large" else args.passes_small
    out = {"dataset": f"ocr-{split}", "lam": lam, "runs": {}}
    variants = {"uniform": dict(sampling="uniform", gap_refresh=0)}
    for k in (1, 5, 10, 100):
        variants[f"gap-{k}"] = dict(sampling="gap", gap_refresh=k)
    variants["gap-inf"] = dict(sampling="gap", gap_refresh=0)
    for name, cfg in variants.items():
        hists = [run(model, train, lam, seed, passes, args.time_budget, gap_check=1, eps=0.0, **cfg)
                 for seed in range(args.seeds)]
        s = summarize(hists)
        ratio = [[(r["gap_estimate"] / r["gap"]) if r["gap_estimate"] is not None else None for r in h] for h in hists]
        s["estimate_over_gap"] = [statistics.median(v[j] for v in ratio) if all(v[j] is not None for v in ratio)
                                  else None for j in range(min(map(len, ratio)))]
        out["runs"][name] = s
        print(f"staleness {name:8s} final passes {s['final_passes']:.0f} gap {s['final_gap']:.3e} "
              f"t {s['time_s']:.1f}s  est/gap at end {s['estimate_over_gap'][-1]}", flush=True)
    save("staleness", out)
    plot_staleness(out)


def part_cache(args):
    split = args.datasets[0]
    train, _ = load_ocr(split)
    model = ChainModel.for_data(train)
    lam = 0.1                       # a setting where every variant reaches the target within the budget
    passes = args.passes_large if split == "large" else args.passes_small
    target = 1e-3
    out = {"dataset": f"ocr-{split}", "lam": lam, "target_gap": target, "grid": []}
    base = [run(model, train, lam, s, passes, args.time_budget, sampling="gap", eps=target) for s in range(args.seeds)]
    out["no_cache"] = {"passes": _med([first_reach(h, target, "passes") for h in base]),
                       "seconds": _med([first_reach(h, target, "time_s") for h in base])}
    print(f"cache grid ({out['dataset']}, target {target:g}): no cache -> {out['no_cache']}", flush=True)
    for F in (0.0, 0.1, 0.25, 0.5, 1.0):
        for nu in (0.0, 0.01, 0.1, 1.0):
            hists = [run(model, train, lam, s, passes, args.time_budget, sampling="gap", cache=True, cache_F=F,
                         cache_nu=nu, eps=target) for s in range(args.seeds)]
            row = {"F": F, "nu": nu, "passes": _med([first_reach(h, target, "passes") for h in hists]),
                   "seconds": _med([first_reach(h, target, "time_s") for h in hists]),
                   "hit_rate": statistics.median(h[-1]["cache_hit_rate"] for h in hists)}
            out["grid"].append(row)
            print(f"  F={F:<5g} nu={nu:<5g} passes {row['passes']} seconds {_f(row['seconds'])} "
                  f"hit {row['hit_rate']:.2f}", flush=True)
    save("cache", out)


def _med(xs):
    return statistics.median(xs) if all(x is not None for x in xs) else None


def _f(x):
    return "-" if x is None else f"{x:.1f}"


def save(part, obj):
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"variants_{part}.json").write_text(json.dumps(obj, indent=1))


def plot_methods(out, suffix):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = list(out)
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 7), squeeze=False)
    for col, key in enumerate(keys):
        for name, s in out[key].items():
            ls = "-" if name.startswith("gap") else "--"
            for row, ck in enumerate(("curve_passes", "curve_time")):
                c = s[ck]
                ax = axes[row][col]
                line, = ax.semilogy([p["x"] for p in c], [max(p["median"], 1e-8) for p in c], ls, label=name)
                ax.fill_between([p["x"] for p in c], [max(p["min"], 1e-8) for p in c],
                                [max(p["max"], 1e-8) for p in c], alpha=0.15, color=line.get_color())
        axes[0][col].set_title(key, fontsize=9)
        axes[0][col].set_xlabel("effective passes")
        axes[1][col].set_xlabel("seconds")
        for row in range(2):
            axes[row][col].grid(True, which="both", alpha=0.3)
            axes[row][col].set_ylabel("duality gap")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / f"variants_methods_{suffix}.png", dpi=90)


def plot_staleness(out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, s in out["runs"].items():
        c = s["curve_passes"]
        a.semilogy([p["x"] for p in c], [p["median"] for p in c], label=name)
        r = s["estimate_over_gap"]
        b.plot([p["x"] for p in c][:len(r)], r, label=name)
    a.set_xlabel("effective passes")
    a.set_ylabel("duality gap")
    b.set_xlabel("effective passes")
    b.set_ylabel("gap estimate / true gap")
    a.set_title(f"{out['dataset']}, lambda = {out['lam']:g}: staleness of the block gaps")
    for ax in (a, b):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "variants_staleness.png", dpi=90)


def report():
    """Markdown tables from the saved JSON files."""
    def f(x):
        return "–" if x is None else (f"{x:.0f}" if x >= 10 else f"{x:.1f}")
    for path in sorted(RESULTS.glob("variants_methods_*.json")):
        for key, ms in json.loads(path.read_text()).items():
            print(f"\n{key} (median over seeds; passes / seconds to reach the gap)\n")
            print("| method | gap 1e-2 | gap 1e-3 | gap 1e-4 | gap at end (passes) | us/step | hit rate |")
            print("| --- | --- | --- | --- | --- | --- | --- |")
            for name, s in ms.items():
                cells = [f"{f(s[f'passes_to_{t:g}'])} / {f(s[f'seconds_to_{t:g}'])} s" for t in TARGETS]
                hit = f"{s['cache_hit_rate']:.2f}" if "cache" in name else "–"
                print(f"| {name} | " + " | ".join(cells) + f" | {s['final_gap']:.2e} ({s['final_passes']:.0f}) | "
                      f"{s['us_per_step']:.0f} | {hit} |")
    for part in ("staleness", "cache"):
        path = RESULTS / f"variants_{part}.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        if part == "staleness":
            print(f"\nstaleness, {r['dataset']} lambda = {r['lam']:g}\n")
            print("| sampling | gap at end (passes) | gap estimate / gap at end |")
            print("| --- | --- | --- |")
            for name, s in r["runs"].items():
                ratio = s["estimate_over_gap"][-1]
                print(f"| {name} | {s['final_gap']:.3e} ({s['final_passes']:.0f}) | "
                      f"{'–' if ratio is None else f'{ratio:.2f}'} |")
        else:
            print(f"\ncache grid, {r['dataset']} lambda = {r['lam']:g}, passes / seconds to gap {r['target_gap']:g}; "
                  f"no cache: {f(r['no_cache']['passes'])} / {f(r['no_cache']['seconds'])} s\n")
            print("| F \\ nu | " + " | ".join(str(nu) for nu in sorted({g['nu'] for g in r['grid']})) + " |")
            print("| --- " * (1 + len({g['nu'] for g in r['grid']})) + "|")
            for F in sorted({g["F"] for g in r["grid"]}):
                row = [g for g in r["grid"] if g["F"] == F]
                print(f"| {F:g} | " + " | ".join(f"{f(g['passes'])} / {f(g['seconds'])} s ({g['hit_rate']:.2f})"
                                                  for g in sorted(row, key=lambda g: g["nu"])) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", action="store_true", help="print markdown tables from the saved results")
    ap.add_argument("--parts", nargs="+", default=["methods", "staleness", "cache"],
                    choices=["methods", "staleness", "cache"])
    ap.add_argument("--datasets", nargs="+", default=["small", "large"], choices=["small", "large"])
    ap.add_argument("--lams", nargs="+", type=float, default=[1e-1, 1e-3, 1e-4])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--passes-small", type=float, default=100)
    ap.add_argument("--passes-large", type=float, default=40)
    ap.add_argument("--time-budget", type=float, default=60.0)
    args = ap.parse_args()
    if args.report:
        report()
        return
    torch.set_num_threads(1)
    t0 = time.time()
    for part in args.parts:
        {"methods": part_methods, "staleness": part_staleness, "cache": part_cache}[part](args)
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
