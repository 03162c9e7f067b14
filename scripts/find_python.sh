# find_python WANT (sourced by ./run and .ci/run): the interpreter WANT names,
# a command or path as it is, or a bare version ("3.13") found in pyenv's
# versions (newest patch release first: its shim on PATH fails unless the
# version is selected), then as python3.13 on PATH.
find_python() {
  local want=$1 cand
  if [[ ! $want =~ ^[0-9]+\.[0-9]+$ ]]; then echo "$want"; return; fi
  for cand in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python"$want" 2>/dev/null | sort -rV); do
    [ -x "$cand" ] && { echo "$cand"; return; }
  done
  if "python$want" -c "" >/dev/null 2>&1; then echo "python$want"; return; fi
  echo "no Python $want on PATH or in pyenv" >&2
  return 1
}
