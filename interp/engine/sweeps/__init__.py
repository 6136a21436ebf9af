"""The sweep engine: one activation edited per run, many runs per pass.

:mod:`~interp.engine.sweeps.sites` (where an edit lands) and :mod:`~interp.engine.sweeps.sweep`
(the exact sweep: edits batched under the memory budget, resumed after the edited block).
"""
