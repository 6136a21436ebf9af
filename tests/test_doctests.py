"""The examples in the docstrings run, and print what they say (as einops checks its own)."""

import doctest
import importlib
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "interp"
MODULES = sorted(
    ".".join(p.relative_to(PKG.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in PKG.rglob("*.py")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_examples_are_not_skipped():
    skipped = [
        f"{p.relative_to(PKG.parent)}:{i}"
        for p in PKG.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "doctest: +SKIP" in line
    ]
    assert skipped == []


def test_cross_references_name_what_exists():
    """Every ``:func:`interp.x.y``` (and :mod:, :class:, :data:) in a docstring, the README or
    a page of the site names something importable: a function that moved leaves no stale
    pointer."""
    import re

    pattern = re.compile(r":(?:func|mod|class|data|meth|attr):`(interp\.[A-Za-z0-9_.]+)`")
    pages = [PKG.parent / "README.md", *sorted((PKG.parent / "docs").rglob("*.md"))]
    texts = [p.read_text() for p in [*PKG.rglob("*.py"), *pages]]
    refs = sorted({r for t in texts for r in pattern.findall(t)})
    assert refs
    missing = []
    for ref in refs:
        parts = ref.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(ref)
            break
        else:
            missing.append(ref)
    assert missing == []
