"""A plain JAX program across hosts (run under python -m jaxmpi.distributed
by test_native_hosts.py): jax.distributed.initialize() with no arguments,
then an all-reduce of COUNT float64 per process, ITERS times, checked
against NumPy; prints one JSON line per process: its host, the coordinator
address JAX was given, how many MPI calls XLA's collectives made through
jaxmpi, and whether every sum was right."""

import json
import socket
import sys

import jax

jax.config.update("jax_enable_x64", True)
jax.distributed.initialize()

import numpy as np  # noqa: E402
from jax._src import distributed  # noqa: E402 (the address JAX was given)
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import jaxmpi.distributed  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # JAX < 0.7
    from jax.experimental.shard_map import shard_map

count, iters = int(sys.argv[1]), int(sys.argv[2])
me, n = jax.process_index(), jax.process_count()
mesh = Mesh(np.array(jax.devices()), ("p",))
a = np.arange(n * count, dtype=np.float64) % 97 + np.repeat(np.arange(n), count)
x = jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("p")),
                                 lambda i: a[i])
f = jax.jit(shard_map(lambda v: jax.lax.psum(v, "p"), mesh=mesh,
                      in_specs=P("p"), out_specs=P("p")))
want = a.reshape(n, count).sum(0)
ok = all(np.array_equal(np.asarray(f(x * 1.0).addressable_data(0)), want)
         for _ in range(iters))
line = {"process": me, "processes": n, "hostname": socket.gethostname(),
        "coordinator": distributed.global_state.coordinator_address,
        "native_calls": jaxmpi.distributed.native_calls(), "ok": ok}
sys.stdout.write("native " + json.dumps(line) + "\n")
sys.stdout.flush()
