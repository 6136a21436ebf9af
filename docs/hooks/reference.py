"""The API reference, generated at build time from the package's public exports.

What is public is said in one place, :data:`PACKAGES`: each package's ``__all__``, or its
lazy ``_EXPORTS`` table (``interp.analysis``, ``interp.models``), or else its public
functions and classes. Every public name is rendered (by mkdocstrings) from the module that
*defines* it, found by griffe's static analysis, without importing the package. So moving a
function to another module, or adding one to an ``_EXPORTS`` table, changes the reference
with no edit here. ``interp.analysis`` is split into one page per subpackage (heads,
components, circuits, senses); names it re-exports from elsewhere (``interp.core.metrics``) get
a page named after their module. Pages link to the reference by public name
(``[`head_scores`][]``), never by the module that defines it today; ``griffe_docstrings.py``
turns the docstrings' own cross-references into links to these pages.
"""

from __future__ import annotations

import ast
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import griffe
from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.reference")

ROOT = Path(__file__).resolve().parents[2]

# The public surface: the packages whose exports the reference lists, in page order.
PACKAGES = (
    "interp.analysis",
    "interp.models",
    "interp.datasets",
    "interp.dictionaries",
    "interp",
    "interp.outputs.figures",
    "interp.experiments",
    "interp.runtime",
)
SPLIT = "interp.analysis"  # one page per subpackage of this package

# Page titles and one-line introductions; a page without an entry is titled by its key.
PAGES = {
    "heads": (
        "Heads",
        "Scores from attention patterns, weight circuits, why a head attends, "
        "and the atlas (`interp.analysis`).",
    ),
    "components": (
        "Components",
        "Ablation, patching, attribution, direct logit attribution "
        "and the logit lens, on the exact engine (`interp.analysis`).",
    ),
    "circuits": (
        "Circuits",
        "The graph of edges, path patching, edge attribution, circuit "
        "evaluation and search (`interp.analysis`).",
    ),
    "senses": (
        "Word senses",
        "The word-sense analyses of the bank-sense and pretrained labs (`interp.analysis`).",
    ),
    "generation": (
        "Generation",
        "What the model writes, under interventions: generate, compare_generations and "
        "the edits they apply (`interp.analysis`).",
    ),
    "graph": (
        "The edge graph",
        "Senders, receivers and the edges between them, the edge engine's "
        "(`interp.analysis` re-exports `build_graph`).",
    ),
    "metrics": (
        "Metrics",
        "What an analysis measures: the metrics every analysis takes "
        "(`interp.analysis` re-exports them).",
    ),
    "models": (
        "Models",
        "Loading models: aliases, checkpoints and Hugging Face folders (`interp.models`).",
    ),
    "datasets": (
        "Datasets",
        "Repeated-token probes, ambiguous-word sentences and name-mover "
        "prompts (`interp.datasets`).",
    ),
    "dictionaries": (
        "Dictionaries",
        "Sparse dictionaries: sae-lens and Gemma Scope files, splicing one into a model, "
        "training and scoring one (`interp.dictionaries`).",
    ),
    "interp": (
        "Tables and errors",
        "The top level: writing and reading tables, and the "
        "errors every bad input raises (`interp`).",
    ),
    "figures": ("Figures", "Deterministic inline-SVG figures (`interp.outputs.figures`)."),
    "labs": ("Labs", "Running a lab and where it writes (`interp.experiments`)."),
    "runtime": (
        "Runtime",
        "One runtime per model kind, the only code that knows model kinds; "
        "add a kind with `register` (`interp.runtime`).",
    ),
}
NAV_ENTRY = "reference/index.md"  # the nav item this hook expands into the reference section


@dataclass
class Page:
    key: str
    modules: dict[str, list[griffe.Object]] = field(default_factory=dict)  # module -> objects
    public: dict[str, str] = field(default_factory=dict)  # public path -> defining path

    @property
    def title(self) -> str:
        return PAGES.get(self.key, (self.key.capitalize(), ""))[0]

    @property
    def uri(self) -> str:
        return f"reference/{self.key}.md"


def _public_names(mod: griffe.Module) -> list[tuple[str, str]]:
    """``(name, defining module)`` for every public name of a package, in its own order."""
    lazy = mod.members.get("_EXPORTS")
    if lazy is not None:
        table = ast.literal_eval(str(lazy.value))
        return [(name, module) for name, module in table.items()]
    if mod.exports is not None:
        names = [str(n) for n in mod.exports if not str(n).startswith("__")]
    else:
        names = [
            n
            for n, m in mod.members.items()
            if not n.startswith("_") and not m.is_alias and (m.is_function or m.is_class)
        ]
    return [(n, mod.path) for n in names]


def _resolve(pkg: griffe.Module, name: str, module: str) -> griffe.Object:
    obj = pkg[f"{module}.{name}".removeprefix("interp.").removeprefix("interp")]
    return obj.final_target if obj.is_alias else obj


def surface(pkg: griffe.Module | None = None) -> list[Page]:
    """Every reference page, with the objects it renders grouped by defining module."""
    if pkg is None:
        pkg = griffe.load("interp", search_paths=[str(ROOT)], resolve_aliases=False)
    pages: dict[str, Page] = {}
    seen: set[str] = set()
    for package in PACKAGES:
        mod = pkg if package == "interp" else pkg[package.removeprefix("interp.")]
        for name, module in _public_names(mod):
            obj = _resolve(pkg, name, module)
            if obj.path in seen:  # exported twice: rendered once, where first listed
                continue
            seen.add(obj.path)
            defining = obj.parent.path
            if package == SPLIT:
                rest = defining.removeprefix(SPLIT + ".")
                key = rest.split(".")[0] if rest != defining else defining.split(".")[-1]
            else:
                key = package.split(".")[-1]
            page = pages.setdefault(key, Page(key))
            page.modules.setdefault(defining, []).append(obj)
            page.public[f"{package}.{name}"] = obj.path
    for page in pages.values():
        for objects in page.modules.values():
            objects.sort(key=lambda o: o.lineno or 0)
    order = list(PAGES)
    return sorted(pages.values(), key=lambda p: order.index(p.key) if p.key in order else 99)


def _page_markdown(page: Page) -> str:
    intro = PAGES.get(page.key, ("", ""))[1]
    lines = [f"# {page.title}", "", intro, ""]
    for module, objects in page.modules.items():
        lines += [f"::: {module}", "    options:", "      members: false"]
        lines += ["      heading_level: 2", "      show_root_full_path: true"]
        lines += [""]
        for obj in objects:
            lines += [f"::: {obj.path}", "    options:", "      heading_level: 3", ""]
    return "\n".join(lines)


def _index_markdown(pages: list[Page]) -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings of every public name (each package's `__all__` or",
        "its lazy exports), rendered from the module that defines it. Functions take",
        "`model` first, then their data, then keyword-only options ([vocabulary]"
        "(../vocabulary.md)); tables follow `interp.outputs.frames.SCHEMA`.",
        "",
        "| page | names |",
        "| --- | --- |",
    ]
    for page in pages:
        names = ", ".join(
            f"[`{o.name}`][{o.path}]" for objects in page.modules.values() for o in objects
        )
        lines.append(f"| [{page.title}]({page.key}.md) | {names} |")
    return "\n".join(lines) + "\n"


_PAGES: list[Page] = []
_LINKS: dict[str, str] = {}  # a public name, short or dotted -> the path it is rendered at
LINK = re.compile(r"\[`([A-Za-z_][\w.]*)`\]\[\]")


def link_targets(pages: list[Page]) -> dict[str, str]:
    """``head_scores``, ``interp.analysis.head_scores`` -> where it is rendered; a short name
    two packages export is left out (write it dotted)."""
    targets: dict[str, str] = {}
    short: dict[str, set[str]] = {}
    for page in pages:
        for public, path in page.public.items():
            targets[public] = targets[path] = path
            short.setdefault(public.rsplit(".", 1)[-1], set()).add(path)
    targets.update({name: paths.pop() for name, paths in short.items() if len(paths) == 1})
    return targets


def on_config(config):
    """Compute the surface once; expand the reference's nav entry into one item per page."""
    _PAGES[:] = surface()
    _LINKS.clear()
    _LINKS.update(link_targets(_PAGES))
    section = [NAV_ENTRY] + [{p.title: p.uri} for p in _PAGES]

    def expand(items):
        for i, item in enumerate(items):
            if isinstance(item, dict):
                for title, value in item.items():
                    if value == NAV_ENTRY:
                        item[title] = section
                    elif isinstance(value, list):
                        expand(value)
            elif item == NAV_ENTRY:
                items[i] = {"Reference": section}

    expand(config["nav"] or [])
    return config


def on_page_markdown(markdown, page, config, files):
    """``[`head_scores`][]`` on any page links to the reference, wherever the function is
    defined: pages name public functions, never the modules that hold them today."""

    def link(match: re.Match) -> str:
        name = match.group(1)
        if name not in _LINKS:
            log.warning("%s: [`%s`][] names no public object", page.file.src_uri, name)
            return match.group(0)
        return f"[`{name.rsplit('.', 1)[-1]}`][{_LINKS[name]}]"

    return LINK.sub(link, markdown)


def on_files(files, config):
    """Add the generated reference pages to the site."""
    files.append(File.generated(config, NAV_ENTRY, content=_index_markdown(_PAGES)))
    for page in _PAGES:
        files.append(File.generated(config, page.uri, content=_page_markdown(page)))
    return files
