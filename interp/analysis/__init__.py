"""Analyses written once for every hooked model (loaded lazily, one module each).

Every function takes the model first, then (when it runs the model) the
``tokens``; every option is keyword-only, and every function that runs the
model takes ``cache=`` and reads from it instead of re-running. Results are
tidy DataFrames: one row per head with ``layer, head, label`` (``L{l}H{h}``)
first, then the values. Inputs are checked before the first forward pass;
bad ones raise :class:`interp.InterpError` saying how to fix the call.

The analyses are grouped by what they share: :mod:`~interp.analysis.heads`
(scores from attention patterns, and weight-based circuits), :mod:`~interp.analysis.components`
(ablation, patching, attribution, direct logit attribution and the lens: what
each component does, on the exact engine), :mod:`~interp.analysis.circuits` (the
graph of edges, path patching, edge attribution and circuit evaluation),
:mod:`~interp.analysis.senses` (the word-sense analyses) and
:mod:`~interp.analysis.generation` (what the model writes, under interventions). They run on
:mod:`interp.engine`, which runs every kind of model through
:mod:`interp.runtime`.

Glossary (one word, one meaning, everywhere; :mod:`interp.core.glossary`):

GLOSSARY

Example:
    >>> from interp.analysis import head_scores
    >>> from interp.models import load_model
    >>> list(head_scores(load_model("induction-2l")).columns)
    ['layer', 'head', 'label', 'induction', 'previous_token', 'duplicate_token']
"""

from __future__ import annotations

import importlib
from typing import Any

from interp.core.glossary import rst as _glossary
from interp.core.moved import renamed

__doc__ = (__doc__ or "").replace("\nGLOSSARY\n", "\n" + _glossary() + "\n")

_EXPORTS = {
    "head_scores": "interp.analysis.heads.scores",
    "induction_scores": "interp.analysis.heads.scores",
    "previous_token_scores": "interp.analysis.heads.scores",
    "duplicate_token_scores": "interp.analysis.heads.scores",
    "pattern_scores": "interp.analysis.heads.scores",
    "probe_tokens": "interp.analysis.heads.scores",
    "stripe_mask": "interp.analysis.heads.stripes",
    "attention_patterns": "interp.analysis.heads.patterns",
    "qk_circuit": "interp.analysis.heads.weight_circuits",
    "ov_circuit": "interp.analysis.heads.weight_circuits",
    "k_composition_circuit": "interp.analysis.heads.weight_circuits",
    "effective_embedding": "interp.analysis.heads.weight_circuits",
    "copying_scores": "interp.analysis.heads.weight_circuits",
    "diagonal_fraction": "interp.analysis.heads.weight_circuits",
    "previous_position_attention": "interp.analysis.heads.weight_circuits",
    "composition_scores": "interp.analysis.heads.composition",
    "qk_attribution": "interp.analysis.heads.qk.attribution",
    "qk_interventions": "interp.analysis.heads.qk.interventions",
    "rotary_bands": "interp.analysis.heads.qk.bands",
    "feature_head_attribution": "interp.analysis.heads.feature_writers",
    "positional_kernel": "interp.analysis.heads.positional",
    "head_atlas": "interp.analysis.heads.atlas.table",
    "per_token_loss": "interp.analysis.heads.icl",
    "in_context_learning_score": "interp.analysis.heads.icl",
    "Metric": "interp.core.metrics",
    "loss_metric": "interp.core.metrics",
    "logit_diff_metric": "interp.core.metrics",
    "ablate_heads": "interp.analysis.components.ablation",
    "ablate_head_groups": "interp.analysis.components.ablation",
    "zero_head_hooks": "interp.analysis.components.ablation",
    "patch_heads": "interp.analysis.components.patching",
    "attribute_heads": "interp.analysis.components.attribution",
    "estimate_agreement": "interp.analysis.components.attribution",
    "encode_word": "interp.analysis.senses.words",
    "ordinary_word_ids": "interp.analysis.senses.words",
    "WordTokens": "interp.analysis.senses.words",
    "word_states": "interp.analysis.senses.states",
    "sense_similarity": "interp.analysis.senses.states",
    "nearest_neighbour_probe": "interp.analysis.senses.probe",
    "clue_attention": "interp.analysis.senses.clue",
    "Subspaces": "interp.analysis.heads.subspace",
    "subspaces": "interp.analysis.heads.subspace",
    "null_space_dimension": "interp.analysis.heads.subspace",
    "factored_subspaces": "interp.analysis.heads.subspace",
    "head_subspaces": "interp.analysis.heads.subspace",
    "null_space_probe": "interp.analysis.heads.null_probe",
    "direct_logit_attribution": "interp.analysis.components.dla",
    "patch_components": "interp.analysis.components.component_patching",
    "ablate_mlps": "interp.analysis.components.layer_ablation",
    "ablate_layers": "interp.analysis.components.layer_ablation",
    "build_graph": "interp.engine.edges.graph",
    "Circuit": "interp.analysis.circuits.circuit",
    "load_circuit": "interp.analysis.circuits.circuit",
    "path_patch": "interp.analysis.circuits.paths",
    "attribute_edges": "interp.analysis.circuits.edge_attribution",
    "edge_agreement": "interp.analysis.circuits.edge_attribution",
    "evaluate_circuit": "interp.analysis.circuits.evaluation",
    "circuit_curve": "interp.analysis.circuits.evaluation",
    "find_circuit": "interp.analysis.circuits.search",
    "logit_lens": "interp.analysis.components.lens",
    "read_fraction": "interp.analysis.heads.null_probe",
    "generate": "interp.analysis.generation.generating",
    "compare_generations": "interp.analysis.generation.compare",
    "Generation": "interp.analysis.generation.result",
    "HeadAblation": "interp.analysis.generation.head_edits",
    "Patch": "interp.analysis.generation.head_edits",
    "Steering": "interp.analysis.generation.interventions",
    "UserHook": "interp.analysis.generation.interventions",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    return renamed(__name__, name)  # an old name warns and names the new one, or AttributeError
