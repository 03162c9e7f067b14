"""The operations are listed once per layer and checked against each other
at import: the C core's table (csrc/ops.h) against _registry's (the
primitives and starts the definitions registered, the attributes, buffer
limits and dtype sizes); jaxmpi is made from notoken's one list."""

import copy

import pytest

import jaxmpi
import jaxmpi.notoken as notoken
from jaxmpi import _core, _registry


def _table():
    return _core.get().table()


def test_the_table_agrees_with_python():
    t = _table()
    _registry.check_table(t)
    ops = t["ops"]
    # independent facts of the C table, as ops.h writes them
    assert ops["allreduce"] == (1, 1, ("comm", "op"), "blocking")
    assert ops["sendrecv"][:2] == (2, 1) and ops["sendrecv"][3] == "blocking"
    assert ops["iallreduce"][3] == "start" and ops["iallreduce"][:2] == (1, 2)
    assert ops["wait"][3] == "wait"
    assert t["attrs"]["sources"] is True and t["attrs"]["root"] is False
    assert t["dtype_sizes"][11] == 4 and t["dtype_sizes"][18] == 16


@pytest.mark.parametrize("tamper", ["c_op", "py_op", "start", "attr", "dtype",
                                    "buffers"])
def test_a_disagreement_is_an_import_error(tamper, monkeypatch):
    t = copy.deepcopy(_table())
    targets = {k: set(v) for k, v in _registry.TARGETS.items()}
    if tamper == "c_op":
        t["ops"]["reduce_everything"] = (1, 1, ("comm",), "blocking")
    elif tamper == "py_op":
        targets["blocking"].discard("scan")
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
    with monkeypatch.context() as m:
        m.setattr(_registry, "TARGETS", targets)
        with pytest.raises(ImportError,
                           match="does not match its Python package") as e:
            _registry.check_table(t)
    assert word[tamper] in str(e.value)


def test_both_apis_are_made_from_the_one_list():
    names = [n for n in notoken.__all__
             if n not in ("has_cuda_support", "Request", "jit", "DeviceCart")]
    assert tuple(names) == jaxmpi._OPERATIONS
    for name in names:
        bare = getattr(notoken, name)
        assert bare.__module__ in ("jaxmpi._reductions", "jaxmpi._collectives",
                                   "jaxmpi._vcollectives", "jaxmpi._p2p",
                                   "jaxmpi._topology", "jaxmpi._wait"), (
            name, bare.__module__)
        wrapped = getattr(jaxmpi, name)
        assert wrapped.__wrapped__ is bare and name in jaxmpi.__all__
        assert name in notoken.__all__
    # every public primitive-backed op of the C table has a public function
    # or is reached through one (wait/waitall are Python-level)
    # (a C target that is no row's own name is reached through another op)
    rows = {*_registry.BLOCKING, *_registry.STARTS, *_registry.WAITS}
    for name, row in _table()["ops"].items():
        if name in rows:
            assert hasattr(notoken, name), name
