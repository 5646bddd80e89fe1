#!/usr/bin/env bash
# Documentation: builds the guides and the API reference (mkdocs + mkdocstrings) into site/ with
# --strict, so a broken link, a missing page or a docstring warning fails. Creates or reuses .venv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$root/scripts/env.sh")"
cd "$root"
exec "$venv/bin/mkdocs" build --strict --quiet "$@"
