"""``jaxmpi.jit``: a jitted function whose calls take JAX's C++ dispatch path.

Any effect in a jitted computation turns off JAX's C++ fast path, and every
call of a computation with an ordered effect passes a runtime token: many times
a plain jitted call's cost (docs/design.md, "Dispatch"). ``jaxmpi.jit(f)``
traces ``f`` as ``jax.jit`` would, then wraps its jaxpr in one primitive,
``jaxmpi_region``, that carries no effect: the computation JAX dispatches has
no effect, so its calls take the C++ path. The region's lowering creates the
ordered effect's token inside the computation (``stablehlo.create_token``) and
threads it through every jaxmpi call of ``f`` in program order, across loops
and conditionals, exactly as JAX threads it for ``jax.jit``: the order inside a
computation is unchanged.

What the region gives up is the runtime token between dispatches. The order
of calls across dispatches then rests on the device's queue: XLA:CPU runs
one device's computations in the order they were enqueued (JAX relies on it
for its own output tokens, dispatch.RuntimeTokenSet; measured in
docs/design.md; tests/mpi/test_ordering_dispatch.py runs every case through
both ``jax.jit`` and ``jaxmpi.jit``). Each region also returns a scalar
marker, made when the computation ends, which the wrapper hands to JAX as
the thread's output runtime token: ``jax.effects_barrier()`` and the eager
direct path (_eager.wait_for_dispatched) wait for it, as they wait for the
runtime token of ``jax.jit``'s computations.

The rules, each checked:

* over several devices, jaxmpi calls inside ``shard_map`` (an error at
  lowering otherwise), and at most MAX_IN_FLIGHT such regions in flight;
* below ``MPI_THREAD_MULTIPLE``, one Python thread (``_threads.guard`` at
  every call, as for every jaxmpi dispatch);
* only jaxmpi's effect: a function with any other effect (``jax.debug``
  callbacks, ``io_callback``) is compiled as ``jax.jit`` compiles it, with
  its runtime tokens and JAX's Python dispatch (``fast`` says which);
* under a trace (``jax.jit``, ``grad``, ``vmap``, an outer
  ``jaxmpi.jit``) the function is ``jax.jit(f)``: transformations see the
  ordered effect as usual.
"""

from __future__ import annotations

import collections
import functools
import re
import threading

import jax
import numpy as np

from . import _jax_compat as jc
from ._effect import MARKER_KEY, ended, mpi_effect
from ._threads import guard

_MARKER_AVAL = jc.ShapedArray((), np.dtype(np.bool_))

region_p = jc.Primitive("jaxmpi_region")
region_p.multiple_results = True


def _region_abstract_eval(*avals, jaxpr):
    return [*jaxpr.out_avals, _MARKER_AVAL]


def _region_impl(*args, jaxpr):
    # Bound only while jax.jit traces the wrapper; kept for completeness.
    return [*jc.jaxpr_as_fun(jaxpr)(*args), np.bool_(True)]


region_p.def_abstract_eval(_region_abstract_eval)
region_p.def_impl(_region_impl)


def _region_lowering(ctx, *args, jaxpr):
    token = jc.hlo.create_token()
    inner = ctx.replace(tokens_in=jc.mlir.TokenSet({mpi_effect: token}),
                        avals_out=ctx.avals_out[:-1])
    outs = jc.mlir.core_call_lowering(inner, *args, name="jaxmpi_region",
                                      call_jaxpr=jaxpr)
    marker = jc.mlir.ir_constant(np.bool_(True))
    return [*outs, marker]


jc.mlir.register_lowering(region_p, _region_lowering)


# The status codes of the C core's errors (every XLA_FFI_Error_Code that
# csrc/ uses).
_STATUS = re.compile(r"(INVALID_ARGUMENT|DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED|"
                     r"FAILED_PRECONDITION|INTERNAL|UNIMPLEMENTED): jaxmpi\.")


def _runtime_error(e: ValueError) -> Exception:
    """An error of the C core raised by JAX's C++ dispatch path: JAX raises
    a computation's failure there as a ValueError (its Python path, and the
    array of an asynchronous call, raise jax.errors.JaxRuntimeError): the
    documented type, with the same message. Anything else as it is."""
    if not _STATUS.match(str(e)):
        return e
    return jax.errors.JaxRuntimeError(str(e))


# XLA:CPU runs a program over several devices as a gang on its thread pool,
# one launch at a time, and hangs with about 48 or more such launches queued,
# MPI or not (docs/devices.md, "Limits"). jax.jit's runtime token chain does
# not queue that many; jaxmpi.jit's C++ dispatch does, so it waits for the
# oldest multi-device region once MAX_IN_FLIGHT are in flight.
MAX_IN_FLIGHT = 16
_in_flight: collections.deque = collections.deque()


def _bound_in_flight(marker) -> None:
    _in_flight.append(marker)
    while len(_in_flight) > MAX_IN_FLIGHT:
        ended(_in_flight.popleft())  # its error reaches its results' reader


class Jitted:
    """A function compiled by ``jaxmpi.jit`` (see ``jaxmpi.jit``)."""

    def __init__(self, fun, jit_kwargs):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._plain = jax.jit(fun, **jit_kwargs)
        region = functools.wraps(fun)(
            lambda *args, **kwargs: self._region(*args, **kwargs))
        self._fast = jax.jit(region, **jit_kwargs)
        # Per traced signature: whether the region applied (None: not
        # traced yet).
        self.fast = None

    def _region(self, *args, **kwargs):
        """Traced by jax.jit: ``fun``'s jaxpr inside one effect-free
        region, and the marker."""
        leaves, tree = jax.tree.flatten((args, kwargs))
        dyn = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jc.Tracer)]
        out_tree = []

        def flat(*values):
            filled = list(leaves)
            for i, value in zip(dyn, values):
                filled[i] = value
            a, k = jax.tree.unflatten(tree, filled)
            outs, t = jax.tree.flatten(self._fun(*a, **k))
            out_tree.append(t)
            return outs

        closed = jax.make_jaxpr(flat)(*[leaves[i] for i in dyn])
        if set(closed.effects) != {mpi_effect}:
            # No jaxmpi call (nothing to hide), or an effect the region
            # cannot carry: jax.jit's own lowering and dispatch.
            self.fast = False
            return self._fun(*args, **kwargs), np.bool_(True)
        self.fast = True
        *outs, marker = region_p.bind(*[leaves[i] for i in dyn], jaxpr=closed)
        return jax.tree.unflatten(out_tree[0], outs), marker

    def __call__(self, *args, **kwargs):
        if not jc.trace_state_clean():
            return self._plain(*args, **kwargs)
        guard()
        try:
            out, marker = self._fast(*args, **kwargs)
        except ValueError as e:
            raise _runtime_error(e) from None
        jc.dispatch.runtime_tokens.output_runtime_tokens[MARKER_KEY] = marker
        if len(marker.sharding.device_set) > 1:
            _bound_in_flight(marker)
        return out

    def lower(self, *args, **kwargs):
        """The region's program, as ``jax.jit(fun).lower`` gives jax.jit's
        (its last output is the marker)."""
        return self._fast.lower(*args, **kwargs)

    def __repr__(self):
        return f"jaxmpi.jit({getattr(self._fun, '__qualname__', self._fun)!r})"


# ---- eager calls: each primitive alone in a cached region -----------------
# A jaxmpi operation called outside any trace binds its primitive, whose
# implementation JAX's apply_primitive would compile and dispatch as a
# jitted one-op computation with the ordered effect: JAX's Python dispatch
# path. The same computation as a jaxmpi.jit region, cached per primitive
# and parameters, takes the C++ path (docs/design.md, "Dispatch"). Arrays on
# other platforms (the GPU, where no region has been run yet) keep
# apply_primitive.


# The traceback of the eager call being made on this thread: a region's
# trace, which happens inside JAX's jit, sees a traceback that stops at the
# trace's boundary, without the user's line that the call's `site` (the
# debug log, the watchdog) names; it is bound under this one instead.
_eager_call = threading.local()


@functools.lru_cache(maxsize=4096)
def _primitive_region(prim, params):
    kwargs = dict(params)

    def one_op(*args):
        with jc.source_info_util.user_context(
                getattr(_eager_call, "traceback", None)):
            return prim.bind(*args, **kwargs)

    return jit(one_op)


def _on_cpu(args) -> bool:
    for a in args:
        sharding = getattr(a, "sharding", None)
        if sharding is not None and any(
                d.platform != "cpu" for d in sharding.device_set):
            return False
    return True


def apply_in_region(prim, *args, **params):
    """The eager implementation of a jaxmpi primitive (``def_impl``)."""
    if _on_cpu(args):
        try:
            fn = _primitive_region(prim, tuple(sorted(params.items())))
        except TypeError:  # a parameter that cannot be hashed
            fn = None
        if fn is not None:
            _eager_call.traceback = jc.xla_client.Traceback.get_traceback()
            return fn(*args)
    return jc.apply_primitive(prim, *args, **params)


def jit(fun=None, **jit_kwargs):
    """``jax.jit`` whose calls take JAX's C++ dispatch path.

    A function compiled by ``jax.jit`` that calls jaxmpi carries jaxmpi's
    ordered effect, which puts every call on JAX's slower Python dispatch path
    (docs/design.md, "Dispatch", has the cost). ``jaxmpi.jit`` compiles the
    same program, with the same order of MPI calls inside and across calls, and
    dispatches it as a plain jitted function. The rules, each checked: over
    several devices, jaxmpi calls inside ``shard_map`` (docs/devices.md);
    below ``MPI_THREAD_MULTIPLE``, jaxmpi work from one Python thread; no
    effect but jaxmpi's (a function with ``jax.debug``
    callbacks or ``io_callback`` is compiled and dispatched as ``jax.jit``
    would). Under a transformation (an outer ``jax.jit``, ``grad``, ``vmap``)
    it is ``jax.jit(fun)``.

    Args:
        fun: the function to compile (omitted: ``jit(**kw)`` is a decorator).
        jit_kwargs: passed on to ``jax.jit`` (``static_argnums``, ...).

    Returns:
        A callable like ``jax.jit(fun)``'s; its ``fast`` attribute says whether
        the last traced signature took the fast path (None before a call).

    Raises:
        TypeError: ``fun`` is not callable.
        MPIConfigurationError: below ``MPI_THREAD_MULTIPLE``, a second Python
            thread dispatched jaxmpi work.

    Example:
        A training step:

            def step(w, g):
                return w - 0.1 * mpx.allreduce(g, MPI.SUM) / size

            step = jaxmpi.jit(step)         # or @jaxmpi.jit above the def
            w = step(w, g)                  # a plain call plus the MPI time
    """
    if fun is None:
        return lambda f: jit(f, **jit_kwargs)
    if not callable(fun):
        raise TypeError(f"jit: fun must be callable, got "
                        f"{type(fun).__name__}: {fun!r}")
    return Jitted(fun, jit_kwargs)
