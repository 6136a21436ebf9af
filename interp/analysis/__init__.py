"""Analyses written once for every hooked model (loaded lazily, one module each)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "head_scores": "interp.analysis.induction",
    "induction_scores": "interp.analysis.induction",
    "previous_token_scores": "interp.analysis.induction",
    "duplicate_token_scores": "interp.analysis.induction",
    "probe_tokens": "interp.analysis.induction",
    "qk_circuit": "interp.analysis.circuits",
    "ov_circuit": "interp.analysis.circuits",
    "k_composition_circuit": "interp.analysis.circuits",
    "copying_scores": "interp.analysis.circuits",
    "diagonal_fraction": "interp.analysis.circuits",
    "composition_scores": "interp.analysis.composition",
    "in_context_learning_score": "interp.analysis.icl",
    "ablate_heads": "interp.analysis.ablation",
    "ablate_head_groups": "interp.analysis.ablation",
    "loss_metric": "interp.analysis.ablation",
    "patch_heads": "interp.analysis.ablation",
    "logit_diff_metric": "interp.analysis.ablation",
    "zero_head_hooks": "interp.analysis.ablation",
    "encode_word": "interp.analysis.words",
    "WordTokens": "interp.analysis.words",
    "word_states": "interp.analysis.sense_states",
    "sense_similarity": "interp.analysis.sense_states",
    "nearest_neighbour_probe": "interp.analysis.sense_probe",
    "clue_attention": "interp.analysis.clue_attention",
    "Subspaces": "interp.analysis.subspace",
    "subspaces": "interp.analysis.subspace",
    "null_space_dimension": "interp.analysis.subspace",
    "factored_subspaces": "interp.analysis.subspace",
    "head_subspaces": "interp.analysis.subspace",
    "null_space_probe": "interp.analysis.null_probe",
    "read_fraction": "interp.analysis.null_probe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interp.analysis' has no attribute {name!r}")
