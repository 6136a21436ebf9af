"""Per-head analyses: scores from attention patterns (:mod:`~.scores`, :mod:`~.stripes`,
:mod:`~.patterns`, :mod:`~.icl`), circuits read from the weights (:mod:`~.weight_circuits`,
:mod:`~.composition`, :mod:`~.subspace`, :mod:`~.null_probe`, :mod:`~.positional`,
:mod:`~.ov_scores`), why a head attends: its scores split exactly by where its query
and key came from (:mod:`~.qk.attribution`, on :mod:`~.qk.shares`, :mod:`~.qk.inputs` and
:mod:`~.qk.cells`), checked by intervention (:mod:`~.qk.interventions`) and split over rotary
bands (:mod:`~.qk.bands`), and the atlas of every head (:mod:`~.atlas.table`, its passes in
:mod:`~.atlas.probe`)."""
