"""Every public callable has a Google-style docstring a reference can be generated from.

For each public function, class and public method of the user-facing modules
(``interp.analysis``, ``interp.core.metrics``, ``interp.models``, ``interp.datasets``,
``interp.dictionaries``, the exporters, ``interp.outputs.render``, ``interp.outputs.figures``,
``interp.training.induction``):

* a one-line summary, then a blank line;
* ``Args:`` naming every parameter of its signature (``*args`` / ``**kwargs`` as such) and
  nothing else; a class names its constructor's under ``Args:`` or ``Attributes:``;
* ``Returns:`` (or ``Yields:``) unless it returns ``None``;
* ``Raises:`` naming every exception its own code raises (helpers' raises are the
  docstring's to add; this checks the ones that can be read off the source);
* a parameter named after a glossary word (:mod:`interp.core.glossary`) is explained in the
  glossary's own words: its ``Args:`` entry quotes :data:`WORDING`, each a phrase of the
  glossary's meaning of the word, so one word reads the same in every ``help()``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re

import pytest

from interp.core.glossary import GLOSSARY

# The modules and names whose docstrings make the API reference.
MODULES = {
    "interp": ["export", "read_table"],
    "interp.analysis": None,  # its __all__
    "interp.core.metrics": ["loss_metric", "logit_diff_metric", "Metric"],
    "interp.models": [
        "load_model",
        "list_models",
        "load_induction_model",
        "load_checkpoint",
        "save_checkpoint",
        "toy_model",
        "attention",
        "AttnOnlyConfig",
        "AttnOnlyTransformer",
        "OneHeadSense",
    ],
    "interp.datasets": None,
    "interp.dictionaries": None,
    "interp.outputs.tables": ["export", "read_table"],
    "interp.outputs.render": ["circuitsvis_bundle", "Report"],
    "interp.outputs.figures": None,
    "interp.training.induction": [
        "InductionTrainConfig",
        "TrainResult",
        "head_norm_penalty",
        "held_out_batch",
        "evaluate",
        "train_induction",
        "deterministic_algorithms",
        "save_result",
    ],
}

# Phrases of the glossary: a parameter of this name is explained with this phrase (compared
# case-insensitively, whitespace collapsed). Each is checked to be the glossary's own words.
WORDING = {
    "model": "a hooked model",
    "tokens": "integer ids",
    "corrupted_tokens": "the other prompt of a patching pair",
    "reference_tokens": "the sequences a mean or resample ablation draws from",
    "heads": "``None`` is every head",
    "layer": "a block index",
    "head": "a head index",
    "loss_mask": "``[batch, pos]`` bool: which positions count",
    "positions": "where an intervention *edits*",
    "at": "where logits are *read*",
    "answer": "token(s) a metric, DLA or lens follows",
    "wrong": "token(s) a metric, DLA or lens follows",
    "ablation": "what replaces an activation",
    "method": "how a number is computed",
    "direction": "which run a patch edits",
    "metric": "``metric(logits, tokens) -> scalar``",
    "cache": "it is read only after its earliest token-dependent activation is recomputed",
    "seed": "the same seed gives the same numbers",
    "batch_size": "how many edits share a forward pass",
    "memory_budget": "the bytes an analysis may hold beyond the model's weights",
    "estimate": "return an ``Estimate``",
    "progress": "show a progress bar",
    "component": "a named part of the model",
    "by": "what a table's row is",
    "offset": "how many positions a key is behind its query",
    "max_offset": "the largest ``offset`` a positional kernel reports",
    "distribution": "the tokens a weight-based kernel averages over",
    "query_positions": "positions of a head's scores",
    "key_positions": "the attended positions",
    "contrast": "two key positions ``(a, b)``",
    "convention": "how a stripe becomes a score",
}
# Parameters that carry a glossary word with another meaning (named so, not hidden; a
# rename is an API change for another branch): (callable, parameter).
OTHER_MEANING = {
    ("interp.analysis.subspaces", "convention"),  # 'column' or 'row': how a matrix maps
    ("interp.analysis.null_space_dimension", "convention"),
    ("interp.models.OneHeadSense.encode", "tokens"),  # words, not ids
    ("interp.training.induction.InductionTrainConfig", "batch_size"),  # sequences per training step
    ("interp.dictionaries.train_dictionary", "batch_size"),  # positions per optimiser step
    ("interp.dictionaries.train_transcoder", "batch_size"),  # positions per optimiser step
    ("interp.outputs.figures.dla_heatmap", "heads"),  # a [layer, head] grid of values
    ("interp.outputs.render.Report.attention", "tokens"),  # token strings, one per position
}
SECTIONS = ("Args", "Attributes", "Returns", "Yields", "Raises", "Example", "Examples", "Note")


def _is_partial(obj: object) -> bool:
    return isinstance(obj, functools.partial)


def _public(module: str, names: list[str] | None) -> dict[str, object]:
    mod = importlib.import_module(module)
    names = list(mod.__all__) if names is None else names
    out = {}
    for name in names:
        obj = getattr(mod, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj) or _is_partial(obj)):
            continue  # constants: AMBIGUOUS_WORDS, PALETTE, ...
        out[f"{module}.{name}"] = obj
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if inspect.isfunction(value):
                    out[f"{module}.{name}.{attr}"] = value
    return out


CALLABLES = {k: v for m, names in MODULES.items() for k, v in _public(m, names).items()}


def _sections(doc: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in doc.splitlines():
        if line.endswith(":") and line[:-1] in SECTIONS:
            current = line[:-1]
            out[current] = []
        elif current is not None:
            if line and not line.startswith(" "):
                current = None
            else:
                out[current].append(line)
    return out


def _entries(lines: list[str]) -> dict[str, str]:
    """``name: text`` entries of an Args-like section, each entry's lines joined."""
    out: dict[str, str] = {}
    name = None
    for line in lines:
        m = re.match(r"^    (\*{0,2}\w+)(?: \([^)]*\))?: ?(.*)$", line)
        if m:
            name = m.group(1)
            out[name] = m.group(2)
        elif name is not None and line.strip():
            out[name] += " " + line.strip()
    return out


def _parameters(obj: object) -> list[str]:
    sig = inspect.signature(obj)
    names = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        names.append(prefix + p.name)
    return names


def _source_of(obj: object) -> list[ast.AST]:
    """The syntax trees of the code that runs when ``obj`` is called."""
    if isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.isclass(obj):
        own = [vars(obj)[n] for n in ("__init__", "__post_init__") if n in vars(obj)]
        return [t for f in own for t in _source_of(f)]
    obj = inspect.unwrap(obj)
    try:
        tree = ast.parse(inspect.getsource(inspect.getmodule(obj)))
    except (OSError, TypeError):  # made at runtime (a dataclass's __init__): no source
        return []
    first = obj.__code__.co_firstlineno  # the first decorator's line, if it has any
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name == obj.__name__
        and min([node.lineno] + [d.lineno for d in node.decorator_list]) == first
    ]


def _raised(obj: object) -> set[str]:
    names = set()
    for tree in _source_of(obj):
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                # a class; ``raise _bad(...)`` calls a helper that builds one (its docstring
                # names what it builds)
                if isinstance(exc, ast.Name) and exc.id.lstrip("_")[:1].isupper():
                    names.add(exc.id)
    return names


def _returns_nothing(obj: object) -> bool:
    if inspect.isclass(obj):
        return True
    base = obj.func if isinstance(obj, functools.partial) else obj
    annotation = inspect.signature(base).return_annotation
    return annotation in (None, "None")


def _normal(text: str) -> str:
    return " ".join(text.split()).lower()


def _problems(name: str, obj: object) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    lines = doc.splitlines()
    if not lines or not lines[0].strip():
        return ["no docstring"]
    problems = []
    if len(lines) > 1 and lines[1].strip():
        problems.append("the summary is more than one line")
    sections = _sections(doc)
    params = _parameters(obj)
    args = _entries(sections.get("Args", []))
    if inspect.isclass(obj):
        documented = {**_entries(sections.get("Attributes", [])), **args}
    else:
        documented = args
        extra = sorted(set(args) - set(params))
        if extra:
            problems.append(f"Args: names no parameter {extra}")
    missing = [p for p in params if p not in documented]
    if missing:
        problems.append(f"Args: misses {missing}")
    if not _returns_nothing(obj) and not ({"Returns", "Yields"} & set(sections)):
        problems.append("no Returns:")
    raised = sorted(_raised(obj) - set(_entries(sections.get("Raises", []))))
    if raised:
        problems.append(f"Raises: misses {raised}")
    for p in params:
        phrase = WORDING.get(p)
        if phrase and p in documented and (name, p) not in OTHER_MEANING:
            if _normal(phrase) not in _normal(documented[p]):
                problems.append(f"{p}: not in the glossary's words ({phrase!r})")
    return problems


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_docstring_has_args_returns_raises(name):
    problems = _problems(name, CALLABLES[name])
    assert not problems, f"{name}: " + "; ".join(problems)


def test_the_lists_name_what_exists():
    """The other-meaning list names real callables, and every phrase of WORDING is the
    glossary's own (so the docstrings quote the one source)."""
    assert {c for c, _ in OTHER_MEANING} <= set(CALLABLES)
    meanings = {w.strip(): m for key, m in GLOSSARY.items() for w in key.split(",")}
    for word, phrase in WORDING.items():
        assert _normal(phrase) in _normal(meanings[word]), (word, phrase)


def test_help_of_every_public_analysis_shows_args():
    """``help()`` renders the docstring, partials included (the one-stripe scores)."""
    import pydoc

    import interp.analysis as A

    for name in A.__all__:
        obj = getattr(A, name)
        if not callable(obj):
            continue
        text = pydoc.render_doc(obj, renderer=pydoc.plaintext)
        if inspect.isclass(obj):  # a result type: its fields under Attributes
            assert "Args:" in text or "Attributes:" in text, name
        elif _parameters(obj):
            assert "Args:" in text, name
