"""The segment package of an earlier commit against this one, side by side in one process through the calls users
make: the three training losses + backward from a full and from a half-hidden annotation, the 5-best decode and
the decode of one row, at CoNLL-2000's chunk shape (B 32, T 50, L 15, K 12), one thread, float32, medians of ``--repeats`` with every
call alternated.

The earlier package is imported under another name (its imports inside the package are relative):

    git worktree add /tmp/old <commit> && mkdir -p /tmp/before
    cp -r /tmp/old/ssvm_torch /tmp/before/ssvm_torch_before
    python benchmarks/bench_segments_versions.py --before /tmp/before --commit <commit>
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numba
import torch

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--before", required=True, help="a folder holding the earlier package as ssvm_torch_before/")
p.add_argument("--commit", required=True, help="the earlier package's commit (recorded in the JSON)")
p.add_argument("--repeats", type=int, default=41)
p.add_argument("--out", default="benchmarks/results/segments_versions.json")
args = p.parse_args()
sys.path.insert(0, args.before)
import ssvm_torch_before.segments as old  # noqa: E402
import ssvm_torch.segments as new  # noqa: E402
torch.set_num_threads(1)
numba.set_num_threads(1)
g = torch.Generator().manual_seed(0)
B, T, L, K = 32, 50, 15, 12
S = torch.randn(B, T, L, K, generator=g)
f, l, t = torch.randn(K, generator=g), torch.randn(K, generator=g), torch.randn(K, K, generator=g)
lengths = torch.full((B,), T)
gold = new.segment_decode(S + 3 * torch.randn(S.shape, generator=g), f, l, t, lengths=lengths)
full = new.observed_segmentation(gold, lengths)
hide = [torch.rand(x.shape, generator=g) < 0.5 for x in full]
def half(mod):
    return mod.PartialSegmentation(*(torch.where(h, -1, x) for h, x in zip(hide, full)))
def loss(mod, name, ann):
    fn = getattr(mod, name)
    def call():
        x = S.clone().requires_grad_(True)
        fn(x, ann(mod), f, l, t, lengths=lengths).sum().backward()
    return call
cases = {}
for name in ("segment_crf_nll", "segment_hinge", "segment_softmax_margin"):
    for kind, ann in (("full", lambda m: gold), ("half", half)):
        for tag, mod in (("before", old), ("now", new)):
            cases[f"{name}_{kind}_{tag}"] = loss(mod, name, ann)
for tag, mod in (("before", old), ("now", new)):
    cases[f"nbest5_{tag}"] = (lambda mod: lambda: mod.segment_decode(S, f, l, t, lengths=lengths, nbest=5))(mod)
# one row: a BCFW block step's decode, per-sentence inference
for tag, mod in (("before", old), ("now", new)):
    cases[f"decode_one_row_{tag}"] = (lambda mod: lambda: mod.segment_decode(S[:1], f, l, t, lengths=lengths[:1]))(mod)
for fn in cases.values():
    fn()
times = {k: [] for k in cases}
for _ in range(args.repeats):
    for k, fn in cases.items():
        t0 = time.perf_counter(); fn(); times[k].append(time.perf_counter() - t0)
med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
for k in cases:
    if k.endswith("_now"):
        b = k[:-4] + "_before"
        print(f"{k[:-4]:36s} before {med[b]:8.2f} ms  now {med[k]:8.2f} ms  ({med[b] / med[k]:.2f}x)")
head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
Path(args.out).write_text(json.dumps({"before": args.commit, "now": head, "repeats": args.repeats, "threads": 1,
                                      "machine": platform.processor() or platform.machine(),
                                      "load_average_at_end": list(os.getloadavg()), "ms": med}, indent=1))
print(f"wrote {args.out}")
