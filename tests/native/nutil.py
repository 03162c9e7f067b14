"""Global arrays over one mesh axis of every process's device, with
process-dependent data, and the NumPy references (computed from the global
array, independently of the code under test)."""

import jax
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:
    from jax import shard_map as _shard_map
except ImportError:  # JAX < 0.7
    from jax.experimental.shard_map import shard_map as _shard_map

N = jax.process_count()
ME = jax.process_index()
MESH = Mesh(np.array(jax.devices()), ("p",))
bfloat16 = np.dtype(ml_dtypes.bfloat16)

# Every dtype; XLA's MPI collectives reduce and all-gather the ones MPI
# has (and bfloat16, which XLA's CPU compiler reduces in float32) and move
# any dtype as bytes (collective-permute, all-to-all).
DTYPES = [np.dtype(d) for d in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.float16, bfloat16, np.float32, np.float64,
    np.complex64, np.complex128)]
REDUCIBLE = [d for d in DTYPES if d not in (np.dtype(np.bool_),
                                            np.dtype(np.float16))]


def global_data(shape, dtype, salt=0):
    """The same global array on every process; block r differs with r."""
    count = int(np.prod(shape))
    base = (np.arange(count) * 7 + salt * 3 + 1) % 11 - 4
    if dtype == np.bool_:
        return (base % 3 == 0).reshape(shape)
    if np.issubdtype(dtype, np.unsignedinteger):
        base = np.abs(base)
    out = base.astype(dtype).reshape(shape)
    if np.issubdtype(dtype, np.complexfloating):
        out = out + 1j * np.flip(base).reshape(shape).astype(dtype)
    return out


def sharded(a, spec=P("p")):
    """A global jax Array of `a`, split over the processes along axis 0."""
    return jax.make_array_from_callback(a.shape, NamedSharding(MESH, spec),
                                        lambda index: a[index])


def block(a, r=None):
    """Process r's block of a global array split along axis 0."""
    r = ME if r is None else r
    rows = a.shape[0] // N
    return a[r * rows:(r + 1) * rows]


def local(x):
    """This process's block of a global jax Array, as NumPy."""
    return np.asarray(x.addressable_data(0))


def shard_map(f, out_specs=P("p"), in_specs=P("p")):
    return jax.jit(_shard_map(f, mesh=MESH, in_specs=in_specs,
                              out_specs=out_specs))


def close(got, want, dtype):
    """Exact for integers and bools; float rounding for the rest (sums in
    a different order)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if dtype.kind in "biu":
        return np.array_equal(got, want)
    tol = 1e-2 if dtype in (bfloat16, np.dtype(np.float16)) else 1e-6
    return np.allclose(got.astype(np.complex128), want.astype(np.complex128),
                       rtol=tol, atol=tol)
