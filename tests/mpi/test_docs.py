"""Every public function documents itself: Args (every parameter),
Returns, Raises and an Example; the token API's functions say they return
``(result, token)`` (``send``/``barrier``: a token) and jaxmpi.notoken's the
bare result (``send``/``barrier``: None); signatures show MPI's constant
names, not their values. No communication: the same at any rank count."""

import inspect
import pickle
import re
import textwrap

import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken
from jaxmpi._api import OPERATIONS

SECTIONS = ("Args:", "Returns:", "Raises:", "Example:")
# Google style leaves out the sections a function has nothing for: no Args
# without parameters, no Raises where nothing can raise.
RAISES_NOTHING = ("jaxmpi.has_cuda_support", "jaxmpi.get_default_comm")
NO_RESULT = ("send", "barrier")

PUBLIC = sorted(
    [(f"jaxmpi.{n}", getattr(jaxmpi, n)) for n in jaxmpi.__all__
     if callable(getattr(jaxmpi, n)) and not inspect.isclass(getattr(jaxmpi, n))]
    + [(f"jaxmpi.notoken.{n}", getattr(notoken, n)) for n in notoken.__all__])


def test_public_functions_listed():
    names = {name for name, _ in PUBLIC}
    for op in OPERATIONS:
        assert f"jaxmpi.{op}" in names and f"jaxmpi.notoken.{op}" in names
    for fn in ("has_cuda_support", "get_default_comm", "set_check",
               "set_timeout"):
        assert f"jaxmpi.{fn}" in names
    assert len(PUBLIC) == 2 * len(OPERATIONS) + 5


def sections(doc):
    """{section title: its text} of a Google-style docstring."""
    out, title = {}, None
    for line in inspect.cleandoc(doc).splitlines():
        if line.strip() in SECTIONS and not line.startswith(" "):
            title = line.strip()
            out[title] = []
        elif title:
            out[title].append(line)
    return {k: textwrap.dedent("\n".join(v)).strip() for k, v in out.items()}


@pytest.mark.parametrize("name,fn", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_docstring_sections(name, fn):
    doc = inspect.getdoc(fn)
    assert doc, name
    params = list(inspect.signature(fn).parameters)
    wanted = [s for s in SECTIONS
              if (s != "Args:" or params)
              and (s != "Raises:" or name not in RAISES_NOTHING)]
    positions = [doc.find("\n" + s + "\n") for s in wanted]
    assert all(p > 0 for p in positions), (name, positions)
    assert positions == sorted(positions), f"{name}: sections out of order"
    sec = sections(doc)
    for s in wanted:
        assert sec.get(s), f"{name}: empty {s}"
    # Args names every parameter; none without parameters.
    for p in params:
        assert re.search(rf"^{p}: \S", sec["Args:"], re.M), (name, p)
    if not params:
        assert "Args:" not in sec, name
    # The example calls the function.
    short = fn.__name__
    assert re.search(rf"\b{short}\(", sec["Example:"]), name


@pytest.mark.parametrize("op", OPERATIONS)
def test_returns_state_the_api(op):
    bare = sections(inspect.getdoc(getattr(notoken, op)))["Returns:"]
    token = sections(inspect.getdoc(getattr(jaxmpi, op)))["Returns:"]
    if op in NO_RESULT:
        assert bare == "None.", bare
        assert token.startswith("A token"), token
        assert f"``jaxmpi.notoken.{op}`` returns None." in " ".join(
            token.split()), token
    else:
        assert "token" not in bare, bare
        assert token.startswith("``(result, token)``. result: "), token
        # The token API's result is the bare API's, stated the same way.
        assert " ".join(bare.split()) in " ".join(token.split()), (bare, token)
        assert f"``jaxmpi.notoken.{op}`` returns the result alone" in \
            " ".join(token.split()), token


@pytest.mark.parametrize("name,fn", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_signatures_show_mpi_names(name, fn):
    sig = str(inspect.signature(fn))
    assert not re.search(r"=-\d", sig), (name, sig)
    if fn.__name__ == "recv":
        assert "source=MPI.ANY_SOURCE" in sig and "tag=MPI.ANY_TAG" in sig, sig
    if fn.__name__ == "sendrecv":
        assert "recvtag=MPI.ANY_TAG" in sig, sig


def test_named_defaults_are_the_constants():
    """The named defaults are MPI's values (an int subclass), survive
    pickling, and print their names."""
    defaults = inspect.signature(notoken.recv).parameters
    src, tag = defaults["source"].default, defaults["tag"].default
    rtag = inspect.signature(notoken.sendrecv).parameters["recvtag"].default
    assert src == MPI.ANY_SOURCE and int(src) == MPI.ANY_SOURCE
    assert tag == MPI.ANY_TAG and rtag == MPI.ANY_TAG
    assert isinstance(src, int) and hash(src) == hash(MPI.ANY_SOURCE)
    assert repr(src) == "MPI.ANY_SOURCE" and str(tag) == "MPI.ANY_TAG"
    back = pickle.loads(pickle.dumps(src))
    assert back == MPI.ANY_SOURCE and repr(back) == "MPI.ANY_SOURCE"
