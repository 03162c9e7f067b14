# Step timings for ./run and CI's scripts (sourced). `step_begin`, then
# `step_end NAME [KIND]`: prints "--- NAME: S s" and, when JAXMPI_STEP_LOG
# names a file, appends "S<TAB>KIND<TAB>NAME" to it (KIND: step, a leaf; or
# group, a step whose parts, the test files or launcher tests inside it,
# tests/plugins/jaxmpi_step_timing.py writes as "part"). .ci/run's summary
# reads these files: each configuration's slowest leaves.
# (Bash 5's EPOCHREALTIME; the separator may be ',' in some locales.)
_STEP_T0=()
step_now_us() { local t=${EPOCHREALTIME//[.,]/}; echo "${t:-$(($(date +%s) * 1000000))}"; }
step_begin() { _STEP_T0+=("$(step_now_us)"); }
step_end() {
  local n=${#_STEP_T0[@]}
  [ "$n" -gt 0 ] || return 0
  local t0=${_STEP_T0[$((n - 1))]}
  unset "_STEP_T0[$((n - 1))]"
  local us=$(( $(step_now_us) - t0 ))
  local s; s=$(printf '%d.%d' $((us / 1000000)) $(((us / 100000) % 10)))
  echo "--- $1: $s s"
  if [ -n "${JAXMPI_STEP_LOG:-}" ]; then
    printf '%s\t%s\t%s\n' "$s" "${2:-step}" "$1" >> "$JAXMPI_STEP_LOG" || true
  fi
}
