"""A non-blocking start's docstring, made from its blocking form's: the
arguments and their checks are the same (one parse, _parse.py), so their
Args and Raises are written once, on the blocking form.

The start's own docstring holds its summary, Returns and Example, and the
Args or Raises entries where it differs from its blocking form (an entry
of the same parameter, or the same exception type, in its place). A
start's Raises leaves out the blocking form's ``jax.errors.JaxRuntimeError``
entries: those are errors of the communication itself, which ``wait``
raises (docs/api.md).

Standard library only, and no import of the package: the documentation
site's reader (scripts/griffe_starts.py) loads this file by its path, to
make the same docstrings from the source without importing jaxmpi.
"""

from __future__ import annotations

import inspect

SECTIONS = ("Args:", "Returns:", "Raises:", "Example:")
# Errors a start does not raise: the communication's, raised by wait.
WAIT_RAISES = ("jax.errors.JaxRuntimeError",)


def _sections(doc: str) -> tuple[str, dict]:
    """The text before the first section, and {title: [entry lines]} of a
    Google-style docstring, each section's lines dedented by one level."""
    head, out, title = [], {}, None
    for line in inspect.cleandoc(doc).splitlines():
        if line in SECTIONS:
            title = line
            out[title] = []
        elif title:
            out[title].append(line[4:] if line.startswith("    ") else line)
        else:
            head.append(line)
    return "\n".join(head).strip(), {t: _trim(lines) for t, lines in
                                     out.items()}


def _trim(lines: list) -> list:
    """`lines` without the blank lines at either end."""
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    while lines and not lines[0].strip():
        lines = lines[1:]
    return lines


def _entries(lines: list) -> dict:
    """{name: its lines} of an Args or Raises section: an entry is a line
    at the section's indentation, ``name: ...``, and the lines indented
    under it."""
    out: dict = {}
    for line in lines:
        if line.strip() and not line.startswith(" "):
            name = line.split(":", 1)[0]
            out[name] = [line]
        elif out and line.strip():
            out[name].append(line)
    return out


def _section(title: str, entries) -> list:
    return [title, *(("    " + line).rstrip() for lines in entries
                     for line in lines), ""]


def start_doc(start: str, blocking: str, params, name: str = "",
              of: str = "") -> str:
    """The docstring of a start whose own docstring is `start`, of the
    blocking form whose docstring is `blocking`; `params`: the start's
    parameter names, in order; `name` and `of`: the two functions' names,
    for the error."""
    head, own = _sections(start)
    _, twin = _sections(blocking)
    own_args, twin_args = (_entries(own.get("Args:", [])),
                           _entries(twin.get("Args:", [])))
    missing = [p for p in params if p not in own_args and p not in twin_args]
    if missing or not own.get("Returns:") or not own.get("Example:"):
        raise ValueError(
            f"{name}'s docstring needs its own Returns and Example and an "
            f"Args entry for each parameter that {of}'s has not: "
            f"missing {missing or 'Returns or Example'}")
    own_raises = _entries(own.get("Raises:", []))
    raises = {k: own_raises.get(k, lines)
              for k, lines in _entries(twin.get("Raises:", [])).items()
              if k not in WAIT_RAISES}
    raises.update(own_raises)
    out = [head, ""]
    if params:
        out += _section("Args:", [own_args.get(p) or twin_args[p]
                                  for p in params])
    out += _section("Returns:", [own["Returns:"]])
    if raises:
        out += _section("Raises:", raises.values())
    out += _section("Example:", [own["Example:"]])
    return "\n".join(out).rstrip() + "\n"
