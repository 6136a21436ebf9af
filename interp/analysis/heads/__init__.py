"""Per-head analyses: scores from attention patterns (:mod:`~.scores`, :mod:`~.stripes`,
:mod:`~.patterns`, :mod:`~.icl`) and circuits read from the weights (:mod:`~.weights`,
:mod:`~.composition`, :mod:`~.subspace`, :mod:`~.null_probe`)."""
