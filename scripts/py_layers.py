"""Check that the Python package is built in layers: each module of
src/jaxmpi imports only modules of the lines of LAYERS below its own, at the
top of the file, so there is no import cycle. Reads every module's imports
with ast (nothing is imported) and compares them with LAYERS below
(docs/design.md, "Layers", describes the floors).

    python scripts/py_layers.py [--package DIR]

Prints each module's imports of the package; exits 1 (naming the module,
the line and what it imports) on an import of the module's own line or
above, an import cycle, a package import after the top of the file, an
import inside a function (allowed only of the standard library and of
OPTIONAL's extras, with a comment on its line or the line above that says
why), or a module missing
from LAYERS (or a name of LAYERS without its module).
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "src", "jaxmpi")
NAME = "jaxmpi"

# Bottom first: (floor, modules). A module may import any module of a lower
# line, none of its own line or above. The floors are docs/design.md's,
# split into lines (6.0 to 6.3, ...) where modules of one floor use each
# other.
LAYERS = [
    ("0", ["_version", "_jax_compat", "_dtypes", "_cache",  # facts, caches;
           "_commands", "_boot", "_docstring"]),    # the file readers' start;
                                                    # the plain-JAX route's
                                                    # boot; a start's docstring
    ("1", ["_errors", "_faults", "_runner"]),       # errors; running a target
    ("2", ["_core", "_threads"]),                   # the C core, one thread
    ("2.1", ["_recorder", "_native"]),              # flight recorder, trace;
                                                    # XLA's MPI layer attached
    ("3.0", ["_effect"]),                           # the ordered effect, mesh
    ("3.1", ["_devices"]),                          # communicators per device
    ("3.2", ["_validate"]),                         # argument checks
    ("4", ["_region", "_sharded"]),                 # jaxmpi.jit, sharded eager
    ("5", ["_eager", "_pytree"]),                   # eager calls, pytrees
    ("6.0", ["_registry"]),                         # Python's ops.h
    ("6.1", ["_requests"]),                         # Request, compose
    ("6.2", ["_primitives"]),                       # definers, wait_p, lowering
    ("6.3", ["_prims_collectives", "_prims_p2p"]),  # primitives per family
    ("7.0", ["_dispatch", "_parse"]),               # what every op uses
    ("7.1", ["_reductions", "_collectives", "_vcollectives", "_p2p",
             "_topology", "_wait"]),                # public operations
    ("8.0", ["notoken"]),                           # the one list
    ("8.1", ["__init__"]),                          # the token API
    ("8.2", ["experimental", "__main__", "mpi4jax", "distributed",
             "record", "trace"]),                   # python -m jaxmpi.*
]


# Packages of an optional extra (pyproject.toml), imported inside the
# function that needs them (with a comment), so that jaxmpi works without.
OPTIONAL = {"matplotlib": "jaxmpi[trace]: python -m jaxmpi.trace's timeline"}


def _levels(layers):
    """{module: (line index, floor)}."""
    return {m: (i, floor) for i, (floor, line) in enumerate(layers)
            for m in line}


@dataclass(frozen=True)
class Import:
    """An import of `target` (a module of the package, or another one when
    `package` is False) at `line`; `where`: "top", "later" (after the top
    of the file) or "function"; `reason`: a comment on its line or the
    line above."""

    target: str
    line: int
    where: str
    package: bool = True
    reason: bool = False


def modules(package: str) -> dict[str, str]:
    """{module name: path} of the package: ``_core`` for _core.py,
    ``__init__``, ``experimental`` for experimental/__init__.py."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel = os.path.relpath(dirpath, package)
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            if rel == ".":
                name = f[:-3]
            elif f == "__init__.py":
                name = rel.replace(os.sep, ".")
            else:
                name = rel.replace(os.sep, ".") + "." + f[:-3]
            out[name] = os.path.join(dirpath, f)
    return out


def _package_of(name: str, path: str) -> list[str]:
    """The package a module's relative imports start from, as a list of
    names below the root (the root itself: [])."""
    parts = [] if name in ("__init__", "__main__") else name.split(".")
    if os.path.basename(path) != "__init__.py" and parts:
        parts = parts[:-1]
    return parts


def _target(base: list[str], names: list[str], known) -> str:
    """The module of the package that `base` + `names` names, or the
    package's __init__ (an attribute of it, or the root)."""
    dotted = ".".join(base + names)
    if dotted in known:
        return dotted
    if not dotted:
        return "__init__"
    return dotted if dotted in known else "__init__"


def imports(name: str, path: str, known) -> list[Import]:
    """Every import of the module at `path`."""
    with open(path) as f:
        src = f.read()
    tree = ast.parse(src, path)
    lines = src.splitlines()
    top_end = None  # the line where the top of the file ends
    for node in tree.body:
        docstring = (isinstance(node, ast.Expr)
                     and isinstance(getattr(node, "value", None), ast.Constant)
                     and isinstance(node.value.value, str))
        if not (docstring or isinstance(node, (ast.Import, ast.ImportFrom))):
            top_end = node.lineno
            break
    inside = set()  # import nodes inside a function or class
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.Lambda, ast.ClassDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    inside.add(id(sub))
    base = _package_of(name, path)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if id(node) in inside:
            where = "function"
        elif top_end is not None and node.lineno > top_end:
            where = "later"
        else:
            where = "top"

        def comment(n):
            return 0 < n <= len(lines) and "#" in lines[n - 1]

        reason = comment(node.lineno) or comment(node.lineno - 1)
        targets = []
        if isinstance(node, ast.ImportFrom) and node.level:
            start = base[:len(base) - (node.level - 1)] if node.level > 1 \
                else base
            mod = node.module.split(".") if node.module else []
            if node.module:
                targets.append(_target(start, mod, known))
            else:
                targets += [_target(start, [a.name], known)
                            for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            top = node.module.split(".")
            if top[0] == NAME:
                if len(top) > 1:
                    targets.append(_target([], top[1:], known))
                else:
                    targets += [_target([], [a.name], known)
                                for a in node.names]
            else:
                out.append(Import(node.module, node.lineno, where, False,
                                  reason))
        else:
            for a in node.names:
                top = a.name.split(".")
                if top[0] == NAME:
                    targets.append(_target([], top[1:], known))
                else:
                    out.append(Import(a.name, node.lineno, where, False,
                                      reason))
        out += [Import(t, node.lineno, where, True, reason) for t in targets]
    return out


def dependencies(package: str = PACKAGE) -> dict[str, list[Import]]:
    """{module: its imports} for every module of the package."""
    known = modules(package)
    return {name: imports(name, path, known) for name, path in known.items()}


def _cycles(deps) -> list[list[str]]:
    """The import cycles among the package's modules (each once, from its
    smallest name)."""
    graph = {m: sorted({i.target for i in imps if i.package and i.target != m})
             for m, imps in deps.items()}
    found, seen = [], set()

    def visit(m, path):
        for n in graph.get(m, ()):
            if n in path:
                cycle = path[path.index(n):]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    k = cycle.index(min(cycle))
                    found.append(cycle[k:] + cycle[:k])
            elif len(path) < len(graph):
                visit(n, path + [n])

    for m in sorted(graph):
        visit(m, [m])
    return found


def violations(deps, layers=LAYERS) -> list[str]:
    level = _levels(layers)
    bad = [f"src/jaxmpi: {m} is not in LAYERS (scripts/py_layers.py)"
           for m in sorted(deps) if m not in level]
    bad += [f"src/jaxmpi: LAYERS names {m}, which is no module"
            for m in sorted(level) if m not in deps]
    for m in sorted(deps):
        for i in deps[m]:
            top = i.target.split(".")[0]
            if i.where == "function" and (i.package or not i.reason or (
                    top not in sys.stdlib_module_names
                    and top not in OPTIONAL)):
                what = i.target if not i.package else f"jaxmpi {i.target}"
                bad.append(f"{m} imports {what} inside a function (line "
                           f"{i.line}): imports go at the top of the file "
                           "(inside a function only the standard library, "
                           "with a comment that says why)")
            if not i.package:
                continue
            if i.where == "later":
                bad.append(f"{m} imports {i.target} at line {i.line}, after "
                           "the top of the file")
            if m in level and i.target in level and \
                    level[i.target][0] >= level[m][0] and i.target != m:
                bad.append(f"{m} (floor {level[m][1]}) imports {i.target} "
                           f"(floor {level[i.target][1]}) at line {i.line}")
    for cycle in _cycles(deps):
        bad.append("import cycle: " + " -> ".join(cycle + cycle[:1]))
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", default=PACKAGE,
                    help="the package's directory (default: src/jaxmpi)")
    args = ap.parse_args()
    deps = dependencies(args.package)
    level = _levels(LAYERS)
    for m in sorted(deps, key=lambda m: (level.get(m, (99,))[0], m)):
        names = sorted({i.target for i in deps[m] if i.package})
        floor = level[m][1] if m in level else "?"
        print(f"{floor} {m}: {', '.join(names) or '-'}")
    bad = violations(deps)
    for line in bad:
        print("LAYER VIOLATION:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
