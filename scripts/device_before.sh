#!/usr/bin/env bash
# An earlier package for scripts/device_check.sh's side-by-side stages (`matrix_tree`): the ssvm_torch of commit
# C copied to .before/ssvm_torch_before (ignored by git: `.git/info/exclude` gets /.before/), which a device call
# names in `carry` with MT_COMMIT=C. Usage: bash scripts/device_before.sh 764fe0f
set -euo pipefail
commit="${1:?usage: bash scripts/device_before.sh COMMIT}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
grep -qx "/.before/" .git/info/exclude 2>/dev/null || echo "/.before/" >> .git/info/exclude
rm -rf .before && mkdir -p .before
git archive "$commit" ssvm_torch | tar -x -C .before
mv .before/ssvm_torch .before/ssvm_torch_before
echo "$(git rev-parse --short "$commit")" > .before/COMMIT
du -sh .before
