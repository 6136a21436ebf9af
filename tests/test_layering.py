"""Dependencies point one way, and no module reaches into another package's private parts.

Layers, lowest first: core errors / paths / glossary / shapes and the outputs' files /
tables, then core hooks / head_checks / protocol / memory / precision / checks / metrics and
the outputs' frames, then models, then the runtime (the one place that knows model kinds),
then the engine (its shared core, the sweep engine, the edge engine), then analysis /
datasets, then training / the outputs' render and figures / experiments, then the CLI.
Every ``import`` in the package (module-level or inside a function) is parsed; one that
points upward fails, as does importing a private module (``_x``) from another package or a
private name from another module.
"""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "interp"

LAYERS = [
    (
        "interp",
        "interp.core",
        "interp.outputs",
        "interp.core.errors",
        "interp.core.paths",
        "interp.core.glossary",
        "interp.core.shapes",
        "interp.core.validate",
        "interp.core.moved",
        "interp.core.moved_paths",
        "interp.outputs.files",
        "interp.outputs.tables",
    ),
    (
        "interp.core.hooks",
        "interp.core.protocol",
        "interp.core.memory",
        "interp.core.precision",
        "interp.core.checks",
        "interp.core.head_checks",
        "interp.core.metrics",
        "interp.outputs.frames",
    ),
    ("interp.models",),
    ("interp.runtime",),
    # the engine: its shared core (the runner, interp.engine.runner; chunks; batching), the
    # sweep engine, the edge engine
    (
        "interp.engine",
        "interp.engine.runner",
        "interp.engine.ranks",
        "interp.engine.agreement",
        "interp.engine.chunks",
        "interp.engine.footprints",  # the runner's memory model (issue 44)
        "interp.engine.runs",  # the runs every engine checks alike (issue 44)
        "interp.engine.sweeps.cost",  # the sweep engine's
        "interp.engine.edges.cost",  # the edge engine's
    ),
    ("interp.analysis", "interp.analysis.generation", "interp.datasets", "interp.dictionaries"),
    (
        "interp.training",
        "interp.outputs.render",
        "interp.outputs.figures",
        "interp.outputs.pages",
        "interp.experiments",
    ),
    ("interp.cli", "interp.__main__"),  # python -m interp (and torchrun -m interp): the CLI
]


def layer_of(module: str) -> int:
    best, depth = None, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > depth:
                best, depth = i, len(p)
    assert best is not None, module
    return best


def modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        yield name, path


def imports(path: Path, module: str):
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:
                yield base, a.name, node.lineno


def _package(module: str, is_pkg: bool) -> str:
    return module if is_pkg else module.rsplit(".", 1)[0]


def test_imports_point_down_and_respect_privacy():
    problems = []
    for module, path in modules():
        mine = layer_of(module)
        my_pkg = _package(module, path.name == "__init__.py")
        for target, name, line in imports(path, module):
            if not target.startswith("interp"):
                continue
            where = f"{path.relative_to(PKG.parent)}:{line}"
            if layer_of(target) > mine:
                problems.append(
                    f"{where}: {module} (layer {mine}) imports {target} (layer {layer_of(target)})"
                )
            parts = target.split(".")
            private = [i for i, p in enumerate(parts) if p.startswith("_") and p != "__init__"]
            if private and ".".join(parts[: private[0]]) != my_pkg:
                problems.append(f"{where}: {module} imports private module {target}")
            if name and name.startswith("_") and name != "__version__":
                full = f"{target}.{name}"
                is_module = (PKG.parent / Path(*full.split("."))).with_suffix(".py").exists()
                if not is_module and target != module:
                    problems.append(f"{where}: {module} imports private name {name} from {target}")
                elif is_module and target != my_pkg:
                    problems.append(f"{where}: {module} imports private module {full}")
    assert not problems, "\n".join(problems)


def test_every_module_is_in_a_layer():
    for module, _ in modules():
        layer_of(module)


def test_every_package_folder_is_a_regular_package():
    """setuptools' find_packages skips folders without __init__.py: a wheel would lack them."""
    root = Path(__file__).resolve().parents[1] / "interp"
    bare = [
        str(d.relative_to(root.parent))
        for d in [root, *root.rglob("*")]
        if d.is_dir()
        and d.name != "__pycache__"
        and any(d.glob("*.py"))
        and not (d / "__init__.py").is_file()
    ]
    assert bare == []


def test_only_the_runtime_touches_the_model():
    """docs/layout.md: an analysis calls the engine, the engine asks the model's runtime, and
    only the runtime runs the model: no call of ``run_with_hooks`` / ``run_with_cache`` /
    ``forward_from`` or of ``model(...)`` in the analyses, the dictionaries or the engine."""
    calls = []
    for sub in ("analysis", "dictionaries", "engine"):
        for path in sorted((PKG / sub).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                direct = isinstance(f, ast.Name) and f.id == "model"
                method = isinstance(f, ast.Attribute) and f.attr in (
                    "run_with_hooks", "run_with_cache", "forward_from"
                )  # fmt: skip
                if direct or method:
                    calls.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    assert not calls, calls
