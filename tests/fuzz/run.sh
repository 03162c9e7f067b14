#!/usr/bin/env bash
# Build the libFuzzer harness over the C core's XLA FFI boundary
# (tests/fuzz/fuzz_frames.c, with ASan and UBSan) and run it for a bounded
# time. Any crash, sanitizer report or leak fails the run; the input that
# caused it is left in $OUT (reproduce: $OUT/fuzz_frames $OUT/crash-...).
# First, the GPU path of the non-blocking operations (gpu_requests.c, a
# deterministic harness) under the same sanitizers.
#
#   tests/fuzz/run.sh [SECONDS]      default 60
#
# Needs clang (installed with apt-get when missing) and a Python with jax
# (for XLA's FFI header): PYTHON=.venv/bin/python by default when present.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
OUT=${JAXMPI_FUZZ_DIR:-build/fuzz}

# clang, and its fuzzer and sanitizer runtimes (libclang-rt-dev: only a
# recommendation of clang's, so an install without recommendations lacks it)
if ! command -v clang >/dev/null 2>&1 \
   || [ ! -e "$(clang -print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-x86_64.a" ]; then
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    clang libclang-rt-dev >/dev/null
fi

INC=$("$PY" -c "import jax.ffi; print(jax.ffi.include_dir())")
mkdir -p "$OUT/corpus"
clang -std=c11 -g -O1 -Wall -Wextra -Werror \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I csrc -I "$INC" tests/fuzz/fuzz_frames.c csrc/*.c -ldl -o "$OUT/fuzz_frames"
# The non-blocking operations' GPU path over a stand-in CUDA driver and MPI
# (deterministic: every scenario once), under the same sanitizers.
clang -std=c11 -g -O1 -Wall -Wextra -Werror \
  -fsanitize=address,undefined -fno-sanitize-recover=undefined \
  -I csrc -I "$INC" tests/fuzz/gpu_requests.c csrc/*.c -ldl -lpthread \
  -o "$OUT/gpu_requests"
"$OUT/gpu_requests" 2> "$OUT/gpu_requests.log" \
  || { tail -60 "$OUT/gpu_requests.log"; exit 1; }
echo "fuzzing the FFI boundary for ${SECS}s"
cd "$OUT"
./fuzz_frames -max_total_time="$SECS" -max_len=1024 -print_final_stats=1 corpus > fuzz.log 2>&1 \
  || { grep -v "^#[0-9]*[[:space:]]*\(NEW\|REDUCE\|pulse\|INITED\)" fuzz.log | tail -80; exit 1; }
tail -8 fuzz.log
