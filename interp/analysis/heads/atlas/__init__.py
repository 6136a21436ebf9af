"""The head atlas: every head's scores beside controls, and the roles they earn.

:mod:`~interp.analysis.heads.atlas.table` (the entry point, :func:`head_atlas`),
:mod:`~interp.analysis.heads.atlas.probe` (its passes over the probe prompts) and
:mod:`~interp.analysis.heads.atlas.roles` (a role needs its control beaten and an effect size).
"""
