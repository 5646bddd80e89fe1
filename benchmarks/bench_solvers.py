"""Head-to-head: the FW family against the solvers it is measured against (issue 17).

Parts (select with --parts):
  oracle  the chain marginal oracle: numba forward-backward vs torch-struct (the reference), one
          sequence, a batch of 64 and a whole pass over OCR-small / OCR-large (median of repeats).
  qp      the cutting plane's working-set QP from a real run (OCR-small, lam = 0.01): DAQP, quadprog,
          Clarabel, OSQP through qpsolvers: milliseconds and dual value against the best.
  study   primal suboptimality P(w) - P* vs effective passes and vs solver seconds for batch FW,
          BCFW-uniform, BCFW-gap, BCPFW-gap-cache, SSG, DEG, EG (chains) and the 1-slack cutting plane
          (without and with its inference cache) on the cases of PROBLEMS (--problems): OCR-small (lam =
          0.01), OCR-large (lam = 1e-3, 0.01, 1/n), CoNLL-2000 (lam = 1/n; the cutting plane keeps its
          constraints as joint labelings there) and Hansards (lam = 1/n). P* is the dual value of a
          BCPFW-gap-cache run to gap <= --ref-gap (1e-6) or --ref-budget seconds (a lower bound on P*,
          within the reference's final gap, recorded in the JSON and the tables; every suboptimality
          shown is >= 0). Seeded methods run --seeds seeds where a run takes under a minute, one
          otherwise; FW, DEG and the cutting plane are deterministic (one run). One figure per dataset
          (solvers_study_<dataset>.png: a column per case of that dataset).

  reference  a longer P* reference run per case (results/solvers_reference_<case>.json); then
          --rebase PROBLEM that.json recomputes the stored runs' suboptimalities against it.

Writes benchmarks/results/solvers_<part>.json (+ solvers_study_<dataset>.png). Timings on a 2-core machine are
noisy: medians of repeats, one process at a time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from ssvm_torch import SolverConfig, load_task
from ssvm_torch.chain import chain_marginals_ragged
from ssvm_torch.solvers import make_solver
from ssvm_torch.solvers.cutting_plane import QP_SOLVERS, solve_working_set_qp

RESULTS = Path(__file__).parent / "results"
METHODS = {
    "fw": dict(solver="fw"),
    "bcfw-uniform": dict(solver="bcfw", sampling="uniform"),
    "bcfw-gap": dict(solver="bcfw", sampling="gap"),
    "bcpfw-gap-cache": dict(solver="bcfw", sampling="gap", step="pairwise", cache=True),
    "ssg": dict(solver="ssg", sampling="uniform"),
    "deg": dict(solver="deg"),
    "eg": dict(solver="eg", sampling="perm"),
    "cutting-plane": dict(solver="cutting-plane"),
    "cutting-plane-cache": dict(solver="cutting-plane", cache=True),
}
DETERMINISTIC = {"fw", "deg", "cutting-plane", "cutting-plane-cache"}
CHAINS_ONLY = {"eg"}
#: study cases: name -> (dataset, lam (None = 1/n), solver seconds per run, max passes per run)
PROBLEMS = {"ocr-small": ("ocr-small", 0.01, 20, 3000), "ocr-large": ("ocr-large", 1e-3, 45, 1000),
            "ocr-large-0.01": ("ocr-large", 0.01, 45, 1000), "ocr-large-1/n": ("ocr-large", None, 90, 1000),
            "conll2000-1/n": ("conll2000", None, 600, 300), "hansards": ("hansards", None, 12, 3000)}


def case(name):
    """(task, lam) of a study case."""
    dataset, lam = PROBLEMS[name][:2]
    task = load_task(dataset)
    return task, task.lam(lam)


def median_ms(fn, repeats=7):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def part_oracle():
    rows = []
    for name in ("ocr-small", "ocr-large"):
        d = load_task(name).store(0.01)
        rng = np.random.default_rng(0)
        U = torch.as_tensor(rng.normal(size=(int(d.lengths.sum()), d.model.K)))
        first, last, trans = (torch.as_tensor(rng.normal(size=s)) for s in ((26,), (26,), (26, 26)))
        off = d.offsets
        for label, b in (("one sequence", 1), ("batch of 64", 64), ("all", d.n)):
            rows_U = U[:int(off[b])]
            for backend in ("numba", "torch-struct"):
                if backend == "torch-struct" and b == d.n and name == "ocr-large":
                    continue              # one call over OCR-large exhausts memory; chunked below
                ms = median_ms(lambda: chain_marginals_ragged(rows_U, d.lengths[:b], first, last, trans,
                                                              backend=backend), repeats=3 if b == d.n else 7)
                rows.append({"data": name, "case": label, "sequences": b, "backend": backend, "ms": ms})
                print(f"{name:9s} {label:13s} {backend:12s} {ms:9.3f} ms", flush=True)
    return {"rows": rows, "threads": torch.get_num_threads()}


def part_qp():
    task = load_task("ocr-small")
    d = task.store(0.01)
    s = make_solver(d, SolverConfig(solver="cutting-plane", passes=400, gap_check=400))
    s.run()
    Q, b = s.Q, s.b
    out = []
    values = {}
    for solver in QP_SOLVERS:
        ms = median_ms(lambda: solve_working_set_qp(Q, b, solver))
        x = solve_working_set_qp(Q, b, solver)
        values[solver] = float(b @ x - 0.5 * x @ Q @ x)
        out.append({"solver": solver, "ms": ms})
    best = max(values.values())
    for r in out:
        r["dual_value"], r["below_best"] = values[r["solver"]], best - values[r["solver"]]
        print(f"{r['solver']:9s} {r['ms']:8.3f} ms  dual {r['dual_value']:.12f}  below best {r['below_best']:.2e}")
    return {"working_set": int(b.shape[0]), "rows": out}


def run_method(task, lam, method, seed, passes, budget, gap_check, threshold=0.0):
    cfg = SolverConfig(seed=seed, passes=passes, time_budget=budget, gap_check=gap_check, gap_threshold=threshold,
                       **METHODS[method])
    d = task.store(lam)
    hist = make_solver(d, cfg).run()
    if len(hist) > 300:                  # log-spaced records (first and last kept): the JSON stays small
        keep = np.unique(np.r_[0, np.geomspace(1, len(hist) - 1, 300).astype(int), len(hist) - 1])
        hist = [hist[i] for i in keep]
    return [{k: r.get(k) for k in ("passes", "time_s", "primal", "dual", "gap")} for r in hist]


def part_study(problems, seeds, budget, passes, ref_budget, ref_gap, methods, previous):
    out = {}
    for name in problems:
        task, lam = case(name)
        t0 = time.perf_counter()
        if name in previous and methods != list(METHODS):         # rerun some methods against the same P*
            ref_dual, ref_gap, runs = previous[name]["p_star_lower"], previous[name]["p_star_gap"], previous[name]["runs"]
        else:
            ref = run_method(task, lam, "bcpfw-gap-cache", 0, 5000, ref_budget, 5, threshold=ref_gap)
            ref_dual, ref_gap, runs = max(r["dual"] for r in ref), ref[-1]["gap"], {}
            print(f"{name}: lam {lam:g}, P* reference gap {ref_gap:.2e} after {ref[-1]['passes']:.0f} passes "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        for method in methods:
            if method in CHAINS_ONLY and PROBLEMS[name][0] == "hansards":
                continue
            gc = 1 if method.startswith(("fw", "cutting-plane")) else 2
            first = run_method(task, lam, method, 0, passes[name], budget[name], gc)
            many = method not in DETERMINISTIC and first[-1]["time_s"] < 60
            hists = [first] + ([run_method(task, lam, method, s, passes[name], budget[name], gc)
                                for s in range(1, seeds)] if many else [])
            for h in hists:
                for r in h:
                    r["subopt"] = r["primal"] - ref_dual
            runs[method] = hists
            last = [h[-1] for h in hists]
            print(f"  {method:16s} seeds {len(hists)}  subopt {statistics.median(r['subopt'] for r in last):.2e}  "
                  f"passes {last[0]['passes']:.0f}  {statistics.median(r['time_s'] for r in last):.1f} s", flush=True)
        out[name] = {"lam": lam, "p_star_lower": ref_dual, "p_star_gap": ref_gap, "runs": runs,
                     "budget_s": budget[name], "max_passes": passes[name]}
    return out


def plot_study(study, results=RESULTS):
    """One figure per dataset, solvers_study_<dataset>.png: a column per case of that dataset (its
    lam), primal suboptimality of each method's first seed vs effective passes (top) and seconds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = dict(zip(METHODS, plt.get_cmap("tab10").colors))       # one colour per method in every figure
    datasets = {}
    for name in study:
        datasets.setdefault(PROBLEMS[name][0] if name in PROBLEMS else name, []).append(name)
    for dataset, names in datasets.items():
        fig, axes = plt.subplots(2, len(names), figsize=(5 * len(names), 8), squeeze=False)
        for j, name in enumerate(names):
            for method, hists in study[name]["runs"].items():
                h = hists[0]
                for i, key in enumerate(("passes", "time_s")):
                    x = [r[key] for r in h]
                    y = [max(r["subopt"], 1e-11) for r in h]
                    axes[i, j].loglog([max(v, 1e-2) for v in x], y, label=method, color=colors[method])
            axes[0, j].set_title(f"{name}, lam = {study[name]['lam']:.3g} (P* to gap {study[name]['p_star_gap']:.0e})")
            axes[0, j].set_xlabel("effective passes")
            axes[1, j].set_xlabel("solver seconds")
            for i in range(2):
                axes[i, j].set_ylabel("primal suboptimality")
                axes[i, j].grid(True, which="both", alpha=0.3)
            axes[0, j].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(results / f"solvers_study_{dataset}.png", dpi=110)
        plt.close(fig)


def first_reach(hist, target, key):
    return next((r[key] for r in hist if r["subopt"] <= target), None)


def report():
    """The results tables (markdown) from the JSON files."""
    fmt = (lambda v, spec: "–" if v is None else format(v, spec))
    oracle = json.loads((RESULTS / "solvers_oracle.json").read_text())
    print("| data | case | numba ms | torch-struct ms | ratio |\n|---|---|---|---|---|")
    rows = {(r["data"], r["case"], r["backend"]): r["ms"] for r in oracle["rows"]}
    for (data, case, backend), ms in rows.items():
        if backend == "numba":
            ts = rows.get((data, case, "torch-struct"))
            print(f"| {data} | {case} | {ms:.3f} | {fmt(ts, '.1f')} | {fmt(ts and ts / ms, '.0f')} |")
    qp = json.loads((RESULTS / "solvers_qp.json").read_text())
    print(f"\nworking set of {qp['working_set']} constraints\n\n| QP solver | ms | below the best dual |\n|---|---|---|")
    for r in qp["rows"]:
        print(f"| {r['solver']} | {r['ms']:.3f} | {r['below_best']:.1e} |")
    study = json.loads((RESULTS / "solvers_study.json").read_text())
    for name, st in study.items():
        print(f"\n{name}, lam = {st['lam']:.4g}: P* lower bound {st['p_star_lower']:.8f} (reference gap "
              f"{st['p_star_gap']:.1e}); budget {st['budget_s']:g} s per run\n")
        print("| method | runs | passes | final P - P* (median, min-max) | to 1e-2: passes / s | to 1e-3: passes / s "
              "| to 1e-4: passes / s |\n|---|---|---|---|---|---|---|")
        for method, hists in st["runs"].items():
            fin = sorted(h[-1]["subopt"] for h in hists)
            cells = []
            for target in (1e-2, 1e-3, 1e-4):
                ps = [first_reach(h, target, "passes") for h in hists]
                ts = [first_reach(h, target, "time_s") for h in hists]
                ok = [(a, b) for a, b in zip(ps, ts) if a is not None]
                cells.append("–" if len(ok) < len(hists) else
                             f"{statistics.median(a for a, _ in ok):.0f} / {statistics.median(b for _, b in ok):.2f}")
            spread = f" ({fin[0]:.1e}–{fin[-1]:.1e})" if len(fin) > 1 else ""
            print(f"| {method} | {len(hists)} | {statistics.median(h[-1]['passes'] for h in hists):.0f} | "
                  f"{statistics.median(fin):.1e}{spread} | " + " | ".join(cells) + " |")


def part_reference(problems, ref_budget, ref_gap):
    """A longer P* reference run per problem (BCPFW-gap-cache to --ref-gap or --ref-budget seconds),
    saved as results/solvers_reference_<problem>.json for --rebase."""
    for name in problems:
        task, lam = case(name)
        hist = run_method(task, lam, "bcpfw-gap-cache", 0, 10 ** 6, ref_budget, 10, threshold=ref_gap)
        best = max(hist, key=lambda r: r["dual"])
        out = {"problem": name, "lam": lam, "dual": best["dual"], "gap": hist[-1]["gap"], "passes": hist[-1]["passes"],
               "time_s": hist[-1]["time_s"], "method": "bcpfw-gap-cache"}
        (RESULTS / f"solvers_reference_{name.replace('/', '_')}.json").write_text(json.dumps(out, indent=1))
        print(out, flush=True)


def rebase(problem: str, reference: Path) -> None:
    """Re-measure the stored runs of ``problem`` against a tighter P* lower bound: the ``dual`` (and
    ``gap``) of a longer reference run saved as JSON (every record keeps its primal, so the
    suboptimalities are recomputed, nothing is rerun)."""
    path = RESULTS / "solvers_study.json"
    study = json.loads(path.read_text())
    ref = json.loads(Path(reference).read_text())
    st = study[problem]
    if ref["dual"] <= st["p_star_lower"]:
        raise SystemExit(f"{reference}: dual {ref['dual']} is not above the stored bound {st['p_star_lower']}")
    st["p_star_lower"], st["p_star_gap"], st["p_star_source"] = ref["dual"], ref["gap"], str(reference)
    for hists in st["runs"].values():
        for h in hists:
            for r in h:
                r["subopt"] = r["primal"] - ref["dual"]
    path.write_text(json.dumps(study, separators=(",", ":")))
    plot_study(study)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", nargs="+", default=["oracle", "qp", "study"], choices=["oracle", "qp", "study", "reference"])
    p.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS),
                   help="a subset reruns these methods against the stored P* and keeps the others")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budget", type=float, default=None,
                   help="solver seconds per run for every selected case (None = each case's own, PROBLEMS)")
    p.add_argument("--ref-budget", type=float, default=3600, help="solver seconds of the P* reference run")
    p.add_argument("--ref-gap", type=float, default=1e-6, help="the P* reference run stops at this gap")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--report", action="store_true", help="print the results tables from the JSON files and exit")
    p.add_argument("--rebase", nargs=2, metavar=("PROBLEM", "REFERENCE_JSON"),
                   help="recompute PROBLEM's suboptimalities against a longer reference run's dual and exit")
    args = p.parse_args()
    if args.report:
        return report()
    if args.rebase:
        return rebase(*args.rebase)
    torch.set_num_threads(args.threads)
    RESULTS.mkdir(exist_ok=True)
    if "oracle" in args.parts:
        (RESULTS / "solvers_oracle.json").write_text(json.dumps(part_oracle(), indent=1))
    if "qp" in args.parts:
        (RESULTS / "solvers_qp.json").write_text(json.dumps(part_qp(), indent=1))
    if "reference" in args.parts:
        part_reference(args.problems, args.ref_budget, args.ref_gap)
    if "study" in args.parts:
        budget = {k: args.budget if args.budget is not None else v[2] for k, v in PROBLEMS.items()}
        passes = {k: v[3] for k, v in PROBLEMS.items()}
        path = RESULTS / "solvers_study.json"
        previous = json.loads(path.read_text()) if path.exists() else {}
        study = part_study(args.problems, args.seeds, budget, passes, args.ref_budget, args.ref_gap, args.methods,
                           previous)
        study = {**previous, **study}        # a rerun of some problems / methods keeps the others' results
        path.write_text(json.dumps(study, separators=(",", ":")))
        plot_study(study)


if __name__ == "__main__":
    main()
