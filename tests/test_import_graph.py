"""No import circles, counting the imports inside functions, and no function re-imports.

The graph has one node per module of ``interp/`` and an edge for every ``import`` that runs:
at the top of a module or inside a function (parsed with :mod:`ast`); the imports under
``if TYPE_CHECKING:`` never run and are left out. ``from a.b import c`` points at ``a.b.c``
when that is a module, else at ``a.b``. Importing ``a.b.c`` also runs ``a/b/__init__.py``;
that implicit edge is left out too, so a package that re-exports its modules is no circle.

A function-level import is allowed where it saves startup time (torch, pandas and the
analyses load only when a command needs them: ``tests/test_import.py``) or defers an
optional dependency, but never one that closes a circle: a circle means two modules that
cannot be read, tested or moved apart. And a function never re-imports a module the file
already imports at its top (the name belongs in that import).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "interp"

# Pending the engine branch (issue 33: scalar validators move below the memory model, and the
# engines' files are rewritten there). Strict: each entry must still hold, so whoever fixes
# one removes it here.
PENDING_CYCLES: set[frozenset[str]] = set()  # none left
PENDING_REIMPORTS = {
    "interp/engine/edges/gradients.py",
    "interp/engine/sweeps/sweep.py",
}


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, (ast.Name, ast.Attribute)) and ast.unparse(test).endswith(
        "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, in_function: bool = False):
    """``(node, in_function)`` for every import that runs (not under ``TYPE_CHECKING``)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for node in child.orelse:
                yield from _imports(ast.Module(body=[node], type_ignores=[]), in_function)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _imports(child, in_function or nested)


def _targets(module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The interp modules an import names (nearest module for ``from m import name``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_pkg else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    out = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


def import_graph() -> dict[str, dict[str, list[str]]]:
    """module -> imported module -> where (``path:line``), every import that runs."""
    graph: dict[str, dict[str, list[str]]] = {}
    for module, (path, is_pkg) in MODULES.items():
        edges = graph.setdefault(module, {})
        for node, _ in _imports(ast.parse(path.read_text())):
            for target in _targets(module, is_pkg, node):
                where = f"{path.relative_to(PKG.parent)}:{node.lineno}"
                edges.setdefault(target, []).append(where)
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _describe(component: list[str], graph: dict[str, dict[str, list[str]]]) -> str:
    inside = set(component)
    lines = [f"circle among {', '.join(component)}:"]
    for a in component:
        for b, where in sorted(graph[a].items()):
            if b in inside:
                lines.append(f"    {a} -> {b} ({', '.join(where)})")
    return "\n".join(lines)


def test_the_graph_sees_function_level_imports():
    """The graph is the one that runs: a lazy import inside a function is an edge."""
    graph = import_graph()
    # interp.models.loader imports the Hugging Face loader only inside load_model
    assert "interp.models.hf" in graph["interp.models.loader"]
    assert cycles({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}) == [
        ["a", "b", "c"]
    ]


def test_no_import_circles():
    graph = import_graph()
    new = [c for c in cycles(graph) if frozenset(c) not in PENDING_CYCLES]
    assert not new, "\n".join(_describe(c, graph) for c in new)


def test_pending_circles_still_exist():
    """Strict: a pending circle that is gone is removed from :data:`PENDING_CYCLES`."""
    found = {frozenset(c) for c in cycles(import_graph())}
    assert PENDING_CYCLES <= found, PENDING_CYCLES - found


def reimports() -> dict[str, list[str]]:
    """file -> ``line: import`` for each function-level import of a module the file's top
    already imports."""
    out: dict[str, list[str]] = {}
    for path, _ in MODULES.values():
        tree = ast.parse(path.read_text())
        top: set[str] = set()
        for node, in_function in _imports(tree):
            if not in_function:
                if isinstance(node, ast.ImportFrom):
                    top.add(("." * node.level) + (node.module or ""))
                else:
                    top.update(a.name for a in node.names)
        for node, in_function in _imports(tree):
            if not in_function:
                continue
            if isinstance(node, ast.ImportFrom):
                again = ("." * node.level) + (node.module or "") in top
            else:
                again = any(a.name in top for a in node.names)
            if again:
                rel = str(path.relative_to(PKG.parent))
                out.setdefault(rel, []).append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_function_re_imports_a_module_imported_at_the_top():
    found = {f: lines for f, lines in reimports().items() if f not in PENDING_REIMPORTS}
    assert not found, "\n".join(f"{f}:{line}" for f, lines in found.items() for line in lines)


def test_pending_re_imports_still_exist():
    """Strict: a file whose re-imports are gone is removed from :data:`PENDING_REIMPORTS`."""
    assert PENDING_REIMPORTS <= set(reimports()), PENDING_REIMPORTS - set(reimports())
