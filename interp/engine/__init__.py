"""The one engine every intervention runs on.

:mod:`~interp.engine.sites` and :mod:`~interp.engine.sweep` (single-activation
edits in exact sweeps), :mod:`~interp.engine.ablations` (what replaces an
activation), :mod:`~interp.engine.direction` (noising / denoising),
:mod:`~interp.engine.batching` (edits per pass under one memory budget, costs
in forward-equivalents, the work limit), :mod:`~interp.engine.chunks` (prompts in chunks
under the budget, each analysis's footprint and its estimate), :mod:`~interp.engine.cache` (stopped
forwards and the cache check), :mod:`~interp.engine.graph`,
:mod:`~interp.engine.edge_run` and :mod:`~interp.engine.edges` (each receiver
its own input), :mod:`~interp.engine.gradients` and
:mod:`~interp.engine.tasks` (an edge task's checked inputs and first passes).
Every model question goes to the model's runtime (:mod:`interp.runtime`).
"""
