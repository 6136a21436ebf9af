"""The floor every other package stands on: no model kinds, no analyses.

:mod:`~interp.core.errors` (the one error type), :mod:`~interp.core.glossary` (one word, one
meaning), :mod:`~interp.core.checks` and :mod:`~interp.core.head_checks` (input checks that name
the problem and the fix), :mod:`~interp.core.protocol` (what a hooked model is),
:mod:`~interp.core.hooks` (hook names and labels), :mod:`~interp.core.memory` (bytes, budgets
and the free memory), :mod:`~interp.core.precision` (dtypes and tolerances),
:mod:`~interp.core.metrics` (what a patch is scored by), :mod:`~interp.core.shapes` (tensor
shape aliases) and :mod:`~interp.core.paths` (where files go).
"""
