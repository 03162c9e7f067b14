"""The operations are listed once per layer and checked against each other
at import: the C core's table (csrc/ops.h) against the primitives of _ops and
_nonblocking, its attributes, buffer limit and dtype sizes against Python's;
jaxmpi and jaxmpi.notoken are made from _api.OPERATIONS and
_nonblocking.OPERATIONS."""

import copy

import pytest

import jaxmpi
import jaxmpi.notoken as notoken
from jaxmpi import _api, _core, _nonblocking, _ops


def _table():
    return _core.get().table()


def test_the_table_agrees_with_python():
    t = _table()
    _core.check_table(t, _ops.PRIMITIVES, _nonblocking.START)
    ops = t["ops"]
    # independent facts of the C table, as ops.h writes them
    assert ops["allreduce"] == (1, 1, ("comm", "op"), False)
    assert ops["sendrecv"][:2] == (2, 1) and not ops["sendrecv"][3]
    assert ops["iallreduce"][3] and ops["iallreduce"][:2] == (1, 2)
    assert t["attrs"]["sources"] is True and t["attrs"]["root"] is False
    assert t["dtype_sizes"][11] == 4 and t["dtype_sizes"][18] == 16


@pytest.mark.parametrize("tamper", ["c_op", "py_op", "start", "attr", "dtype",
                                    "buffers"])
def test_a_disagreement_is_an_import_error(tamper):
    t = copy.deepcopy(_table())
    prims, starts = dict(_ops.PRIMITIVES), dict(_nonblocking.START)
    if tamper == "c_op":
        t["ops"]["reduce_everything"] = (1, 1, ("comm",), False)
    elif tamper == "py_op":
        del prims["scan"]
    elif tamper == "start":
        del t["ops"]["ibcast"]
    elif tamper == "attr":
        t["attrs"]["dests"] = False
    elif tamper == "dtype":
        t["dtype_sizes"][12] = 4
    else:
        t["max_buffers"] = 16
    word = {"c_op": "reduce_everything", "py_op": "scan", "start": "ibcast",
            "attr": "dests", "dtype": "float64", "buffers": "buffers per call"}
    with pytest.raises(ImportError, match="does not match its Python package") as e:
        _core.check_table(t, prims, starts)
    assert word[tamper] in str(e.value)


def test_both_apis_are_made_from_the_one_list():
    names = (*_api.OPERATIONS, *_nonblocking.OPERATIONS)
    for name in names:
        bare = getattr(notoken, name)
        assert bare is getattr(_api if name in _api.OPERATIONS else _nonblocking, name)
        wrapped = getattr(jaxmpi, name)
        assert wrapped.__wrapped__ is bare and name in jaxmpi.__all__
        assert name in notoken.__all__
    # every public primitive-backed op of the C table has a public function
    # or is reached through one (wait/waitall are Python-level)
    # (EXTRA_TARGETS are reached through another op)
    for name, row in _table()["ops"].items():
        if name not in (*_ops.EXTRA_TARGETS, *_nonblocking.EXTRA_TARGETS):
            assert hasattr(notoken, name), name
