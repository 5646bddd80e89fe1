#!/usr/bin/env bash
# Issue 73's neural runs from partial annotation: half of the training positions' labels hidden
# (--model.hide_fraction 0.5 --model.hide_seed 0: the same positions for every loss), seed 0, each loss
#   * the CoNLL-2000 hybrid chunker (recipes/conll_deep_hybrid_<loss>.yaml, as the archived hybrid_<loss>_s0)
#     -> benchmarks/results/conll_deep_runs/partial50_<loss>_s0/
#   * the UD English-EWT parser, gold UPOS, first order (recipes/ud_deep_<loss>.yaml, as the archived
#     <loss>_s0) -> benchmarks/results/ud_deep_runs/partial50_<loss>_s0/
# through recipes/train_runs.sh (resumable, skips finished runs, locks: start two instances with THREADS=1 on
# two cores). PARTS="conll ud" / LOSSES / SEEDS / THREADS / RUNS (a folder for both parts' run folders) override.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${RUNS:-$root/runs}"
export PREFIX=partial50_ EXTRA="--model.hide_fraction 0.5 --model.hide_seed 0" SEEDS="${SEEDS:-0}"
export HEADS="${LOSSES:-hinge softmax_margin crf}"
for part in ${PARTS:-conll ud}; do
  case "$part" in
    conll) FAMILY=conll_deep_hybrid_ ARCHIVE=conll_deep_runs RUNS="$runs/conll_deep" bash "$root/recipes/train_runs.sh" ;;
    ud) FAMILY=ud_deep_ ARCHIVE=ud_deep_runs RUNS="$runs/ud_deep" bash "$root/recipes/train_runs.sh" ;;
    *) echo "PARTS: expected conll and/or ud, got $part" >&2; exit 2 ;;
  esac
done
