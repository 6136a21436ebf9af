"""Analyses written once for every hooked model (loaded lazily, one module each).

Every function takes the model first, then (when it runs the model) the
``tokens``; every option is keyword-only, and every function that runs the
model takes ``cache=`` and reads from it instead of re-running. Results are
tidy DataFrames: one row per head with ``layer, head, label`` (``L{l}H{h}``)
first, then the values. Inputs are checked before the first forward pass;
bad ones raise :class:`interp.InterpError` saying how to fix the call.

Glossary (one word, one meaning, everywhere):

==================  ===========================================================
``model``           a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``,
                    weights ``W_E, W_Q, ..., W_U`` (:class:`interp.protocol.HookedModel`)
``tokens``          ``[batch, pos]`` integer ids (``[pos]`` is one sequence)
``heads``           an iterable of ``(layer, head)`` pairs or ``"L1H4"`` labels;
                    ``None`` means every head
``layer``/``head``  a block index and a head index (``layer`` is always a block)
``stage``           a word-state index: 0 = token embedding, ``l + 1`` = after block ``l``
``loss_mask``       ``[batch, pos]`` bool: which positions count (the predictions a
                    loss averages, or the query rows a score averages)
``positions``       where an intervention applies: ints (negative from the end) or a
                    ``[pos]`` bool mask; ``None`` means every position; ``"each"``
                    (edge attribution and circuit evaluation): one edge per position
``component``       which of a head's maps: ``"Q"``, ``"K"``, ``"V"`` (and ``"O"``,
                    ``"QK"``, ``"OV"`` for subspaces)
``embedding``       ``"token"`` (``W_E``) or ``"positional"`` (``W_pos``), for circuits
``stripes``         ``"induction"``, ``"previous_token"``, ``"duplicate_token"``
``convention``      how a stripe becomes a score: ``"interp"``, ``"transformer_lens"``,
                    ``"arena"`` (:mod:`interp.analysis.induction`)
``method``          ``"zero"``, ``"mean"``, ``"resample"`` ablation (``"patch"`` too,
                    for attribution)
``metric``          a :class:`~interp.analysis.metrics.Metric` (``loss_metric``,
                    ``logit_diff_metric``) or any ``metric(logits, tokens) -> scalar``
``cache``           an ActivationCache (or dict of hook name to tensor) of ``tokens``
``seed``            the seed of every random draw; same seed, same numbers
==================  ===========================================================

Example:
    >>> from interp.analysis import head_scores
    >>> from interp.models import load_model
    >>> list(head_scores(load_model("induction-2l")).columns)
    ['layer', 'head', 'label', 'induction', 'previous_token', 'duplicate_token']
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "head_scores": "interp.analysis.induction",
    "induction_scores": "interp.analysis.induction",
    "previous_token_scores": "interp.analysis.induction",
    "duplicate_token_scores": "interp.analysis.induction",
    "pattern_scores": "interp.analysis.induction",
    "probe_tokens": "interp.analysis.induction",
    "stripe_mask": "interp.analysis.induction",
    "attention_patterns": "interp.analysis.patterns",
    "qk_circuit": "interp.analysis.circuits",
    "ov_circuit": "interp.analysis.circuits",
    "k_composition_circuit": "interp.analysis.circuits",
    "effective_embedding": "interp.analysis.circuits",
    "copying_scores": "interp.analysis.circuits",
    "diagonal_fraction": "interp.analysis.circuits",
    "previous_position_attention": "interp.analysis.circuits",
    "composition_scores": "interp.analysis.composition",
    "per_token_loss": "interp.analysis.icl",
    "in_context_learning_score": "interp.analysis.icl",
    "Metric": "interp.analysis.metrics",
    "loss_metric": "interp.analysis.metrics",
    "logit_diff_metric": "interp.analysis.metrics",
    "ablate_heads": "interp.analysis.ablation",
    "ablate_head_groups": "interp.analysis.ablation",
    "zero_head_hooks": "interp.analysis.ablation",
    "patch_heads": "interp.analysis.patching",
    "attribute_heads": "interp.analysis.attribution",
    "estimate_agreement": "interp.analysis.attribution",
    "encode_word": "interp.analysis.words",
    "ordinary_word_ids": "interp.analysis.words",
    "WordTokens": "interp.analysis.words",
    "word_states": "interp.analysis.sense_states",
    "sense_similarity": "interp.analysis.sense_states",
    "nearest_neighbour_probe": "interp.analysis.sense_probe",
    "clue_attention": "interp.analysis.clue",
    "Subspaces": "interp.analysis.subspace",
    "subspaces": "interp.analysis.subspace",
    "null_space_dimension": "interp.analysis.subspace",
    "factored_subspaces": "interp.analysis.subspace",
    "head_subspaces": "interp.analysis.subspace",
    "null_space_probe": "interp.analysis.null_probe",
    "direct_logit_attribution": "interp.analysis.dla",
    "patch_components": "interp.analysis.component_patching",
    "ablate_mlps": "interp.analysis.layer_ablation",
    "ablate_layers": "interp.analysis.layer_ablation",
    "circuit_graph": "interp.analysis.graph",
    "Circuit": "interp.analysis.graph",
    "load_circuit": "interp.analysis.graph",
    "path_patch": "interp.analysis.path_patching",
    "attribute_edges": "interp.analysis.edge_attribution",
    "edge_agreement": "interp.analysis.edge_attribution",
    "evaluate_circuit": "interp.analysis.circuit_eval",
    "circuit_curve": "interp.analysis.circuit_eval",
    "find_circuit": "interp.analysis.circuit_eval",
    "logit_lens": "interp.analysis.lens",
    "read_fraction": "interp.analysis.null_probe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interp.analysis' has no attribute {name!r}")
