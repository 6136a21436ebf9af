"""What a component does to the output: ablation, patching, attribution, direct logit
attribution and the logit lens, on the exact-sweep engine (:mod:`interp.engine`)."""
