#!/usr/bin/env bash
# The neural UD English-EWT parser's comparison (issue 58): every head (local, crf, hinge, softmax_margin)
# with seeds 0 1 2, the same network and budget (recipes/ud_deep_<head>.yaml), one run after another.
# Each run writes $RUNS/<head>_s<seed>/ and resumes from its last.ckpt when one is there, so this
# script can be stopped at any point and started again (it skips finished runs); a finished run's
# config.json, results.json, history.json and test_predictions.pt are copied to the archive
# benchmarks/results/ud_deep_runs/<head>_s<seed>/. HEADS / SEEDS / THREADS override the lists.
# On a 2-core machine two instances with one torch thread each finish the 12 runs sooner than one with two
# threads (152 s per epoch each beside the other against 120 s alone: 1.6x the epochs per hour). Each run holds
# a lock ($RUNS/<name>.lock, flock) while it trains, so instances never train the same run: one skips
# what the other holds and takes the next, and both stay busy to the last run:
#   THREADS=1 bash recipes/ud_deep_all.sh &  THREADS=1 bash recipes/ud_deep_all.sh &
# RUNS puts the run folders elsewhere (default runs/ud_deep; keep them outside a work tree that is laid anew);
# HEADS may name the second-order recipes too (HEADS=2o_softmax_margin: recipes/ud_deep_2o_softmax_margin.yaml).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
archive="$root/benchmarks/results/ud_deep_runs"
runs="${RUNS:-$root/runs/ud_deep}"
for seed in ${SEEDS:-0 1 2}; do
  for head in ${HEADS:-hinge crf local softmax_margin}; do
    name="${head}_s${seed}"
    dir="$runs/$name"
    if [ -f "$archive/$name/test_predictions.pt" ]; then echo "$name: done"; continue; fi
    mkdir -p "$runs"
    exec {lock}>"$runs/$name.lock"
    if ! flock -n "$lock"; then echo "$name: trained by another instance"; exec {lock}>&-; continue; fi
    # The other instance may have finished it between the check above and the lock.
    if [ -f "$archive/$name/test_predictions.pt" ]; then echo "$name: done"; exec {lock}>&-; continue; fi
    ckpt="$dir/lightning_logs/version_0/checkpoints/last.ckpt"
    resume=()
    if [ -f "$ckpt" ]; then resume=(--ckpt_path "$ckpt"); echo "$name: resuming from $ckpt"; fi
    "$venv/bin/python" -m ssvm_torch.deep fit --config "$root/recipes/ud_deep_${head}.yaml" --model.seed "$seed" \
      --seed_everything "$seed" --model.threads "${THREADS:-2}" --trainer.default_root_dir "$dir" "${resume[@]}"
    out="$dir/lightning_logs/version_0"
    mkdir -p "$archive/$name"
    cp "$out/config.json" "$out/results.json" "$out/history.json" "$out/test_predictions.pt" "$archive/$name/"
    exec {lock}>&-
  done
done
