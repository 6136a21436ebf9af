"""Old import paths: each module that moved still imports, warns, and names its new place.

The house was rearranged (``interp.errors`` became :mod:`interp.core.errors`, the labs'
code moved from ``interp.labs`` to :mod:`interp.experiments`, ...). Code and notebooks
written against an old path keep working: :func:`install` (called by ``import interp``)
adds one finder to :data:`sys.meta_path` that answers only for the old names in
:data:`MOVED`, so it never shadows a module that exists. Importing an old path gives a
module that reads every name from the new place and warns once with a
:class:`DeprecationWarning` naming it; a name that moved elsewhere, or was renamed, is
looked up where it lives now. A module that was withdrawn raises an ``ImportError``
saying so.

Example:
    >>> import sys, warnings
    >>> import interp
    >>> _ = sys.modules.pop("interp.errors", None)  # its first import in this process warns
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     from interp.errors import InterpError
    >>> InterpError is interp.InterpError
    True
    >>> "interp.core.errors" in str(caught[0].message)
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

from interp.core.moved_paths import MOVED

#: old module -> why it cannot be imported any more, and what to use instead.
WITHDRAWN: dict[str, str] = {}  # (interp.experiments.induction.features is on main again)

#: (module, old name) -> "module:new_name", for names renamed inside modules that still exist.
RENAMED: dict[tuple[str, str], str] = {
    ("interp.analysis", "circuit_graph"): "interp.analysis:build_graph",
    ("interp.analysis.circuits.circuit", "circuit_graph"): "interp.engine.edges.graph:build_graph",
    ("interp.analysis.circuits.prompts", "Task"): "interp.analysis.circuits.prompts:CircuitPrompts",
    ("interp.experiments.circuits", "Task"): "interp.analysis.circuits.prompts:CircuitPrompts",
    ("interp.models.loader", "resolve_model"): "interp.models.loader:load_model",
    # issue 44: `plan` has one meaning (the chunks of a run, interp.engine.chunks.plan)
    ("interp.analysis.components.ablation", "sweep_plan"): (
        "interp.analysis.components.ablation:head_sweep_outline"
    ),
    ("interp.engine.sweeps.sweep", "plan"): "interp.engine.sweeps.sweep:sweep_outline",
    ("interp.engine.sweeps.sweep", "copy_bytes"): "interp.engine.sweeps.cost:sweep_copy_bytes",
    # issue 44: Footprint is built only in the engines' cost modules
    ("interp.engine.sweeps.sweep", "footprint"): "interp.engine.sweeps.cost:sweep_footprint",
    ("interp.analysis.heads.atlas.probe", "footprint"): "interp.engine.footprints:atlas_footprint",
    ("interp.analysis.heads.qk.attribution", "footprint"): "interp.engine.footprints:qk_footprint",
    ("interp.analysis.generation.generating", "footprint"): (
        "interp.engine.footprints:generation_footprint"
    ),
    ("interp.engine.sweeps.sweep", "edits_per_pass"): "interp.engine.sweeps.sweep:sweep_copies",
    ("interp.engine.edges.task", "check"): "interp.engine.edges.task:check_edge_task",
    ("interp.engine.edges.task", "begin"): "interp.engine.edges.task:begin_edge_task",
    # issue 44: the edge engine's cost model in one module, one pass and its check in another
    ("interp.engine.edges.task", "edge_footprint"): "interp.engine.edges.cost:edge_footprint",
    ("interp.engine.edges.task", "eap_bytes"): "interp.engine.edges.cost:eap_bytes",
    ("interp.engine.edges.passes", "copy_bytes"): "interp.engine.edges.cost:copy_bytes",
    ("interp.engine.edges.passes", "pass_shape"): "interp.engine.edges.cost:pass_shape",
    ("interp.engine.edges.passes", "patch_cost"): "interp.engine.edges.cost:patch_cost",
    ("interp.engine.edges.passes", "layer_parts"): "interp.engine.edges.run:layer_parts",
    ("interp.engine.edges.passes", "sender_outputs"): "interp.engine.edges.run:sender_outputs",
    ("interp.engine.edges.passes", "check_filled"): "interp.engine.edges.run:check_filled",
    ("interp.engine.edges.passes", "input_hooks"): "interp.engine.edges.run:input_hooks",
    ("interp.engine.edges.passes", "check_exact"): "interp.engine.edges.run:check_exact",
}


def _resolve(target: str) -> Any:
    module, _, name = target.partition(":")
    return (
        getattr(importlib.import_module(module), name) if name else importlib.import_module(module)
    )


def renamed(module: str, name: str) -> Any:
    """The object an old name in a module that still exists stands for, with a warning.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     renamed("interp.analysis", "circuit_graph").__name__
        'build_graph'

    Args:
        module: The module the old name was read from (its ``__name__``).
        name: The old name.

    Returns:
        The object under its new name.

    Raises:
        AttributeError: when ``name`` was never a name of ``module`` (the usual message).
    """
    target = RENAMED.get((module, name))  # (stacklevel 3: this, the module's __getattr__, caller)
    if target is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    if (module, name) not in _WARNED:  # `from m import x` reads the name twice: warn once
        _WARNED.add((module, name))
        new = target.replace(":", ".")
        warnings.warn(f"{module}.{name} was renamed: use {new}", DeprecationWarning, stacklevel=3)
    return _resolve(target)


_WARNED: set[tuple[str, str]] = set()


class _OldPath(types.ModuleType):
    """A moved module: every name is read from its new place."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        new_home, names = MOVED[self.__name__]
        if name in names:
            return _resolve(names[name] if ":" in names[name] else f"{names[name]}:{name}")
        try:
            return getattr(importlib.import_module(new_home), name)
        except AttributeError:
            raise AttributeError(
                f"{self.__name__} moved to {new_home}, which has no {name!r}: it was removed or "
                f"renamed; see the API reference (make docs) for {new_home}"
            ) from None

    def __dir__(self) -> list[str]:
        new_home, names = MOVED[self.__name__]
        return sorted(set(dir(importlib.import_module(new_home))) | set(names))


class _OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers for the names in :data:`MOVED` and :data:`WITHDRAWN`, and nothing else."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname in MOVED or fullname in WITHDRAWN:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        if spec.name in WITHDRAWN:
            raise ImportError(WITHDRAWN[spec.name], name=spec.name)
        return _OldPath(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        new_home, _ = MOVED[module.__name__]
        module.__path__ = []  # a package: its own old submodules are found through this finder
        module.__doc__ = f"Moved: import {new_home} instead."
        warnings.warn(
            f"{module.__name__} moved to {new_home}: import it from there",
            DeprecationWarning,
            stacklevel=2,  # warnings skips the import machinery's frames
        )


def install() -> None:
    """Add the old-path finder to :data:`sys.meta_path` once (``import interp`` calls this).

    It goes last, so a module that exists is always found by the usual finders first.

    Example:
        >>> install(); install()
        >>> sum(isinstance(f, _OldPathFinder) for f in sys.meta_path)
        1

    Returns:
        None.
    """
    if not any(isinstance(f, _OldPathFinder) for f in sys.meta_path):
        sys.meta_path.append(_OldPathFinder())
