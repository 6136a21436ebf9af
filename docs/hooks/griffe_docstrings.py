"""A griffe extension: the package's docstrings read as Google style, their roles as links.

Docstrings cross-reference with reStructuredText roles (:func:`interp.x.y`, :class:`~Plot`,
:mod:`.report`; ``tests/test_doctests.py`` checks that each names a real object). Markdown
has no roles: each becomes a link where its target is on a reference page (the pages of
``reference.py``), else code. Their doctests sit under "Example:", which griffe reads as an
admonition (Markdown, where ``[a]`` then ``[b]`` is a link); griffe's section for doctests
is "Examples:". A few module docstrings hold reStructuredText simple tables (``====  ====``
rules) and literal blocks (``::``); they become Markdown tables and code.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import griffe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import Page, surface  # noqa: E402  (beside this file)

EXAMPLE = re.compile(r"^Example:$", re.M)
RULE = re.compile(r"^ *=+( +=+)+ *$")
LITERAL = re.compile(r"::$", re.M)


def rst_tables(text: str) -> str:
    """Each simple table (a rule, a header line, a rule, rows, a rule) as a Markdown table:
    one row per line (a line with an empty first column is a row with an empty cell)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        rule = lines[i]
        ends = [j for j in range(i + 1, len(lines)) if lines[j] == rule]
        if not RULE.match(rule) or len(ends) < 2 or ends[0] != i + 2:
            out.append(lines[i])
            i += 1
            continue
        spans = [m.span() for m in re.finditer(r"=+", rule)]

        def cells(line: str, spans=spans) -> list[str]:
            starts = [a for a, _ in spans] + [len(line) + 1]
            return [line[starts[k] : starts[k + 1]].strip() for k in range(len(spans))]

        out.append("| " + " | ".join(cells(lines[i + 1])) + " |")
        out.append("|" + " --- |" * len(spans))
        out += ["| " + " | ".join(cells(row)) + " |" for row in lines[i + 3 : ends[1]]]
        i = ends[1] + 1
    return "\n".join(out)


ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj):`(~?)([^`<>]+)`")


def _final(obj: griffe.Object | None) -> griffe.Object | None:
    try:
        return obj.final_target if obj is not None and obj.is_alias else obj
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _member(obj: griffe.Object, name: str) -> griffe.Object | None:
    if name in obj.members:
        return _final(obj.members[name])
    lazy = obj.members.get("_EXPORTS") if obj.is_module else None
    if lazy is not None:
        module = ast.literal_eval(str(lazy.value)).get(name)
        if module is not None:
            return _locate(obj.package, f"{module}.{name}")
    return None


def _locate(pkg: griffe.Object, path: str) -> griffe.Object | None:
    """The object at an absolute dotted path (through aliases and lazy exports)."""
    parts = path.split(".")
    if parts[0] != pkg.name:
        return None
    obj: griffe.Object | None = pkg
    for part in parts[1:]:
        obj = _member(obj, part) if obj is not None else None
    return obj


def _lookup(scope: griffe.Object, target: str) -> griffe.Object | None:
    """A role's target: absolute, relative to the module (``.x``), or in scope."""
    if target.startswith("."):
        module = scope.module  # ``.x`` in a package's ``__init__`` is its own submodule
        base = module if module.is_init_module or module.parent is None else module.parent
        return _locate(scope.package, f"{base.path}{target}")
    found = _locate(scope.package, target)
    if found is not None:
        return found
    head, *rest = target.split(".")
    here: griffe.Object | None = scope
    while here is not None:
        obj = _member(here, head)
        if obj is not None:
            for part in rest:
                obj = _member(obj, part) if obj is not None else None
            return obj
        here = here.parent
    return None


def rendered_paths(pages: list[Page]) -> set[str]:
    """The paths that have an anchor on a reference page: modules, objects, class members."""
    paths: set[str] = set()
    for page in pages:
        for module, objects in page.modules.items():
            paths.add(module)
            for obj in objects:
                paths.add(obj.path)
                if obj.is_class:
                    paths.update(
                        m.path
                        for n, m in obj.members.items()
                        if not n.startswith("_") and not m.is_alias and m.docstring is not None
                    )
    return paths


def _objects(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class Docstrings(griffe.Extension):
    """Rewrite every docstring's roles and example heading once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.name != "interp":
            return
        linked = rendered_paths(surface(pkg))
        for obj in _objects(pkg):
            if obj.docstring is not None:
                text = EXAMPLE.sub("Examples:", obj.docstring.value)
                obj.docstring.value = LITERAL.sub(":", rst_tables(text))

                def link(match: re.Match, scope=obj) -> str:
                    short, target = match.group(1), match.group(2).strip()
                    shown = target.lstrip(".").split(".")[-1] if short else target.lstrip(".")
                    found = _lookup(scope, target.removesuffix("()"))
                    if found is not None and found.path in linked:
                        return f"[`{shown}`][{found.path}]"
                    return f"`{shown}`"

                obj.docstring.value = ROLE.sub(link, obj.docstring.value)
