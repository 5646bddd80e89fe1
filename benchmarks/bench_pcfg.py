"""PCFGs (ssvm_torch.spans.pcfg) against torch-struct 0.5's ``SentCFG`` on one CPU thread, float32 grammars in its
layout (terms (B, n, T), rules (B, NT, S, S), roots (B, NT), log-softmax normalized) over B full-length sentences:

* log Z + backward (the expected counts as the gradient w.r.t. terms and rules): ours (the torch recursion, the
  rules' step recomputing its weights in the backward) vs ``SentCFG(...).partition`` + autograd;
* the best tree: ``pcfg_decode`` (Viterbi CKY, back-pointers, a top-down read) vs ``SentCFG(...).argmax`` (the
  gradient of its max-plus pass);
* entropy + backward (w.r.t. the rules): ``pcfg_entropy`` (log Z minus <expected counts, scores>, the counts by a
  differentiable backward) vs ``SentCFG(...).entropy`` (its entropy semiring), at the shapes of n <= 30 and
  ``--entropy-repeats`` (SentCFG's takes seconds a call);
* 16 exact samples of every row: ``pcfg_sample`` (SentCFG's ``sample`` raises on its own grammars in 0.5).

Alternated in every repeat, medians of ``--repeats``; log Z and the best trees' scores compared in float64 first.
Shapes: Kim et al. 2019's compound PCFG grammar (NT 30, T 60) at B 8 of 20 words and B 4 of 40 words, and a
small grammar (NT 10, T 20) at B 16 of 30 words.

Usage: python benchmarks/bench_pcfg.py [--quick] [--out benchmarks/results/pcfg_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trees import alternated  # noqa: E402

from ssvm_torch.spans import pcfg_decode, pcfg_entropy, pcfg_log_partition, pcfg_sample  # noqa: E402

SHAPES = [(8, 20, 30, 60), (4, 40, 30, 60), (16, 30, 10, 20)]


def grammar(B: int, n: int, NT: int, T: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    S = NT + T
    terms = torch.randn(B, n, T, generator=g, dtype=dtype).log_softmax(-1)
    rules = torch.randn(B, NT, S * S, generator=g, dtype=dtype).log_softmax(-1).view(B, NT, S, S)
    roots = torch.randn(B, NT, generator=g, dtype=dtype).log_softmax(-1)
    return terms, rules, roots


def agree(ts) -> float:
    """The largest |difference| of log Z and of the best tree's score against SentCFG in float64 (B 4, n 12)."""
    terms, rules, roots = grammar(4, 12, 6, 8, torch.float64, seed=1)
    dist = ts.SentCFG((terms, rules, roots))
    _, best = pcfg_decode(terms, rules, roots)
    return max(float((pcfg_log_partition(terms, rules, roots) - dist.partition.detach()).abs().max()),
               float((best - dist.max.detach()).abs().max()))


def entropy_point(ts, B: int, n: int, NT: int, T: int, repeats: int) -> dict:
    terms, rules, roots = grammar(B, n, NT, T)

    def run(entropy):
        def call():
            r = rules.clone().requires_grad_(True)
            entropy(r).sum().backward()
        return call

    times = alternated({"ours": run(lambda r: pcfg_entropy(terms, r, roots)),
                        "torch_struct": run(lambda r: ts.SentCFG((terms, r, roots)).entropy)}, repeats)
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    return {"ours_entropy_backward_ms": round(ms["ours"], 1), "torch_struct_entropy_backward_ms":
            round(ms["torch_struct"], 1), "entropy_speedup_vs_torch_struct": ms["torch_struct"] / ms["ours"]}


def point(ts, B: int, n: int, NT: int, T: int, repeats: int) -> dict:
    terms, rules, roots = grammar(B, n, NT, T)

    def ours_logz():
        x, r = terms.clone().requires_grad_(True), rules.clone().requires_grad_(True)
        pcfg_log_partition(x, r, roots).sum().backward()

    def ts_logz():
        x, r = terms.clone().requires_grad_(True), rules.clone().requires_grad_(True)
        ts.SentCFG((x, r, roots)).partition.sum().backward()

    fns = {"ours_logz_backward": ours_logz, "torch_struct_logz_backward": ts_logz,
           "ours_decode": lambda: pcfg_decode(terms, rules, roots),
           "torch_struct_decode": lambda: ts.SentCFG((terms.clone(), rules.clone(), roots.clone())).argmax,
           "ours_sample_16": lambda: pcfg_sample(terms, rules, roots, n=16)}
    times = alternated(fns, repeats)
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    row = {"B": B, "n": n, "NT": NT, "T": T, **{f"{k}_ms": round(v, 2) for k, v in ms.items()}}
    row["logz_speedup_vs_torch_struct"] = ms["torch_struct_logz_backward"] / ms["ours_logz_backward"]
    row["decode_speedup_vs_torch_struct"] = ms["torch_struct_decode"] / ms["ours_decode"]
    return row


def device_figures(device, repeats: int, timed, shapes=((32, 20, 30, 60), (16, 40, 30, 60))) -> dict:
    """bench_gpu.py's ``pcfg`` section: log Z + backward, the best tree and entropy + backward on ``device``
    (the torch path every device runs), ours against SentCFG on the same device, float32; ``timed(fn)`` is the
    caller's median seconds (device-synchronized). log Z is compared with the CPU's float64 first."""
    import torch_struct as ts
    out = {}
    for B, n, NT, T in shapes:
        terms, rules, roots = (x.to(device) for x in grammar(B, n, NT, T))

        def logz(f):
            def run():
                x, r = terms.clone().requires_grad_(True), rules.clone().requires_grad_(True)
                f(x, r).sum().backward()
            return run

        cpu64 = pcfg_log_partition(*(x.double().cpu() for x in (terms, rules, roots)))
        ms = {"logz_backward_ours": logz(lambda x, r: pcfg_log_partition(x, r, roots)),
              "logz_backward_torch_struct": logz(lambda x, r: ts.SentCFG((x, r, roots)).partition),
              "decode_ours": lambda: pcfg_decode(terms, rules, roots),
              "decode_torch_struct": lambda: ts.SentCFG((terms.clone(), rules.clone(), roots.clone())).argmax,
              "entropy_backward_ours": logz(lambda x, r: pcfg_entropy(x, r, roots))}
        row = {k: 1e3 * timed(fn) for k, fn in ms.items()}
        row["max_logz_difference_cpu_float64"] = float((pcfg_log_partition(terms, rules, roots).double().cpu()
                                                        - cpu64).abs().max())
        out[f"{B}_{n}_{NT}_{T}"] = row
        print(f"pcfg B={B} n={n} NT={NT} T={T}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the first shape only, 3 repeats")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--entropy-repeats", type=int, default=3)
    p.add_argument("--out", default="benchmarks/results/pcfg_cpu.json")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import torch_struct as ts
    err = agree(ts)
    print(f"float64 agreement with SentCFG (log Z, best score): {err:.1e}")
    if err > 1e-9:
        raise SystemExit("the PCFG disagrees with torch-struct's SentCFG")
    rows = []
    for B, n, NT, T in SHAPES[:1] if args.quick else SHAPES:
        row = point(ts, B, n, NT, T, 3 if args.quick else args.repeats)
        if n <= 30:
            row.update(entropy_point(ts, B, n, NT, T, 1 if args.quick else args.entropy_repeats))
            print(f"B {B} n {n}: entropy + backward {row['ours_entropy_backward_ms']:.0f} ms vs torch-struct "
                  f"{row['torch_struct_entropy_backward_ms']:.0f} (x{row['entropy_speedup_vs_torch_struct']:.1f})")
        rows.append(row)
        print(f"B {B} n {n} NT {NT} T {T}: log Z + backward {row['ours_logz_backward_ms']:.1f} ms vs torch-struct "
              f"{row['torch_struct_logz_backward_ms']:.1f} (x{row['logz_speedup_vs_torch_struct']:.2f}); best tree "
              f"{row['ours_decode_ms']:.1f} vs {row['torch_struct_decode_ms']:.1f} "
              f"(x{row['decode_speedup_vs_torch_struct']:.2f}); 16 samples {row['ours_sample_16_ms']:.0f} ms",
              flush=True)
    result = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
              "torch": torch.__version__, "threads": 1, "dtype": "float32", "repeats": args.repeats,
              "entropy_repeats": args.entropy_repeats,
              "load_average_at_start": list(os.getloadavg()), "float64_agreement": err, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
