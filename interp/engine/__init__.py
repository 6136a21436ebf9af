"""The engines every intervention runs on, around one shared core.

Two engines: :mod:`~interp.engine.sweeps` (single-activation edits in exact sweeps) and
:mod:`~interp.engine.edges` (each receiver its own input, so single edges can be edited).
Shared: :mod:`~interp.engine.ablations` (what replaces an activation),
:mod:`~interp.engine.direction` (noising / denoising), :mod:`~interp.engine.batching` (edits
per pass under one memory budget, costs in forward-equivalents, the work limit),
:mod:`~interp.engine.chunks` (prompts in chunks under the budget, each analysis's footprint
and its estimate) and :mod:`~interp.engine.cache` (stopped forwards and the cache check).
Every model question goes to the model's runtime (:mod:`interp.runtime`).
"""
