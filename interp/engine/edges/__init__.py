"""The edge engine: every receiver reads its own input, so one edge can be edited.

:mod:`~interp.engine.edges.graph` (senders, receivers and the edges between them),
:mod:`~interp.engine.edges.task` (an edge task's checked inputs, its cost and first passes),
:mod:`~interp.engine.edges.run` (a forward with per-receiver inputs),
:mod:`~interp.engine.edges.sums` (the edits that pass adds to its receivers' inputs),
:mod:`~interp.engine.edges.cost` (what an edge analysis holds and runs),
:mod:`~interp.engine.edges.passes` (masked and patched forwards over edges) and
:mod:`~interp.engine.edges.gradients` (attribution patching's backward passes).
"""
