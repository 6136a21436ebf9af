"""Hooked models: toy heads, attention-only transformers (loaded lazily)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AttnOnlyConfig": "interp.models.attn_only",
    "AttnOnlyTransformer": "interp.models.attn_only",
    "attention": "interp.models.toy",
    "toy_model": "interp.models.toy",
    "OneHeadSense": "interp.models.toy",
    "load_induction_model": "interp.models.checkpoints",
    "load_model": "interp.models.pretrained",
    "list_models": "interp.models.pretrained",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interp.models' has no attribute {name!r}")
