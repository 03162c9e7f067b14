#!/usr/bin/env bash
# Build the documentation site (mkdocs.yml) with warnings as errors:
#   scripts/build_docs.sh [VENV]      site in build/site
# Installs the docs extra's packages (pyproject.toml) into VENV (default
# build/docs-venv); jaxmpi itself is not installed: mkdocstrings reads the
# docstrings from src/ without importing it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-build/docs-venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/mkdocs" ]; then
  "$PY" -m venv "$VENV"
  # The docs extra of pyproject.toml, read with a TOML parser where Python
  # has one (3.11+), else with sed.
  mapfile -t reqs < <("$VENV/bin/python" - <<'PY' 2>/dev/null || sed -n 's/^docs = \[\(.*\)\]/\1/p' pyproject.toml | tr -d '"' | tr ',' '\n' | sed 's/^ *//'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["docs"]))
PY
)
  "$VENV/bin/pip" install -q --disable-pip-version-check "${reqs[@]}"
fi
"$VENV/bin/mkdocs" --version
"$VENV/bin/mkdocs" build --strict
echo "site built in build/site"
