"""A plain JAX program (no jaxmpi in it): jax.distributed.initialize() with
no arguments, a global array over one device per process, an auto-sharded
sum and a shard_map psum and ppermute, checked against NumPy. Run by
test_native.py as `mpiexec -n P python -m jaxmpi.distributed native_app.py
[args]` (also -m and -c); prints one line per check, prefixed with its
process index. `--explicit`: initialize() with every argument given."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # JAX < 0.7
    from jax.experimental.shard_map import shard_map

if "--explicit" in sys.argv:
    from mpi4py import MPI

    port = MPI.COMM_WORLD.bcast(int(sys.argv[sys.argv.index("--explicit") + 1]))
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                               num_processes=MPI.COMM_WORLD.Get_size(),
                               process_id=MPI.COMM_WORLD.Get_rank())
else:
    jax.distributed.initialize()

from jax._src import distributed  # noqa: E402 (the address JAX was given)

me, n = jax.process_index(), jax.process_count()
out = []
mesh = Mesh(np.array(jax.devices()), ("p",))
a = np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2) * (1 + np.arange(2))
x = jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("p")),
                                 lambda i: a[i])
total = jax.jit(jnp.sum)(x)
both = jax.jit(shard_map(
    lambda v: (jax.lax.psum(v, "p"),
               jax.lax.ppermute(v, "p", [(i, i + 1) for i in range(n - 1)])),
    mesh=mesh, in_specs=P("p"), out_specs=(P("p"), P("p"))))(x)
blocks = a.reshape(n, 2, 2)
psum = np.asarray(both[0].addressable_data(0))
shifted = np.asarray(both[1].addressable_data(0))
out.append(f"sum {float(total)} {'OK' if float(total) == a.sum() else 'WRONG'}")
out.append(f"psum {'OK' if np.array_equal(psum, blocks.sum(0)) else 'WRONG'}")
want = blocks[me - 1] if me > 0 else np.zeros((2, 2), np.float32)
out.append(f"ppermute {'OK' if np.array_equal(shifted, want) else 'WRONG'}")
out.append(f"processes {n} devices {jax.device_count()} local "
           f"{jax.local_device_count()}")
out.append(f"collectives {jax.config.jax_cpu_collectives_implementation}")
out.append(f"coordinator {distributed.global_state.coordinator_address}")
out.append(f"argv {sys.argv[1:]}")
if "jaxmpi.distributed" in sys.modules:
    out.append(f"native calls {sys.modules['jaxmpi.distributed'].native_calls()}")
for line in out:  # one write per line (print writes its "\n" apart when
    # unbuffered, and the launcher may put another process's line between)
    sys.stdout.write(f"process {me}: {line}\n")
    sys.stdout.flush()
