"""Griffe extension of the documentation site (mkdocs.yml): each
non-blocking start's docstring as ``help()`` shows it.

A start (``@_dispatch.start(foo, ...)`` above ``ifoo``) writes only its
summary, Returns, Example and the Args and Raises entries where it differs
from ``foo``; at import, ``_dispatch.start`` makes the whole docstring with
``jaxmpi._docstring.start_doc``. The site reads the source without
importing jaxmpi, so here the same function, loaded by its file's path
(standard library only), makes the same docstring from the source.
"""

from __future__ import annotations

import importlib.util
import os

import griffe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "_jaxmpi_docstring", os.path.join(ROOT, "src", "jaxmpi", "_docstring.py"))
_docstring = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_docstring)


def _blocking_form(func):
    """The name of the blocking form of a start, or None: the first
    argument of its ``_dispatch.start(...)`` decorator."""
    for dec in func.decorators:
        value = dec.value
        if (isinstance(value, griffe.ExprCall)
                and str(value.function).endswith("_dispatch.start")
                and value.arguments):
            return str(value.arguments[0])
    return None


class StartDocstrings(griffe.Extension):
    """Make every start's docstring once the package is loaded."""

    def __init__(self):
        super().__init__()
        self._done = set()

    def _make(self, pkg):
        if pkg.path != "jaxmpi":
            return
        for module in pkg.modules.values():
            for func in module.functions.values():
                of = _blocking_form(func)
                if of is None or func.path in self._done:
                    continue
                blocking = module.members[of]
                func.docstring.value = _docstring.start_doc(
                    func.docstring.value, blocking.docstring.value,
                    [p.name for p in func.parameters], func.name, of)
                self._done.add(func.path)
        if not self._done:  # the decorator changed: the site would lack
            # the starts' Args and Raises
            raise RuntimeError("griffe_starts: no @_dispatch.start(foo, ...) "
                               "found in jaxmpi")

    def on_package(self, *, pkg, **kwargs):  # griffe >= 1.14
        self._make(pkg)

    def on_package_loaded(self, *, pkg, **kwargs):  # older griffe
        self._make(pkg)
