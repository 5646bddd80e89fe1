"""LinearChain's entropy, KL divergence and exact samples (ssvm_torch/chain/information.py) against torch-struct
0.5's ``LinearChainCRF`` (``.entropy``, ``.kl``, ``.sample``: its entropy / KL semirings over a log-depth scan, and
sampling by a stochastic semiring), on the same scores (float32, full masks, one thread), and against the
layer's own log Z + backward as the yardstick of one forward-backward pass. Median seconds of repeats after a
warm-up (one call when it takes over 2 s). torch-struct's samples are edge indicators (n, B, T-1, K, K), ours
tag sequences (B, n, T): its figure does not include reading tags off its edges.

Usage: python benchmarks/bench_chain_information.py [--quick] [--out benchmarks/results/chain_information_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import warnings
from pathlib import Path

import numba
import torch

from ssvm_torch.chain import edge_potentials
from ssvm_torch.nn import LinearChain

GRID = ((64, 50, 9), (512, 20, 9), (16, 100, 9), (8, 50, 45))     # torch-struct at B 64, K 45 takes > 23 GB


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after a warm-up call (compilation happens there); when the first
    timed call takes over 2 s it is the figure."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if times[0] > 2.0:
            break
    return statistics.median(times)


def point(B: int, T: int, K: int, repeats: int, n_samples: int) -> dict:
    import torch_struct
    torch.manual_seed(0)
    p, q = LinearChain(K, batch_first=True, loss="crf"), LinearChain(K, batch_first=True, loss="crf")
    E, Q = torch.randn(B, T, K), torch.randn(B, T, K)
    lengths = torch.full((B,), T)

    def ts(layer, U):
        s, e, t = layer.start_transitions, layer.end_transitions, layer.transitions.t()
        return torch_struct.LinearChainCRF(edge_potentials(U, lengths, s, e, t), lengths=lengths)

    def grad_of(f):
        def run():
            Eg = E.detach().requires_grad_()
            f(Eg).sum().backward()
        return run

    gen = torch.Generator().manual_seed(0)
    calls = {
        "ours log Z + backward": grad_of(lambda Eg: p.log_partition(Eg)),
        "ours entropy": lambda: p.entropy(E).sum().item(),
        "ours entropy + backward": grad_of(lambda Eg: p.entropy(Eg)),
        "ours kl + backward": grad_of(lambda Eg: p.kl(Eg, Q, other=q)),
        f"ours sample n={n_samples}": lambda: p.sample(E, n=n_samples, generator=gen),
        "torch-struct entropy": lambda: ts(p, E.detach()).entropy.sum().item(),
        "torch-struct entropy + backward": grad_of(lambda Eg: ts(p, Eg).entropy),
        "torch-struct kl + backward": grad_of(lambda Eg: ts(p, Eg).kl(ts(q, Q))),
        f"torch-struct sample n={n_samples}": lambda: ts(p, E.detach()).sample((n_samples,)),
    }
    row = {"B": B, "T": T, "K": K, "seconds": {}}
    for name, fn in calls.items():
        row["seconds"][name] = timed(fn, repeats)
    sec = row["seconds"]
    row["ratios"] = {what: sec[f"torch-struct {what}"] / sec[f"ours {what}"]
                     for what in ("entropy", "entropy + backward", "kl + backward", f"sample n={n_samples}")}
    row["entropy + backward / log Z + backward"] = sec["ours entropy + backward"] / sec["ours log Z + backward"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first grid point, 3 repeats")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--out", default="benchmarks/results/chain_information_cpu.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*arg_constraints")
    grid = GRID[:1] if args.quick else GRID
    rows = []
    for B, T, K in grid:
        row = point(B, T, K, 3 if args.quick else args.repeats, args.samples)
        rows.append(row)
        sec = row["seconds"]
        print(f"B {B:4d} T {T:3d} K {K:3d} | " + "  ".join(f"{k} {v * 1e3:.2f} ms" for k, v in sec.items()))
        print("    torch-struct / ours: " + "  ".join(f"{k} {v:.1f}x" for k, v in row["ratios"].items())
              + f" | our entropy + backward / log Z + backward {row['entropy + backward / log Z + backward']:.2f}")
    write_rows(args.out, rows, args.repeats)


def write_rows(path: str, rows: list, repeats: int) -> None:
    """The JSON of an information benchmark: the machine, torch, one thread, float32, the repeats and the rows."""
    out = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
           "dtype": "float32", "repeats": repeats, "rows": rows}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
