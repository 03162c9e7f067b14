"""MkDocs hooks for jaxmpi's site (mkdocs.yml): pages that live outside docs/.

benchmarks/README.md, benchmarks/RESULTS.md and their CSV files, the
measurements in benchmarks/16cores, and CHANGELOG.md, are published from where they are in the repository, not
copied into docs/. Their links, and the links of docs/*.md to them, are
written as repository paths (so that they work on a code host too); here
they become site paths. A link to a repository file the site does not
publish is left as it is, so that ``mkdocs build --strict`` reports it.
"""

from __future__ import annotations

import ast
import glob
import logging
import os
import posixpath
import re

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# repository path -> site path, for files outside docs/
EXTRA = {"CHANGELOG.md": "changelog.md"}
# (benchmarks/16cores and benchmarks/h200: the outputs of sessions on a
# 16-core machine and on an H200 GPU, as printed; benchmarks/results, a
# run's scratch output, is not published.)
for _path in sorted(glob.glob(os.path.join(ROOT, "benchmarks", "*")) +
                    glob.glob(os.path.join(ROOT, "benchmarks", "16cores", "*")) +
                    glob.glob(os.path.join(ROOT, "benchmarks", "h200", "*"))):
    _rel = os.path.relpath(_path, ROOT).replace(os.sep, "/")
    if _rel.endswith((".md", ".csv", ".png", ".txt")):
        EXTRA[_rel] = _rel
SITE_TO_REPO = {site: repo for repo, site in EXTRA.items()}



class _ComputedAll(logging.Filter):
    """jaxmpi.__all__ is computed from the list of operations, which griffe
    (reading the source, not importing it) cannot follow: it warns and keeps
    the string entries. docs/api.md names every member it documents, so the
    warning is not a gap in the site; any other warning still fails --strict."""

    def filter(self, record):
        msg = record.getMessage()
        return not ("Unsupported item in jaxmpi" in msg and "__all__" in msg)


logging.getLogger("mkdocs.plugins.griffe").addFilter(_ComputedAll())

_LINK = re.compile(r"(\]\()([^)#\s]+)((?:#[^)\s]*)?\))")


def on_files(files, config):
    for repo, site in EXTRA.items():
        files.append(File.generated(config, site, abs_src_path=os.path.join(ROOT, repo)))
    return files


def _repo_path(page_src: str) -> str:
    return SITE_TO_REPO.get(page_src, "docs/" + page_src)


def _site_path(repo_path: str):
    if repo_path in EXTRA:
        return EXTRA[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    return None


def _public_names():
    """Every public name of jaxmpi and jaxmpi.notoken, read from their
    __all__ in the source (string entries; jaxmpi's starred op list is
    notoken's, which lists every operation)."""
    names = set()
    for module in ("__init__.py", "notoken.py"):
        with open(os.path.join(ROOT, "src", "jaxmpi", module)) as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and getattr(node.targets[0], "id", None) == "__all__"
                    and isinstance(node.value, (ast.List, ast.Tuple))):
                names |= {e.value for e in node.value.elts
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    names.discard("notoken")  # the module, documented as the section itself
    return names


# A member of a ``:::`` block's members list, or an object given alone
# (``::: jaxmpi.notoken.isend``).
_MEMBER = re.compile(r"^(?:\s+- |::: jaxmpi(?:\.notoken)?\.)(\w+)\s*$", re.M)
log = logging.getLogger("mkdocs.plugins.jaxmpi")


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "api.md":
        # The reference names its members (jaxmpi's __all__ is computed, see
        # above): a public function missing from it fails --strict.
        missing = sorted(_public_names() - set(_MEMBER.findall(markdown)))
        if missing:
            log.warning("docs/api.md does not document public names: %s", ", ".join(missing))
    page_repo = _repo_path(page.file.src_uri)
    page_site = page.file.src_uri

    def fix(m):
        target = m.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return m.group(0)
        repo_target = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo), target))
        site_target = _site_path(repo_target)
        if site_target is None:
            return m.group(0)
        rel = posixpath.relpath(site_target, posixpath.dirname(page_site) or ".")
        return m.group(1) + rel + m.group(3)

    return _LINK.sub(fix, markdown)
