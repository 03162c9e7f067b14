#!/usr/bin/env bash
# The GPU checks of the non-blocking operations, for one run on a lent GPU
# machine (one NVIDIA GPU, no network, Python with jax[cuda], pytest and
# pytest-timeout installed): installs the carried wheels, then runs
# tests/gpu at 1, 2 and 3 ranks (4 if the budget allows) and the overlap
# benchmark on the GPU, each step under its own timeout, and writes what
# they print under $OUT (three files: gpu_setup.txt, gpu_tests.txt,
# gpu_overlap.txt). Run from the repository root:
#
#   bash scripts/gpu_device_check.sh            # budget 360 s of steps
#   GPU_CHECK_BUDGET=500 bash scripts/gpu_device_check.sh
#   GPU_CHECK_OVERLAP_ARGS="--gpu --ms 40 --sizes 33554432" bash scripts/...
#
# Carried wheels, in .whl/ (git-ignored; see the report of the GPU work for
# the commands that fetch them): mpich (the MPI), mpi4py built for it, and
# jaxmpi's own wheel (scripts/build_wheel.sh). Without a jaxmpi wheel the
# checkout is built and installed instead (needs a C compiler there).
# Installs into the Python that runs `python3` (the machine is thrown away
# afterwards): the mpich wheel puts mpiexec and libmpi beside it, as in a
# virtual environment.
#
# A step that runs past its timeout is ended and the next one runs; each
# step's timeout is cut to what is left of the budget, and steps are skipped
# once less than 40 s are left (said in the output). The most important come
# first: the whole GPU suite at 2 ranks, the benchmark, then the new tests
# at 1, 3 and 4 ranks.
# Exits 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET:-360}
T0=$(date +%s)
SETUP="$OUT/gpu_setup.txt" TESTS="$OUT/gpu_tests.txt" BENCH="$OUT/gpu_overlap.txt"
: > "$SETUP"; : > "$TESTS"; : > "$BENCH"
failed=0

left() { echo $((BUDGET - ($(date +%s) - T0))); }

# step NAME TIMEOUT LOGFILE COMMAND...: run it under `timeout`, cut to what
# is left of the budget; skipped when less than 40 s are left.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local budget_left
  budget_left=$(left)
  if [ "$budget_left" -lt 40 ]; then
    echo "=== $name: skipped (${budget_left} s of the budget left)" | tee -a "$log"
    return 0
  fi
  [ "$limit" -gt "$budget_left" ] && limit=$budget_left
  echo "=== $name ($(date +%T), timeout ${limit}s): $*" | tee -a "$log"
  local t rc msg
  t=$(date +%s)
  timeout -k 10 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  msg="rc=$rc"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then msg="TIMED OUT after ${limit}s"; fi
  echo "=== $name: $msg in $(($(date +%s) - t)) s" | tee -a "$log"
  [ $rc -eq 0 ] || failed=1
  return $rc
}

export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export JAX_COMPILATION_CACHE_DIR=/tmp/jaxmpi-gpu-check-cache
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset JAX_PLATFORMS

{
  echo "# $(date -u +%FT%TZ) $(uname -srm), $(nproc) cores"
  nvidia-smi -L 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  "$PY" --version
  "$PY" -m pip list 2>/dev/null | grep -i -E '^(jax|jaxlib|jax-cuda|mpi4py|mpich|numpy|ml.dtypes|pytest)'
  ls -l .whl 2>&1
} >> "$SETUP" 2>&1

install_wheels() {
  local wheels=(.whl/*.whl)
  [ -e "${wheels[0]}" ] || { echo "no wheels in .whl/"; return 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --force-reinstall "${wheels[@]}" || return 1
  if ! ls .whl/jaxmpi-*.whl >/dev/null 2>&1; then
    echo "no jaxmpi wheel carried: building the checkout"
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation . || return 1
  fi
}
export PY
export -f install_wheels  # `timeout` runs programs, not shell functions
step "install the carried wheels" 120 "$SETUP" bash -c install_wheels || {
  echo "cannot install: nothing else runs" | tee -a "$SETUP"; exit 1; }

BIN=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")
MPIEXEC=$BIN/mpiexec
[ -x "$MPIEXEC" ] || MPIEXEC=$(command -v mpiexec)
echo "mpiexec: $MPIEXEC" >> "$SETUP"
step "python -m jaxmpi" 45 "$SETUP" "$MPIEXEC" -n 1 "$PY" -m jaxmpi

# NVIDIA MPS lets the ranks' kernels share the GPU instead of taking turns
# (earlier GPU runs used it); where it cannot start, the ranks time-slice.
MPS=0
if command -v nvidia-cuda-mps-control >/dev/null 2>&1 &&
   timeout 20 nvidia-cuda-mps-control -d >> "$SETUP" 2>&1; then
  MPS=1
  # A client must still reach the GPU through it: else MPS goes again.
  if ! timeout 60 "$PY" -c "import jax, jax.numpy as jnp
assert jax.default_backend() == 'gpu', jax.devices()
print('through MPS:', jax.devices(), float(jnp.ones(4).sum()))" >> "$SETUP" 2>&1; then
    echo quit | timeout 20 nvidia-cuda-mps-control >> "$SETUP" 2>&1
    MPS=0
  fi
fi
echo "NVIDIA MPS: $([ $MPS = 1 ] && echo started || echo 'not available: ranks time-slice the GPU')" | tee -a "$SETUP"

PYTEST=(-m pytest -q -p no:cacheprovider --timeout-method=thread --timeout=120 -rfEs --color=no)
step "tests/gpu, 2 ranks" 200 "$TESTS" \
  "$MPIEXEC" -n 2 "$PY" "${PYTEST[@]}" tests/gpu
# shellcheck disable=SC2086
step "overlap benchmark on the GPU, 2 ranks" 150 "$BENCH" \
  "$MPIEXEC" -n 2 "$PY" benchmarks/overlap.py ${GPU_CHECK_OVERLAP_ARGS:---gpu \
  --ms 20 --reps 5 --warmup 40 --sizes 64,524288,33554432}
step "tests/gpu/test_nonblocking_gpu.py, 1 rank" 120 "$TESTS" \
  "$MPIEXEC" -n 1 "$PY" "${PYTEST[@]}" tests/gpu/test_nonblocking_gpu.py
step "tests/gpu/test_nonblocking_gpu.py, 3 ranks" 150 "$TESTS" \
  "$MPIEXEC" -n 3 "$PY" "${PYTEST[@]}" tests/gpu/test_nonblocking_gpu.py
step "tests/gpu/test_nonblocking_gpu.py, 4 ranks" 150 "$TESTS" \
  "$MPIEXEC" -n 4 "$PY" "${PYTEST[@]}" tests/gpu/test_nonblocking_gpu.py

if [ $MPS = 1 ]; then echo quit | timeout 20 nvidia-cuda-mps-control >> "$SETUP" 2>&1; fi
echo "=== done in $(($(date +%s) - T0)) s, $([ $failed = 0 ] && echo 'every step passed' || echo 'SOME STEP FAILED')" \
  | tee -a "$SETUP"
grep -h -E '^=== |passed|failed|error' "$TESTS" | tail -40
cat "$BENCH" | grep -v '^$' | tail -30
exit $failed
