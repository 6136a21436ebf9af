"""Per-head analyses: scores from attention patterns (:mod:`~.scores`, :mod:`~.stripes`,
:mod:`~.patterns`, :mod:`~.icl`), circuits read from the weights (:mod:`~.weights`,
:mod:`~.composition`, :mod:`~.subspace`, :mod:`~.null_probe`, :mod:`~.positional`,
:mod:`~.circuit_scores`), why a head attends (:mod:`~.qk_attribution`, :mod:`~.rotary`) and
the atlas of every head (:mod:`~.atlas`, its passes in :mod:`~.atlas_probe`)."""
