#!/usr/bin/env bash
# Trees and matchings (issue 7): pose-synth with learned deformations vs unaries alone, Hansards
# alignment; BCFW + gap sampling. Results in runs/pose_align/*/history.json; the benchmark with the
# baselines and the tree-oracle throughput is benchmarks/bench_pose_align.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
passes="${PASSES:-50}"
for args in "pose-synth --lam 1e-2" "pose-synth --lam 1e-2 --unary-only" "hansards --lam 1e-3"; do
  name="$(echo "$args" | tr ' ' '_' | tr -d '-')"
  # shellcheck disable=SC2086
  "$venv/bin/ssvm-train" --dataset $args --passes "$passes" --gap-check 10 --quiet --overwrite --out "$root/runs/pose_align/$name" "$@"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[-1]; print(f\"{sys.argv[2]:40s} test error {r['test_error']:.4f} gap {r['gap']:.3g} passes {r['passes']:.0f}\")" \
    "$root/runs/pose_align/$name/history.json" "$args"
done
