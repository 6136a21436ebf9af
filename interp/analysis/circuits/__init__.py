"""Edges between components: circuits and their forms, path patching, edge attribution
(EAP, EAP-IG, exact), circuit evaluation, and the default circuit task."""
