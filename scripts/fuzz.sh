#!/usr/bin/env bash
# Build the libFuzzer harness over the FFI frame and attribute decoding
# (tests/fuzz/fuzz_decode.c) with clang, ASan and UBSan, and run it for a
# bounded time. Needs clang (Debian: apt-get install clang) and jaxlib's FFI
# header (from the venv's jaxlib, or JAXMPI_FFI_INCLUDE).
#   scripts/fuzz.sh                 30 s (JAXMPI_FUZZ_SECONDS), MPICH ABI
#   JAXMPI_FUZZ_SECONDS=600 JAXMPI_FUZZ_ABI=OPENMPI scripts/fuzz.sh
# Exits non-zero on a crash or sanitizer report (the input is kept in
# $OUT/crash-*).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-${JAXMPI_VENV:-.venv}/bin/python}
INC=${JAXMPI_FFI_INCLUDE:-$("$PY" -c 'import jaxlib, os; print(os.path.join(os.path.dirname(jaxlib.__file__), "include"))')}
ABI=${JAXMPI_FUZZ_ABI:-MPICH}
OUT=${JAXMPI_FUZZ_DIR:-build/fuzz-$ABI}
mkdir -p "$OUT/corpus"
clang -std=c11 -Wall -Wextra -Werror -g -O1 \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Icsrc -I"$INC" -DJAXMPI_ABI_$ABI=1 \
  tests/fuzz/fuzz_decode.c csrc/*.c -ldl -o "$OUT/fuzz_decode"
"$OUT/fuzz_decode" -max_total_time="${JAXMPI_FUZZ_SECONDS:-30}" \
  -artifact_prefix="$OUT/" -print_final_stats=1 "$OUT/corpus"
