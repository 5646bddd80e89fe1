#!/usr/bin/env bash
# Issue 6's structures through the CLI with every solver variant: scene (multi-label, full graph),
# ocr-letters (multiclass), segmentation-synth (graph cut, w_pairwise >= 0) and its unaries-only
# baseline. PASSES (default 50) bounds each run; outputs under runs/structures/<dataset>-<variant>.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
passes="${PASSES:-50}"
variants=("bcfw-gap:--sampling gap" "bcfw-uniform:--sampling uniform" "bcfw-perm:--sampling perm"
          "bcpfw-cache:--sampling gap --step pairwise --cache" "bcafw:--sampling gap --step away"
          "best-cache:--sampling gap --step best --cache" "fw:--solver fw" "ssg:--solver ssg --sampling uniform")
run() {  # dataset lam extra-args...
  local ds="$1" lam="$2"; shift 2
  for v in "${variants[@]}"; do
    name="${v%%:*}"; args="${v#*:}"
    # shellcheck disable=SC2086
    "$venv/bin/ssvm-train" --dataset "$ds" --lam "$lam" --passes "$passes" --gap-check 5 $args "$@" \
      --quiet --overwrite --out "$root/runs/structures/$ds${*:+-unary}-$name"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[-1]; print(f\"{sys.argv[2]:45s} test {r['test_error']:.4f} gap {r['gap'] if r['gap'] is None else format(r['gap'], '.2e')} passes {r['passes']:.0f} time {r['time_s']:.1f} s\")" \
      "$root/runs/structures/$ds${*:+-unary}-$name/history.json" "$ds${*:+ (unaries only)} $name"
  done
}
run scene 8.26e-3
run segmentation-synth 1e-3
run segmentation-synth 1e-3 --unary-only
run ocr-letters 1e-3
