"""Every public function documents itself, briefly and truly: a one-line
summary, the MPI call it makes, Args with one line per parameter, Returns
in one or two lines, Raises with the function's own errors only (those
every operation shares are written once, on the API reference page), and
an Example that calls it. The token API's functions say they return
``(result, token)`` (a token alone for None) and point to jaxmpi.notoken's,
and they do; signatures show MPI's constant names, not their values. No
communication (MPI.PROC_NULL peers only): the same at any rank count."""

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
# Functions with no error of their own (only those the API reference lists
# for every operation): no Raises section.
NO_OWN_ERRORS = ("allgather", "iallgather", "barrier", "ibarrier",
                 "has_cuda_support", "get_default_comm")
# The operations: the names of notoken's list that take ``token=``.
OPERATIONS = tuple(n for n in notoken.__all__ if "token" in inspect.signature(
    getattr(notoken, n)).parameters)
# Documented once, with their sections: jaxmpi.notoken's functions and
# jaxmpi's own switches (jaxmpi.<operation> is the token API's form).
DOCUMENTED = sorted(
    {f"notoken.{n}": getattr(notoken, n) for n in notoken.__all__
     if not inspect.isclass(getattr(notoken, n))}.items()) + [
    (f"jaxmpi.{n}", getattr(jaxmpi, n))
    for n in ("set_check", "set_timeout", "get_default_comm")]
# Every parameter name of a public function: a Raises entry naming one the
# function does not take was copied from another function.
ALL_PARAMS = {p for _, fn in DOCUMENTED
              for p in inspect.signature(fn).parameters}
# Phrases of the errors every operation shares (docs/api.md): not repeated
# in a function's own Raises.
SHARED = ("is not an intracommunicator", "is not a token", "MPI's message",
          "more than one device", "a list, tuple, dict", "a rank, root or tag",
          "compiled for a GPU", "4096 requests")


def test_public_functions_listed():
    names = {n for n, _ in DOCUMENTED}
    for op in OPERATIONS:
        assert f"notoken.{op}" in names
        assert getattr(jaxmpi, op).__wrapped__ is getattr(notoken, op)
    for fn in ("has_cuda_support", "jit"):
        assert f"notoken.{fn}" in names and getattr(jaxmpi, fn) is getattr(
            notoken, fn)
    # Every operation has its token-API form; the switches are jaxmpi's.
    assert len(DOCUMENTED) == len(OPERATIONS) + 2 + 3
    assert sorted(jaxmpi.__all__) == sorted(
        [*OPERATIONS, "Request", "DeviceCart", "has_cuda_support", "jit",
         "get_default_comm", "set_check", "set_timeout",
         "MPIConfigurationError", "notoken"])
    # Request is public in both (a class: its docstring is checked below).
    assert "Request" in jaxmpi.__all__ and "Request" in notoken.__all__
    assert jaxmpi.Request is notoken.Request is _requests.Request


def sections(doc):
    """{section title: its lines} of a Google-style docstring, and the text
    before the first section."""
    out, title, head = {}, None, []
    for line in inspect.cleandoc(doc).splitlines():
        if line.strip() in SECTIONS and not line.startswith(" "):
            title = line.strip()
            out[title] = []
        elif title:
            out[title].append(line)
        else:
            head.append(line)
    return {k: textwrap.dedent("\n".join(v)).strip() for k, v in out.items()
            }, "\n".join(head).strip()


def entries(text):
    """The entries of an Args or Raises section: (first line, continuation
    lines)."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith(" "):
            out.append([line, []])
        else:
            out[-1][1].append(line)
    return out


@pytest.mark.parametrize("name,fn", DOCUMENTED, ids=[n for n, _ in DOCUMENTED])
def test_docstring_sections(name, fn):
    doc = inspect.getdoc(fn)
    assert doc, name
    short = fn.__name__
    params = list(inspect.signature(fn).parameters)
    wanted = [s for s in SECTIONS
              if (s != "Args:" or params)
              and (s != "Raises:" or short not in NO_OWN_ERRORS)]
    positions = [doc.find("\n" + s + "\n") for s in wanted]
    assert all(p > 0 for p in positions), (name, positions)
    assert positions == sorted(positions), f"{name}: sections out of order"
    sec, head = sections(doc)
    assert set(sec) == set(wanted), (name, sorted(sec))
    for s in wanted:
        assert sec[s], f"{name}: empty {s}"
    # A summary line, then a blank line.
    lines = doc.splitlines()
    assert lines[0].strip() and not lines[1].strip(), (name, lines[:2])
    if short in OPERATIONS:  # the MPI call it makes, before Args
        assert re.search(r"\bMPI_[A-Z][a-z_]+", head), (name, head)
    # Args: every parameter, in order, one line each.
    if params:
        args = entries(sec["Args:"])
        assert [a.split(":")[0] for a, _ in args] == params, name
        assert all(not more for _, more in args), (name, args)
    # Returns: one or two lines.
    assert 1 <= len(sec["Returns:"].splitlines()) <= 2, (name, sec["Returns:"])
    # Raises: the function's own errors, each exception type once, naming
    # only its own parameters.
    if "Raises:" in sec:
        raises = entries(sec["Raises:"])
        types = [r.split(":")[0] for r, _ in raises]
        assert len(types) == len(set(types)), (name, types)
        text = " ".join(" ".join([r, *more]) for r, more in raises)
        for named in re.findall(r"``(\w+)``", text):
            assert named in params or named not in ALL_PARAMS, (name, named)
        for phrase in SHARED:
            assert phrase not in " ".join(text.split()), (name, phrase)
    # The example calls the function, in a code block after a line of text
    # (the site dedents the section: code alone would read as text).
    assert re.search(rf"\b{short}\(", sec["Example:"]), name
    example = sec["Example:"].splitlines()
    assert not example[0].startswith(" ") and any(
        line.startswith("    ") for line in example), (name, example)
    assert not any(line.rstrip().endswith("::") for line in example), (
        name, "reST's '::' shows on the site")


@pytest.mark.parametrize("name,fn", DOCUMENTED, ids=[n for n, _ in DOCUMENTED])
def test_no_block_quotes(name, fn):
    """A line starting with '>' (as in "mpi4jax >= 0.8" wrapped) renders as
    a block quote on the documentation site."""
    for doc in (inspect.getdoc(fn), inspect.getdoc(jaxmpi),
                inspect.getdoc(notoken)):
        for line in doc.splitlines():
            assert not line.lstrip().startswith(">"), (name, line)


def one(text):
    return " ".join(text.split())


def test_request_documented():
    doc = inspect.getdoc(jaxmpi.Request)
    sec, _ = sections(doc)
    assert "wait(" in sec["Example:"]
    assert not sec["Example:"].startswith(" ") and "::" not in doc
    # Each misuse error the class states, with its exception.
    for words in ("TypeError", "RuntimeError", "waited twice", "compiled",
                  "next jaxmpi call"):
        assert words in one(doc), words
    assert inspect.getdoc(jaxmpi.Request.op)


def test_device_cart_documented():
    assert jaxmpi.DeviceCart is notoken.DeviceCart
    doc = inspect.getdoc(jaxmpi.DeviceCart)
    sec, _ = sections(doc)
    for s in ("Args:", "Raises:", "Example:"):
        assert sec.get(s), s
    args = entries(sec["Args:"])
    assert [a[0].split(":")[0] for a in args] == list(
        inspect.signature(jaxmpi.DeviceCart).parameters)
    assert all(not more for _, more in args)  # one line per parameter
    assert "halo_exchange" in sec["Example:"]


@pytest.mark.parametrize("op", OPERATIONS)
def test_token_api_points_to_notoken(op):
    wrapped, bare = getattr(jaxmpi, op), getattr(notoken, op)
    doc = one(inspect.getdoc(wrapped))
    assert doc.startswith(f"``jaxmpi.notoken.{op}`` with a token"), doc
    assert f"what ``jaxmpi.notoken.{op}`` returns" in doc, doc
    assert "``(result, token)``" in doc and "a token alone" in doc, doc
    assert inspect.signature(wrapped) == inspect.signature(bare)
    # The notoken function's Returns says what it returns, never a token.
    returns = sections(inspect.getdoc(bare))[0]["Returns:"]
    assert "token" not in returns, (op, returns)
    if getattr(bare, "__annotations__", {}).get("return") == "Request":
        assert returns.startswith("A ``Request``; ``wait`` on it"), returns


@pytest.mark.parametrize("name,fn", DOCUMENTED, ids=[n for n, _ in DOCUMENTED])
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


def test_returns_are_as_documented():
    """The forms the token API's docstring and the Returns sections state,
    on calls that communicate nothing (MPI.PROC_NULL peers)."""
    x = jnp.arange(3.0)
    is_token = jaxmpi._validate.is_token
    got = {}
    got["send"] = is_token(jaxmpi.send(x, MPI.PROC_NULL))
    y, tok = jaxmpi.recv(x, MPI.PROC_NULL)
    got["recv"] = (np.asarray(y).tolist(), is_token(tok))
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
                      notoken.wait(notoken.isend(x, MPI.PROC_NULL)),
                      notoken.send(x, MPI.PROC_NULL))
    assert got == {
        "send": True,
        "recv": ([0.0, 0.0, 0.0], True),
        "start": (jaxmpi.Request, True),
        "wait": ([0.0, 0.0, 0.0], True),
        "wait no result": True,
        "waitall": (list, [0.0, 0.0, 0.0], None, True),
        "notoken": (jaxmpi.Request, tuple, None, None),
    }
