"""Python's half of csrc/ops.h: the kinds of the FFI attributes, the
buffer limits, the C targets besides the primitives' own, the tables that
the primitive definitions fill, and the check of the C core's table
against them."""

from __future__ import annotations

from . import _dtypes

# Parameters that travel to the C handler as FFI attributes (all int64:
# handles and addresses as their 64-bit pattern, which MLIR's unsigned
# attributes cannot hold above 2**63).
HANDLE_ATTRS = ("comm", "op", "status")
INT_ATTRS = ("root", "source", "dest", "tag", "sendtag", "recvtag")
ARRAY_ATTRS = ("sources", "dests", "counts", "sendcounts", "recvcounts",
               "comms")
# Every attribute a handler may receive (the C core's JM_ATTRS, checked
# below): "site" is the call's Python line (_primitives.site), "devices"
# and "comms" a call's over several devices (_primitives.attributes).
FFI_ATTRS = (*HANDLE_ATTRS, *INT_ATTRS, *ARRAY_ATTRS, "site", "devices")

# Buffers per call are the C core's JM_MAX_BUFFERS (32), checked at import.
# A blocking exchange (neighbor_exchange) has one operand and one result
# per pair: 32 pairs per call. A start returns its handle and both buffers
# of every pair (ineighbor_exchange): 1 + 2 * 15 buffers, 15 pairs per
# request.
PAIRS_PER_CALL = 32
PAIRS_PER_REQUEST = 15

# What the definitions fill (_primitives), as ops.h's JM_OPS, JM_IOPS and
# JM_WAITS: name -> the primitive of each blocking op, name -> the row of
# each start (_primitives.Start: its primitive, results, backward
# request, JVP check, batch axes, what its wait does after MPI and
# returns), and the wait's primitive; and, per kind of row (the C table's
# kinds), the C handlers their lowerings call: each primitive's own name,
# and the others its row names (reduce_scatter's equal blocks go to
# reduce_scatter_block).
BLOCKING: dict = {}
STARTS: dict = {}
WAITS: dict = {}
TARGETS: dict = {"blocking": set(), "start": set(), "wait": set()}


def check_table(table: dict) -> None:
    """Raise ImportError unless the C core's table (_core.Core.table)
    agrees with Python's: the same C targets of blocking ops, starts and
    waits as the definitions registered (TARGETS: names without the
    ``jaxmpi_`` prefix), the FFI
    attributes with the same kinds, the buffer limits the validation
    assumes, and the byte size of every dtype code in _dtypes. A
    disagreement means a C core built from other sources than this Python
    package (a stale build). Run by ``import jaxmpi`` once every primitive
    is defined."""
    problems = []
    for what, kind in (("blocking ops", "blocking"),
                       ("non-blocking starts", "start"), ("waits", "wait")):
        c_names = {n for n, row in table["ops"].items() if row[3] == kind}
        py_names = TARGETS[kind]
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
