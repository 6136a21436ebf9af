"""Why a head attends: its pre-softmax scores split exactly by where query and key came from.

:mod:`~interp.analysis.heads.qk.attribution` (the entry point,
:func:`~interp.analysis.qk_attribution`: its prompts in chunks under the budget),
:mod:`~interp.analysis.heads.qk.shares` (one batch's rows, checked against the model's scores),
:mod:`~interp.analysis.heads.qk.inputs` (each position's residual pieces),
:mod:`~interp.analysis.heads.qk.features` (one residual dictionary's features),
:mod:`~interp.analysis.heads.qk.writers` and :mod:`~interp.analysis.heads.qk.stream` (the
stream split into its writers' dictionaries' features, tokens' embeddings and errors),
:mod:`~interp.analysis.heads.qk.cells` (query piece x key piece products),
:mod:`~interp.analysis.heads.qk.interventions` (each cell checked by editing it) and
:mod:`~interp.analysis.heads.qk.bands` (the score split over rotary frequency bands).
"""
