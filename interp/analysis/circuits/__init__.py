"""Edges between components: circuits and their forms, path patching, edge attribution
(EAP, EAP-IG, exact), circuit evaluation, the smallest circuit reaching a target, and the default
circuit task."""
