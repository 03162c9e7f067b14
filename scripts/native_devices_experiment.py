"""The experiment behind docs/design.md, "Several devices per process over
XLA's MPI": what XLA's MPI collectives do with n CPU devices per process,
when jaxmpi's refusal at initialize() is bypassed (here only, by patching
its device count; the layer then answers MPI_Is_thread_main = true as for
one device, and refuses a call that begins while another is in progress). Prints, per process, every MPI call XLA makes
(JAXMPI_NATIVE_TRACE) and the results of psum over the local axis, over
the process axis and over both, against the right ones:

    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAXMPI_NATIVE_TRACE=1 \\
      mpiexec -n 2 python -m jaxmpi.distributed scripts/native_devices_experiment.py
"""

import sys

import jax
import numpy as np

import jaxmpi.distributed as route

route._local_devices_requested = lambda: 1  # bypass the refusal (experiment)
jax.distributed.initialize()
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # JAX < 0.7
    from jax.experimental.shard_map import shard_map

n, local = jax.process_count(), jax.local_device_count()
me = jax.process_index()
mesh = Mesh(np.array(jax.devices()).reshape(n, local), ("p", "l"))
a = np.arange(n * local, dtype=np.float32).reshape(n, local) + 1
x = jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("p", "l")),
                                 lambda i: a[i])
cases = {"local axis l": ("l", a.sum(1, keepdims=True) * np.ones_like(a)),
         "process axis p": ("p", a.sum(0, keepdims=True) * np.ones_like(a)),
         "both": (("p", "l"), a.sum() * np.ones_like(a))}
for name, (axes, want) in cases.items():
    f = jax.jit(shard_map(lambda v, axes=axes: jax.lax.psum(v, axes), mesh=mesh,
                          in_specs=P("p", "l"), out_specs=P("p", "l")))
    try:
        out = f(x)
        got = {tuple(i.start or 0 for i in s.index): np.asarray(s.data).item()
               for s in out.addressable_shards}
        right = {k: want[k].item() for k in got}
        verdict = "right" if got == right else "WRONG"
        line = f"psum over {name}: {verdict}: got {sorted(got.values())}, want {sorted(right.values())}"
    except Exception as e:  # the error XLA or jaxmpi raised
        line = f"psum over {name}: error: {str(e).splitlines()[0][:300]}"
    sys.stdout.write(f"process {me}: {line}\n")
    sys.stdout.flush()
