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
. scripts/step_timing.sh
if [ ! -x "$VENV/bin/mkdocs" ]; then
  step_begin
  # JAXMPI_UV (CI's): uv makes and fills the venv, from its cache.
  if [ -n "${JAXMPI_UV:-}" ]; then "$JAXMPI_UV" venv -q --seed --python "$PY" "$VENV"; else "$PY" -m venv "$VENV"; fi
  # The docs extra of pyproject.toml, read with a TOML parser where Python
  # has one (3.11+), else with sed.
  mapfile -t reqs < <("$VENV/bin/python" - <<'PY' 2>/dev/null || sed -n 's/^docs = \[\(.*\)\]/\1/p' pyproject.toml | tr -d '"' | tr ',' '\n' | sed 's/^ *//'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["docs"]))
PY
)
  if [ -n "${JAXMPI_UV:-}" ]; then
    "$JAXMPI_UV" pip install -q --python "$VENV/bin/python" "${reqs[@]}"
  else
    "$VENV/bin/pip" install -q --disable-pip-version-check "${reqs[@]}"
  fi
  step_end "venv and installs (the docs extra)"
fi
"$VENV/bin/mkdocs" --version
step_begin
"$VENV/bin/mkdocs" build --strict
step_end "mkdocs build --strict"
echo "site built in build/site"
