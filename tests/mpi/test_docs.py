"""Every public function documents itself: Args (every parameter),
Returns, Raises and an Example; the token API's functions say they return
``(result, token)`` (``send``/``barrier``: a token; the non-blocking starts
``(request, token)``, ``waitall`` ``(results, token)``) and jaxmpi.notoken's
the bare result (``send``/``barrier``: None), and they do; signatures show
MPI's constant names, not their values. No communication (MPI.PROC_NULL
peers only): the same at any rank count."""

import inspect
import pickle
import re
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import _requests, notoken

SECTIONS = ("Args:", "Returns:", "Raises:", "Example:")
# Google style leaves out the sections a function has nothing for: no Args
# without parameters, no Raises where nothing can raise.
RAISES_NOTHING = ("jaxmpi.has_cuda_support", "jaxmpi.notoken.has_cuda_support",
                  "jaxmpi.get_default_comm")
NO_RESULT = ("send", "barrier")
# The operations returning a Request (their signatures say so), and the
# other non-blocking ones.
STARTS = tuple(n for n in jaxmpi.OPERATIONS if getattr(
    notoken, n).__annotations__.get("return") == "Request")
NONBLOCKING = (*STARTS, "wait", "waitall")
OPERATIONS = tuple(n for n in jaxmpi.OPERATIONS if n not in NONBLOCKING)

PUBLIC = sorted(
    (f"{module.__name__}.{n}", getattr(module, n))
    for module in (jaxmpi, notoken) for n in module.__all__
    if callable(getattr(module, n))
    and not inspect.isclass(getattr(module, n)))


def test_public_functions_listed():
    names = {name for name, _ in PUBLIC}
    for op in (*OPERATIONS, *NONBLOCKING):
        assert f"jaxmpi.{op}" in names and f"jaxmpi.notoken.{op}" in names
    for fn in ("has_cuda_support", "get_default_comm", "set_check",
               "set_timeout", "jit"):
        assert f"jaxmpi.{fn}" in names
    assert "jaxmpi.notoken.jit" in names
    # Both APIs' operations, has_cuda_support and jit in both, jaxmpi's
    # switches.
    assert len(PUBLIC) == 2 * (len(OPERATIONS) + len(NONBLOCKING)) + 7
    # Request is public in both (a class: its docstring is checked below).
    assert "Request" in jaxmpi.__all__ and "Request" in notoken.__all__
    assert jaxmpi.Request is notoken.Request is _requests.Request


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


def one(text):
    return " ".join(text.split())


def test_request_documented():
    doc = inspect.getdoc(jaxmpi.Request)
    assert "\nExample:\n" in doc and "wait(" in sections(doc)["Example:"]
    # Each misuse error the class states, with its exception.
    for words in ("TypeError", "RuntimeError", "waited twice", "compiled",
                  "next jaxmpi call"):
        assert words in one(doc), words
    assert inspect.getdoc(jaxmpi.Request.op)


@pytest.mark.parametrize("op", OPERATIONS + NONBLOCKING)
def test_returns_state_the_api(op):
    bare = sections(inspect.getdoc(getattr(notoken, op)))["Returns:"]
    token = sections(inspect.getdoc(getattr(jaxmpi, op)))["Returns:"]
    if op in STARTS:
        assert bare.startswith("A ``Request``"), bare
        assert "token" not in bare, bare
        assert token.startswith("``(request, token)``. request: "), token
        assert one(bare) in one(token), (bare, token)
        assert f"``jaxmpi.notoken.{op}`` returns the request alone" in \
            one(token), token
    elif op == "wait":
        assert "None for ``isend`` and ``ibarrier``" in one(bare), bare
        assert token.startswith("``(result, token)``; a token alone where "
                                "the result is None"), token
        assert one(bare) in one(token), (bare, token)
    elif op == "waitall":
        assert token.startswith("``(results, token)``. results: "), token
        assert one(bare) in one(token), (bare, token)
    elif op in NO_RESULT:
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


def test_nonblocking_returns_are_as_documented():
    """The forms the Returns sections state, on requests that communicate
    nothing (MPI.PROC_NULL peers)."""
    x = jnp.arange(3.0)
    is_token = jaxmpi._validate.is_token
    got = {}
    req, tok = jaxmpi.irecv(x, MPI.PROC_NULL)
    got["start"] = (type(req), is_token(tok))
    y, tok = jaxmpi.wait(req, token=tok)
    got["wait"] = (np.asarray(y).tolist(), is_token(tok))
    req, tok = jaxmpi.isend(x, MPI.PROC_NULL)
    got["wait no result"] = is_token(jaxmpi.wait(req, token=tok))
    reqs = [jaxmpi.irecv(x, MPI.PROC_NULL)[0],
            jaxmpi.isend(x, MPI.PROC_NULL)[0]]
    ys, tok = jaxmpi.waitall(reqs)
    got["waitall"] = (type(ys), np.asarray(ys[0]).tolist(), ys[1],
                      is_token(tok))
    req = notoken.ineighbor_exchange([x], [x], [MPI.PROC_NULL],
                                     [MPI.PROC_NULL])
    got["notoken"] = (type(req), type(notoken.wait(req)),
                      notoken.wait(notoken.isend(x, MPI.PROC_NULL)))
    assert got == {
        "start": (jaxmpi.Request, True),
        "wait": ([0.0, 0.0, 0.0], True),
        "wait no result": True,
        "waitall": (list, [0.0, 0.0, 0.0], None, True),
        "notoken": (jaxmpi.Request, tuple, None),
    }
