"""Per-head analyses: scores from attention patterns (:mod:`~.scores`, :mod:`~.stripes`,
:mod:`~.patterns`, :mod:`~.icl`), circuits read from the weights (:mod:`~.weights`,
:mod:`~.composition`, :mod:`~.subspace`, :mod:`~.null_probe`, :mod:`~.positional`,
:mod:`~.circuit_scores`), why a head attends: its scores split exactly by where its query
and key came from (:mod:`~.qk_attribution`, on :mod:`~.qk_inputs` and :mod:`~.qk_cells`),
checked by intervention (:mod:`~.qk_interventions`) and split over rotary bands
(:mod:`~.rotary`), and the atlas of every head (:mod:`~.atlas`, its passes in
:mod:`~.atlas_probe`)."""
