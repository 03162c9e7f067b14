"""Python's half of csrc/ops.h: the kinds of the FFI attributes, the
buffer limits, the C targets besides the primitives' own, the tables that
the primitive definitions fill, and the check of the C core's table
against them."""

from __future__ import annotations

from . import _dtypes

# Parameters that travel to the C handler as FFI attributes (all int64:
# handles and addresses as their 64-bit pattern, which MLIR's unsigned
# attributes cannot hold above 2**63).
_HANDLE_ATTRS = ("comm", "op", "status")
_INT_ATTRS = ("root", "source", "dest", "tag", "sendtag", "recvtag")
_ARRAY_ATTRS = ("sources", "dests", "counts", "sendcounts", "recvcounts")
# Every attribute a handler may receive (the C core's JM_ATTRS, checked at
# import: _core.check_table), and those that are arrays.
FFI_ATTRS = (*_HANDLE_ATTRS, *_INT_ATTRS, *_ARRAY_ATTRS, "site")
ARRAY_ATTRS = _ARRAY_ATTRS

# Buffers per call are the C core's JM_MAX_BUFFERS (32), checked at import.
# A blocking exchange (neighbor_exchange) has one operand and one result
# per pair: 32 pairs per call. A start returns its handle and both buffers
# of every pair (ineighbor_exchange): 1 + 2 * 15 buffers, 15 pairs per
# request.
PAIRS_PER_CALL = 32
PAIRS_PER_REQUEST = 15

# C handlers that a primitive's lowering picks besides its own name
# (reduce_scatter_p: equal blocks go to reduce_scatter_block).
EXTRA_TARGETS = ("reduce_scatter_block",)
# C starts that a start primitive's lowering picks besides its own name
# (ireduce_scatter_p: equal blocks go to ireduce_scatter_block).
EXTRA_START_TARGETS = ("ireduce_scatter_block",)

# What the definitions fill: the blocking primitives, and per start its
# primitive, its wait's spec maker, its JVP check, its backward request,
# what its wait does after MPI (iexscan), its batch axes.
PRIMITIVES: dict = {}
START: dict = {}
_SPECS: dict = {}
_JVP_CHECKS: dict = {}
_BACKWARD: dict = {}
_AFTER_WAIT: dict = {}
_BATCH_AXES: dict = {}


def check_table(table: dict) -> None:
    """Raise ImportError unless the C core's table (_core.Core.table)
    agrees with Python's: the same blocking ops as PRIMITIVES and the same
    starts as START (names without the ``jaxmpi_`` prefix), the FFI
    attributes with the same kinds, the buffer limits the validation
    assumes, and the byte size of every dtype code in _dtypes. A
    disagreement means a C core built from other sources than this Python
    package (a stale build). Run by ``import jaxmpi`` once every primitive
    is defined."""
    problems = []
    c_ops = {n for n, row in table["ops"].items() if not row[3]}
    c_starts = {n for n, row in table["ops"].items() if row[3]}
    for what, c_names, py_names in (("blocking ops", c_ops,
                                     set(PRIMITIVES) | set(EXTRA_TARGETS)),
                                    ("non-blocking starts", c_starts,
                                     set(START) |
                                     set(EXTRA_START_TARGETS))):
        if c_names != py_names:
            problems.append(
                f"{what}: only in C {sorted(c_names - py_names)}, only in "
                f"Python {sorted(py_names - c_names)}")
    py_attrs = {a: a in ARRAY_ATTRS for a in FFI_ATTRS}
    if table["attrs"] != py_attrs:
        problems.append(f"FFI attributes: C {table['attrs']}, Python {py_attrs}")
    if table["max_buffers"] != PAIRS_PER_CALL or (
            1 + 2 * PAIRS_PER_REQUEST > table["max_buffers"]):
        problems.append(f"buffers per call: C {table['max_buffers']}, Python "
                        f"{PAIRS_PER_CALL} pairs (blocking), "
                        f"{PAIRS_PER_REQUEST} (non-blocking)")
    if len(table["dtype_sizes"]) != _dtypes.N_XLA_TYPES:
        problems.append(f"dtype codes: C {len(table['dtype_sizes'])}, Python "
                        f"{_dtypes.N_XLA_TYPES}")
    for dt, code in _dtypes.XLA_TYPE.items():
        if table["dtype_sizes"].get(code) != dt.itemsize:
            problems.append(f"dtype {dt} (code {code}): C "
                            f"{table['dtype_sizes'].get(code)} bytes, numpy "
                            f"{dt.itemsize}")
    if problems:
        raise ImportError(
            "jaxmpi's C core does not match its Python package (built from "
            "other sources?): " + "; ".join(problems) + ". Reinstall jaxmpi "
            "(pip install --force-reinstall --no-deps jaxmpi, or from the "
            "checkout: pip install --force-reinstall --no-deps .)")
