#!/usr/bin/env bash
# A set of neural runs, one after another, each resumable and archived when it ends:
#   FAMILY=ud_deep_ HEADS="hinge crf" SEEDS="0 1 2" bash recipes/train_runs.sh
# trains recipes/${FAMILY}<head>.yaml with --model.seed / --seed_everything <seed> (and the extra arguments in
# EXTRA, e.g. EXTRA="--model.hide_fraction 0.5") into $RUNS/${PREFIX}<head>_s<seed>/, then copies its
# config.json, results.json, history.json and test_predictions.pt to benchmarks/results/$ARCHIVE/<name>/.
# A run whose archive holds test_predictions.pt is done and skipped; a run with a last.ckpt resumes from it,
# so the script can be stopped at any point and started again. Each run holds a lock ($RUNS/<name>.lock,
# flock) while it trains, so several instances never train the same run: one skips what another holds and
# takes the next. On a 2-core machine two instances with THREADS=1 each finish a set sooner than one with
# two threads (about 1.6x the epochs per hour for the parser):
#   THREADS=1 bash recipes/train_runs.sh &  THREADS=1 bash recipes/train_runs.sh &
# RUNS (default runs/$ARCHIVE) puts the run folders elsewhere: keep them outside a work tree that is laid anew;
# ARCHIVE_DIR (default benchmarks/results/$ARCHIVE) the archive; a variant of a recipe (EXTRA="--model.rel_dim
# 100", PREFIX=rel100_) goes to an archive of its own, since benchmarks/bench_ud_deep.py files runs by head and
# refuses a head whose runs differ in configuration. TRAINER_ARGS adds trainer arguments that
# ud_deep_all.sh and partial50_all.sh pass through (they set EXTRA themselves), e.g. on a GPU machine
# TRAINER_ARGS="--trainer.accelerator gpu --trainer.devices 1" (scripts/device_check.sh's parser stage).
# recipes/ud_deep_all.sh and recipes/partial50_all.sh are this script with their settings.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${FAMILY:?FAMILY: expected a recipe prefix, e.g. ud_deep_ or conll_deep_hybrid_}"
: "${HEADS:?HEADS: expected the heads of the recipes after FAMILY, e.g. hinge crf}"
: "${ARCHIVE:?ARCHIVE: expected the archive folder under benchmarks/results, e.g. ud_deep_runs}"
# PY: a Python that has the package already (the device machine's, which has no network for scripts/env.sh)
py="${PY:-}"
[ -n "$py" ] || py="$(bash "$root/scripts/env.sh")/bin/python"
archive="${ARCHIVE_DIR:-$root/benchmarks/results/$ARCHIVE}"
runs="${RUNS:-$root/runs/$ARCHIVE}"
read -r -a extra <<< "${EXTRA:-} ${TRAINER_ARGS:-}"
for seed in ${SEEDS:-0 1 2}; do
  for head in $HEADS; do
    recipe="$root/recipes/${FAMILY}${head}.yaml"
    [ -f "$recipe" ] || { echo "$recipe: no such recipe" >&2; exit 2; }
    name="${PREFIX:-}${head}_s${seed}"
    dir="$runs/$name"
    if [ -f "$archive/$name/test_predictions.pt" ]; then echo "$name: done"; continue; fi
    mkdir -p "$runs"
    exec {lock}>"$runs/$name.lock"
    if ! flock -n "$lock"; then echo "$name: trained by another instance"; exec {lock}>&-; continue; fi
    # Another instance may have finished it between the check above and the lock.
    if [ -f "$archive/$name/test_predictions.pt" ]; then echo "$name: done"; exec {lock}>&-; continue; fi
    ckpt="$dir/lightning_logs/version_0/checkpoints/last.ckpt"
    resume=()
    if [ -f "$ckpt" ]; then resume=(--ckpt_path "$ckpt"); echo "$name: resuming from $ckpt"; fi
    "$py" -m ssvm_torch.deep fit --config "$recipe" --model.seed "$seed" --seed_everything "$seed" \
      --model.threads "${THREADS:-2}" --trainer.default_root_dir "$dir" "${extra[@]}" "${resume[@]}"
    out="$dir/lightning_logs/version_0"
    mkdir -p "$archive/$name"
    cp "$out/config.json" "$out/results.json" "$out/history.json" "$out/test_predictions.pt" "$archive/$name/"
    exec {lock}>&-
  done
done
