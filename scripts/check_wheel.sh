#!/usr/bin/env bash
# The release check (CI's wheel configuration): build the sdist, the wheel
# from it with the oldest setuptools pyproject.toml allows, check both, then
# install the wheel into a fresh virtual environment per Python version with
# no C compiler on PATH and run a few test files at 2 ranks.
#
#   scripts/check_wheel.sh OUTDIR [PYTHON_VERSION...]    default: 3.11 3.12
#
# OUTDIR receives the sdist and the manylinux wheel (other CI configurations
# install that wheel), and the venvs (OUTDIR/venv-<version>).
# JAXMPI_SETUPTOOLS: setuptools for the build (default 64.0.0);
# JAXMPI_REUSE_WHEEL=1: check the wheel already in OUTDIR/dist, if any;
# JAXMPI_WHEEL_TESTS=none: no test files after the import (CI: the
# configurations that install this wheel run the whole suite from it).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
shift
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(3.11 3.12)
# The highest glibc the wheel may need: JAX's (jaxlib's manylinux_2_27).
GLIBC_FLOOR=2.27
TESTS=(tests/mpi/test_p2p.py tests/mpi/test_ordering.py tests/mpi/test_in_place.py)
log() { printf '\n=== [%s] %s\n' "$(date +%T)" "$*"; }
. scripts/step_timing.sh
fail() { echo "FAILED: $*" >&2; exit 1; }

if [ "${JAXMPI_REUSE_WHEEL:-0}" = 1 ] && ls "$OUT"/dist/jaxmpi-*.whl >/dev/null 2>&1; then
  log "reusing the wheel in $OUT/dist (JAXMPI_REUSE_WHEEL=1)"
else
  log "sdist and wheel (scripts/build_wheel.sh, setuptools ${JAXMPI_SETUPTOOLS:-64.0.0})"
  step_begin
  JAXMPI_SETUPTOOLS=${JAXMPI_SETUPTOOLS:-64.0.0} JAXMPI_TOOLS_VENV="$OUT/tools-venv" \
    scripts/build_wheel.sh "$OUT/dist"
  step_end "sdist and wheel (scripts/build_wheel.sh: tools, zig cc, auditwheel)"
fi
whl=$(ls "$OUT"/dist/jaxmpi-*-py3-none-*manylinux_*.whl)
sdist=$(ls "$OUT"/dist/jaxmpi-*.tar.gz)

log "what the artifacts hold"
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' src/jaxmpi/_version.py)
case "$(basename "$whl")" in
  # auditwheel puts the legacy alias first (manylinux2014 for 2.17).
  "jaxmpi-$version-py3-none-"*manylinux_2_*_x86_64*.whl) ;;
  *) fail "wheel $(basename "$whl") is not jaxmpi-$version-py3-none-[...]manylinux_2_N_x86_64" ;;
esac
# The glibc floor: the tag's no higher than GLIBC_FLOOR (JAX's own wheels
# need 2.27), and no core library needs a GLIBC_ symbol version above the
# tag's (auditwheel's reasoning, rechecked by our own reading of the ELF
# files, which prints the highest version each library needs).
floor=$(sed -n 's/.*manylinux_\([0-9]*\)_\([0-9]*\)_x86_64.*/\1.\2/p' <<<"$(basename "$whl")")
[ -n "$floor" ] && [ "$(printf '%s\n' "$floor" "$GLIBC_FLOOR" | sort -V | tail -1)" = "$GLIBC_FLOOR" ] ||
  fail "wheel $(basename "$whl") needs glibc $floor, above $GLIBC_FLOOR"
echo "the tag's glibc: $floor (at most $GLIBC_FLOOR); the highest GLIBC_ version each library needs:"
python3 scripts/glibc_needs.py "$whl" || fail "a core library needs a newer glibc than the tag's $floor"
wheel_files=$(unzip -Z1 "$whl")
sdist_files=$(tar tzf "$sdist")
for family in mpich openmpi mpiabi; do
  grep -qx "jaxmpi/_core_$family.so" <<<"$wheel_files" || fail "no jaxmpi/_core_$family.so in the wheel"
done
# The plain-JAX route: the MPI layer jaxlib loads, the start-up hook and its
# module, at the top of site-packages (docs/native.md).
for f in jaxmpi/_xla_mpi.so jaxmpi-startup.pth _jaxmpi_startup.py; do
  grep -qx "$f" <<<"$wheel_files" || fail "no $f in the wheel"
done
grep -q "cpython\|abi3" <<<"$wheel_files" && fail "a library tied to one Python in the wheel"
grep -qE "dist-info/(licenses/)?LICENSE$" <<<"$wheel_files" || fail "no LICENSE in the wheel"
grep -qx "jaxmpi-$version/LICENSE" <<<"$sdist_files" || fail "no LICENSE in the sdist"
for h in csrc/*.h csrc/abi/*.h csrc/*.c csrc/xla/*.h csrc/xla/*.c src/jaxmpi-startup.pth; do
  grep -qx "jaxmpi-$version/$h" <<<"$sdist_files" || fail "$h not in the sdist"
done
echo "wheel $(basename "$whl"): the three cores, LICENSE; sdist: sources, headers, LICENSE"

for v in "${VERSIONS[@]}"; do
  venv="$OUT/venv-$v"
  rm -rf "$venv"
  log "Python $v: the wheel into a fresh $venv, no compiler on PATH"
  JAXMPI_PYTHON=$v JAXMPI_WHEEL=$whl JAXMPI_NO_COMPILER=1 JAXMPI_VENV=$venv ./run setup
  # The installed version is the one the sources state, and importing
  # jaxmpi raises no DeprecationWarning of the JAX it got.
  (cd / && JAX_PLATFORMS=cpu "$venv/bin/python" -W error::DeprecationWarning -c "
import jaxmpi, sys
assert jaxmpi.__version__ == '$version', jaxmpi.__version__
print('import jaxmpi', jaxmpi.__version__, 'from', jaxmpi.__file__, 'on Python', sys.version.split()[0])
") || fail "import jaxmpi on Python $v"
  if [ "${JAXMPI_WHEEL_TESTS:-}" = none ]; then
    log "Python $v: no test files (JAXMPI_WHEEL_TESTS=none)"
    continue
  fi
  log "Python $v: ${TESTS[*]} on 2 ranks"
  step_begin
  JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=1 \
    timeout --foreground -k 10 900 "$venv/bin/mpiexec" -n 2 "$venv/bin/python" \
    -m pytest -q -x "${TESTS[@]}" -p no:cacheprovider --timeout-method=thread --timeout=300 \
    || fail "tests on Python $v"
  step_end "Python $v: 3 test files at 2 ranks from the wheel"
done
log "the wheel passed on Python ${VERSIONS[*]}"
