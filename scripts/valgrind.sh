#!/usr/bin/env bash
# Run a small jaxmpi job (every op, eager and jitted, with cross-rank checks
# and the watchdog on for half of it) on 2 ranks under valgrind memcheck and
# report the errors whose stack passes through jaxmpi's C core. Python,
# XLA and MPI report plenty of their own (uninitialised padding, custom
# allocators): only frames in jaxmpi's _core_*.so or csrc/ count. Slow
# (minutes); not part of CI.
#   scripts/valgrind.sh                  uses $JAXMPI_VENV (default .venv)
# Exits non-zero if an error involves jaxmpi's core.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${JAXMPI_VENV:-.venv}
OUT=${JAXMPI_VALGRIND_DIR:-build/valgrind}
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)"; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT"
cat > "$OUT/job.py" <<'PY'
from mpi4py import MPI
import jax, jax.numpy as jnp
import jaxmpi
from jaxmpi import notoken as mpx
rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size
def all_ops(x):
    y = mpx.allreduce(x, MPI.SUM) + mpx.scan(x, MPI.MAX)
    y = y + mpx.reduce(x, MPI.SUM, 0) + mpx.bcast(x, 0)
    y = y + mpx.gather(x, 1)[0 if rank == 1 else slice(None)]
    y = y + mpx.allgather(x)[0] + mpx.alltoall(jnp.stack([x] * size))[0]
    y = y + mpx.scatter(jnp.stack([x] * size) if rank == 0 else x, 0)
    y = y + mpx.sendrecv(x, x, left, right)
    y = y + mpx.neighbor_exchange([x], [x], [left], [right])[0]
    mpx.barrier()
    return y
x = jnp.arange(6.0, dtype=jnp.float32) + rank
for on in (False, "sparse", True):
    jaxmpi.set_check(on)
    jaxmpi.set_timeout(300 if on else None)
    a = all_ops(x)
    b = jax.jit(all_ops)(x)
    assert bool(jnp.all(a == b)), (a, b)
    try:   # an error path: a message of the wrong size
        if rank == 0:
            mpx.send(jnp.ones(7, jnp.float32), 1, tag=9)
        elif rank == 1:
            mpx.recv(x, 0, tag=9).block_until_ready()
    except Exception as e:
        print("expected error:", str(e)[:80], flush=True)
    jax.effects_barrier()
    MPI.COMM_WORLD.Barrier()
print("valgrind job ok", rank, flush=True)
PY
export PYTHONMALLOC=malloc JAX_PLATFORMS=cpu
timeout "${JAXMPI_VALGRIND_TIMEOUT:-3000}" "$VENV/bin/mpiexec" -n 2 valgrind --tool=memcheck \
  --error-limit=no --num-callers=30 --track-origins=no \
  --log-file="$OUT/memcheck.%p.log" "$VENV/bin/python" "$OUT/job.py"
# Error blocks (separated by "==PID== " lines) that mention our core.
ours=$(awk '
  /^==[0-9]+== $/ { if (block ~ /_core_(mpich|openmpi|mpiabi)|csrc\/| jm_[A-Za-z_]+ \(| jaxmpi_ffi_/) { print block; n++ } block=""; next }
  /^==[0-9]+== / { block = block $0 "\n" }
  END { if (block ~ /_core_(mpich|openmpi|mpiabi)|csrc\/| jm_[A-Za-z_]+ \(| jaxmpi_ffi_/) { print block; n++ } }
' "$OUT"/memcheck.*.log | grep -v "HEAP SUMMARY\|in use at exit\|total heap usage" || true)
if printf '%s' "$ours" | grep -q "Invalid\|uninitialised\|Mismatched\|overlap\|Conditional jump"; then
  printf '%s\n' "$ours"
  echo "FAILED: valgrind reports errors in jaxmpi's C core (logs in $OUT)"
  exit 1
fi
echo "valgrind: no errors in jaxmpi's C core (all reports in $OUT/memcheck.*.log)"
