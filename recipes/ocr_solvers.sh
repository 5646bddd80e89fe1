#!/usr/bin/env bash
# The four solvers of the core comparison on OCR-small; histories under runs/ocr-small-<solver>.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
for spec in "fw uniform" "bcfw uniform" "bcfw perm" "bcfw gap" "ssg uniform"; do
  set -- $spec
  "$venv/bin/ssvm-train" --dataset ocr-small --lam 0.01 --solver "$1" --sampling "$2" --passes 100 \
    --gap-check 10 --quiet --overwrite --out "$root/runs/ocr-small-$1-$2"
  echo "$1/$2: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[-1]; print('passes', r['passes'], 'gap', r['gap'], 'test', r['test_error'])" "$root/runs/ocr-small-$1-$2/history.json")"
done
