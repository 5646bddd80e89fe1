#!/usr/bin/env bash
# The neural UD English-EWT parser's comparison (issue 58): every head (local, crf, hinge, softmax_margin)
# with seeds 0 1 2, the same network and budget (recipes/ud_deep_<head>.yaml), one run after another, archived
# in benchmarks/results/ud_deep_runs/<head>_s<seed>/ (recipes/train_runs.sh: resumable, skips finished runs,
# locks so that two instances share the list). HEADS / SEEDS / THREADS / RUNS override; HEADS may name the
# second-order and words-only recipes too (HEADS=2o_softmax_margin: recipes/ud_deep_2o_softmax_margin.yaml):
#   THREADS=1 bash recipes/ud_deep_all.sh &  THREADS=1 bash recipes/ud_deep_all.sh &
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FAMILY=ud_deep_ ARCHIVE=ud_deep_runs PREFIX= EXTRA= HEADS="${HEADS:-hinge crf local softmax_margin}" RUNS="${RUNS:-$root/runs/ud_deep}" \
  exec bash "$root/recipes/train_runs.sh"
